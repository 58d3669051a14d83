package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestAttention compares causal GQA attention and its log-sum-exp with the host's float64
// reference. Tolerance: a score is an hd-term f32 dot product of the pre-scaled q with k, so
// |δs| ≤ (hd + 1)·u·scale·Σ|q_d k_d| ≤ 4(hd + 1)·√hd·u worst case with |q| ≤ 4, |k| ≤ 1
// (scale = hd^−½), and ~4·√hd·u as a random walk of roundings. exp adds ≤ (3 + 2|x|) ulp;
// the online rescaling by exp(m_old − m_new) only reorders those roundings; out is a convex
// combination of values (|v| ≤ 1), so |δout| ≲ |δs| + 40u and |δlse| ≲ |δs| + 40u. Checked
// as atol (8·hd + 64)·u for out and lse (plus the same relative term for lse): well above
// the random-walk size, below the worst case. Geometries: head_dim 64 with nh 3 over nkv 1
// (GQA) and two windows of t = 37 (3 key blocks of 16, the last partial; rows past t in the
// 256-row query block idle); head_dim 256 (8 dim slices per row, 8-key blocks) with nh 4,
// nkv 2, t = 19 and with t = 70 (two 64-row query blocks, 9 key blocks); head_dim 37 (not a
// multiple of 4: zero-padded dims) with t = 1 and 3 windows.
//
// One line per implementation: the tiled kernel (Attention), the lane-blocked form of CPU
// adapters (AttentionLanes, where it runs: head_dim a multiple of 4, so not 37; it adds a
// geometry of odd t over several 8-row blocks) and the cooperative-matrix kernel
// (AttentionCoopmat, where tensor cores are available: f16 operands, so its bound is
// attentionCoopBound's, per element; it adds a case whose q (×2³⁰) and v (×2⁴⁰) exceed
// f16's range and whose k (×2⁻³⁰) would flush to zero in f16 without the packing's scales);
// its "coopmat-gputiles" line runs the same under the GPUs' tiles (gpuTiles).
func TestAttention(t *testing.T) {
	for _, impl := range []attentionImpl{{"tiled", gpu.Attention, false, false}, {"lanes", gpu.AttentionLanes, true, false},
		{"coopmat", gpu.AttentionCoopmat, false, true}, {"coopmat-gputiles", gpuTiles(gpu.AttentionCoopmat), false, true}} {
		t.Run(impl.name, func(t *testing.T) {
			d := gputest.Open(t)
			skipForm(t, d, impl.lanes, impl.coop)
			if impl.coop {
				coop0 := gpu.CoopDispatches()
				defer func() {
					if gpu.CoopDispatches() == coop0 {
						t.Error("no cooperative-matrix kernel recorded")
					}
				}()
			}
			testAttention(t, impl)
		})
	}
}

// gpuTiles is f run under the GPUs' cooperative-matrix tiles (gpu.SetCoopGPUTiles): the
// "coopmat-gputiles" lines run on lavapipe the tile shapes a GPU takes (64-row tiles, 8
// subgroups), which the CPU adapter's own small tiles do not exercise.
func gpuTiles[F any](f F) F {
	v := reflect.ValueOf(f)
	return reflect.MakeFunc(v.Type(), func(args []reflect.Value) []reflect.Value {
		defer gpu.SetCoopGPUTiles(true)()
		return v.Call(args)
	}).Interface().(F)
}

// attentionImpl is one implementation of the attention forward under testAttention.
type attentionImpl struct {
	name        string
	run         func(r *gpu.Recorder, q, k, v, out, lse *gpu.Buffer, dims gpu.AttentionDims) error
	lanes, coop bool // lanes: head_dim a multiple of 4 only; coop: f16 operands (attentionCoopBound)
}

// attentionCases are testAttention's geometries and the powers of two scaling q, k and v
// (the last case is the cooperative-matrix line's only).
var attentionCases = []struct{ nb, t, nh, nkv, hd, qe, ke, ve int }{{2, 37, 3, 1, 64, 0, 0, 0}, {1, 19, 4, 2, 256, 0, 0, 0},
	{1, 70, 2, 1, 256, 0, 0, 0}, {3, 1, 2, 2, 37, 0, 0, 0}, {2, 21, 4, 2, 12, 0, 0, 0}, {2, 37, 3, 1, 64, 30, -30, 40}}

func testAttention(t *testing.T, impl attentionImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(27, 28))
	for _, tc := range attentionCases {
		if impl.lanes && tc.hd%4 != 0 || !impl.coop && tc.qe|tc.ke|tc.ve != 0 {
			continue
		}
		rows := tc.nb * tc.t
		qf, qd := randF32(rng, rows*tc.nh*tc.hd, 1)
		kf, kd := randF32(rng, rows*tc.nkv*tc.hd, 1)
		vf, vd := randF32(rng, rows*tc.nkv*tc.hd, 1)
		// |q| ≤ 4: sharper softmax, so the running max and the rescaling matter.
		for i := range qf {
			qf[i] *= 4
			qd[i] = float64(qf[i])
		}
		scalePow2(pow2Scaled{qf, qd, tc.qe}, pow2Scaled{kf, kd, tc.ke}, pow2Scaled{vf, vd, tc.ve})
		q := must(d.UploadFloat32("q", qf, rows, tc.nh, tc.hd)).T(t)
		k := must(d.UploadFloat32("k", kf, rows, tc.nkv, tc.hd)).T(t)
		v := must(d.UploadFloat32("v", vf, rows, tc.nkv, tc.hd)).T(t)
		o := must(d.NewBuffer("out", gpu.F32, rows, tc.nh, tc.hd)).T(t)
		lse := must(d.NewBuffer("lse", gpu.F32, rows, tc.nh)).T(t)
		dims := gpu.AttentionDims{NB: tc.nb, T: tc.t, NH: tc.nh, NKV: tc.nkv, HeadDim: tc.hd}
		if err := d.Run(func(r *gpu.Recorder) error { return impl.run(r, q, k, v, o, lse, dims) }); err != nil {
			t.Fatal(err)
		}
		wo, wl, err := host.Attention(qd, kd, vd, tc.nb, tc.t, tc.nh, tc.nkv, tc.hd)
		if err != nil {
			t.Fatal(err)
		}
		if impl.coop {
			// Against the exact inputs, within the bound of their f16 rounding; and against the
			// host on the f16 operands the kernel multiplies, within the bound of the rest
			// (P's rounding and f32 arithmetic): a tighter check of the indexing and masking.
			gotO, gotL := must(d.ReadFloat32(o)).T(t), must(d.ReadFloat32(lse)).T(t)
			bo, bl := attentionCoopBound(qd, kd, vd, wl, tc.nb, tc.t, tc.nh, tc.nkv, tc.hd, e16)
			checkBound(t, fmt.Sprintf("AttentionCoopmat out %+v", tc), gotO, wo, bo)
			checkBound(t, fmt.Sprintf("AttentionCoopmat lse %+v", tc), gotL, wl, bl)
			q16, k16 := roundF16Blocks(qd, tc.nb, tc.t, tc.nh, tc.hd, false), roundF16Blocks(kd, tc.nb, tc.t, tc.nkv, tc.hd, false)
			v16 := roundF16Blocks(vd, tc.nb, tc.t, tc.nkv, tc.hd, false)
			wo, wl, err = host.Attention(q16, k16, v16, tc.nb, tc.t, tc.nh, tc.nkv, tc.hd)
			if err != nil {
				t.Fatal(err)
			}
			bo, bl = attentionCoopBound(q16, k16, v16, wl, tc.nb, tc.t, tc.nh, tc.nkv, tc.hd, 0)
			checkBound(t, "… out vs the host on f16 operands", gotO, wo, bo)
			checkBound(t, "… lse vs the host on f16 operands", gotL, wl, bl)
		} else {
			tol := float64(4*2*tc.hd+64) * u32 // |q| ≤ 4, |k|, |v| ≤ 1
			checkClose(t, "Attention out", must(d.ReadFloat32(o)).T(t), wo, tol, 0)
			checkClose(t, "Attention lse", must(d.ReadFloat32(lse)).T(t), wl, tol, tol)
		}
		r := d.Begin()
		if err := impl.run(r, q, k, v, o, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t + 1, NH: tc.nh, NKV: tc.nkv, HeadDim: tc.hd}); err == nil {
			t.Error("wrong t accepted")
		}
		if err := impl.run(r, q, k, v, q, lse, dims); err == nil {
			t.Error("out aliasing q accepted")
		}
		if err := impl.run(r, q, k, v, o, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t, NH: tc.nh + 1, NKV: tc.nkv, HeadDim: tc.hd}); err == nil {
			t.Error("wrong nh accepted")
		}
		if r.Len() != 0 {
			t.Errorf("%d dispatches recorded by failing calls", r.Len())
		}
		r.Discard()
		for _, b := range []*gpu.Buffer{q, k, v, o, lse} {
			b.Release()
		}
	}
	r := d.Begin()
	x := must(d.NewBuffer("x", gpu.F32, 512)).T(t)
	defer x.Release()
	if err := impl.run(r, x, x, x, x, x, gpu.AttentionDims{NB: 1, T: 1, NH: 1, NKV: 1, HeadDim: 512}); err == nil {
		t.Error("headDim 512 accepted")
	}
	r.Discard()
}

// e16 is the error of one f32 → f16 conversion relative to the value: 2⁻¹¹ when rounding to
// nearest, taken as a full f16 ulp, 2⁻¹⁰, to allow a conversion that does not (as coopRel).
const e16 = 1.0 / (1 << 10)

// sub16 is the absolute error of a packed operand's f16 subnormals relative to the largest
// |value| of its block (coopmat_pack_heads.wgsl: the block's largest value lands in
// [2¹⁴, 2¹⁵), the subnormal step is 2⁻²⁴, half of it 2⁻²⁵·2⁻¹⁴ of the largest value).
const sub16 = 1.0 / (1 << 39)

// attentionCoopBound returns the per-element error bounds of AttentionCoopmat's out and lse
// (q, k, v as the kernel sees them, lse the host's), from first-order rounding, computed in
// float64: every packed value x has |δx| ≤ ef·|x| + sub16·max|x| (ef = e16 for exact inputs,
// 0 for inputs already rounded as the kernel rounds them, roundF16Blocks; the tensor's
// largest value bounds its block's); products of f16 are exact and the f32 accumulation of n
// terms in any order adds ≤ 2(n+1)·u of Σ|terms| (doubled, as coopRel, for an accumulator
// that truncates). So, with as = Σ_d|q_d k_d|:
//
//   - δs_ij = scale·(2ef·as + sub16·(max|q|·Σ|k_j| + max|k|·Σ|q_i|) + 2(hd+2)·u·as) + 4u·|s_ij|
//     (the block scales and scale multiply in f32);
//   - δlse_i = max_j δs_ij + (t+8)·u + 2u·|lse_i| (the f32 online sum, its log);
//   - p = e^{s − lse} then f16(2¹⁴·p): δp/p ≤ δs + δlse + e16 + 8u, plus the subnormal step
//     2⁻³⁹ of p;
//   - out_ic = Σ_j p_ij·v_jc over t terms: δout ≤ Σ_j p_ij·|v_jc|·(δs_ij + δlse_i + e16 + ef
//   - 2(t+6)·u) + 2⁻³⁹·Σ_j |v_jc| + sub16·max|v|.
func attentionCoopBound(q, k, v, lse []float64, nb, t, nh, nkv, hd int, ef float64) (bo, bl []float64) {
	const u = u32
	bo = make([]float64, len(q))
	bl = make([]float64, len(lse))
	scale := 1 / math.Sqrt(float64(hd))
	mq, mk, mv := maxAbs(q), maxAbs(k), maxAbs(v)
	es := make([]float64, t)
	for b := range nb {
		for h := range nh {
			kh := h / (nh / nkv)
			for i := range t {
				ri := (b*t+i)*nh + h
				qi := q[ri*hd:][:hd]
				var aq float64
				for _, x := range qi {
					aq += math.Abs(x)
				}
				emax := 0.0
				for j := 0; j <= i; j++ {
					kj := k[((b*t+j)*nkv+kh)*hd:][:hd]
					var s, as, ak float64
					for c := range hd {
						s += qi[c] * kj[c]
						as += math.Abs(qi[c] * kj[c])
						ak += math.Abs(kj[c])
					}
					es[j] = scale*(2*ef*as+sub16*(mq*ak+mk*aq)+2*float64(hd+2)*u*as) + 4*u*math.Abs(s*scale)
					emax = math.Max(emax, es[j])
				}
				el := emax + float64(t+8)*u + 2*u*math.Abs(lse[ri])
				bl[ri] = el
				for j := 0; j <= i; j++ {
					kj := k[((b*t+j)*nkv+kh)*hd:][:hd]
					var s float64
					for c := range hd {
						s += qi[c] * kj[c]
					}
					p := math.Exp(s*scale - lse[ri])
					vj := v[((b*t+j)*nkv+kh)*hd:][:hd]
					for c := range hd {
						bo[ri*hd+c] += p*math.Abs(vj[c])*(es[j]+el+e16+ef+2*float64(t+6)*u) + 0x1p-39*math.Abs(vj[c])
					}
				}
				for c := range hd {
					bo[ri*hd+c] += sub16 * mv
				}
			}
		}
	}
	return bo, bl
}

// BenchmarkAttention: one window of t = 512 tokens, nh = 8 query heads over nkv = 2 KV
// heads, head_dim 256 (Qwen3.5's); with NVG_BENCH_LARGE=1 also the student step's batch of
// nb = 8 windows of t = 512 with the 0.8B's heads (nh = 8, nkv = 2) and the 4B's (nh = 16,
// nkv = 4), with NVG_BENCH_BIG=1 t = 4096 with nh = 16, nkv = 4; each for
// the kernel forms of NVG_TC_VARIANTS (wgsl: Attention, coopmat: AttentionCoopmat with its
// packs). Reports tokens/s (whole call), the GPU time of the call's kernels from the profiler
// (gpu-µs-all, and one metric per kernel) and GFLOP/s over it of the causal score+value
// products (4·hd flops per (query, key ≤ query) pair and head, whatever the form computes).
func BenchmarkAttention(b *testing.B) {
	eachAttentionBenchSize(b, benchAttention)
}

// eachAttentionBenchSize runs bench as a sub-benchmark per attention geometry and kernel
// form (eachTCVariant): one window of t = 512, nh = 8 over nkv = 2, head_dim 256; with
// NVG_BENCH_LARGE=1 nb = 8 such windows (0.8B) and nb = 8 with nh = 16, nkv = 4 (4B); with
// NVG_BENCH_BIG=1 t = 4096, nh = 16, nkv = 4.
func eachAttentionBenchSize(b *testing.B, bench func(b *testing.B, nb, tt, nh, nkv, hd int, coop bool)) {
	for _, sz := range []struct {
		nb, t, nh, nkv, hd int
		env                string
	}{{1, 512, 8, 2, 256, ""}, {8, 512, 8, 2, 256, "NVG_BENCH_LARGE"}, {8, 512, 16, 4, 256, "NVG_BENCH_LARGE"},
		{1, 4096, 16, 4, 256, "NVG_BENCH_BIG"}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,nh=%d,nkv=%d,hd=%d", sz.nb, sz.t, sz.nh, sz.nkv, sz.hd), func(b *testing.B) {
			if sz.env != "" && os.Getenv(sz.env) != "1" {
				b.Skip("model-sized run: set " + sz.env + "=1")
			}
			eachTCVariant(b, func(b *testing.B, coop bool) { bench(b, sz.nb, sz.t, sz.nh, sz.nkv, sz.hd, coop) })
		})
	}
}

func benchAttention(b *testing.B, nb, tt, nh, nkv, hd int, coop bool) {
	d := gputest.Open(b)
	rng := rand.New(rand.NewPCG(31, 32))
	rows := nb * tt
	qf, _ := randF32(rng, rows*nh*hd, 1)
	kf, _ := randF32(rng, rows*nkv*hd, 1)
	vf, _ := randF32(rng, rows*nkv*hd, 1)
	q := must(d.UploadFloat32("q", qf, rows, nh, hd)).T(b)
	k := must(d.UploadFloat32("k", kf, rows, nkv, hd)).T(b)
	v := must(d.UploadFloat32("v", vf, rows, nkv, hd)).T(b)
	o := must(d.NewBuffer("out", gpu.F32, rows, nh, hd)).T(b)
	lse := must(d.NewBuffer("lse", gpu.F32, rows, nh)).T(b)
	for _, x := range []*gpu.Buffer{q, k, v, o, lse} {
		defer x.Release()
	}
	run := gpu.Attention
	if coop {
		run = gpu.AttentionCoopmat
	}
	benchKernel(b, d, "", rows, func(r *gpu.Recorder) error {
		return run(r, q, k, v, o, lse, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
	}, lse)
	reportGFLOPs(b, d, "Attention", float64(nb*nh*tt*(tt+1)/2)*4*float64(hd))
}

// reportGFLOPs reports flops per call over the summed GPU time of the profiled kernels whose
// names start with prefix (the last profiled call; nothing without timestamp queries).
func reportGFLOPs(b *testing.B, d *gpu.Device, prefix string, flops float64) {
	var total float64
	for _, kt := range d.Profile() {
		if strings.HasPrefix(kt.Name, prefix) {
			total += kt.Total.Seconds() / float64(max(kt.Calls, 1))
		}
	}
	if total > 0 {
		b.ReportMetric(flops/total/1e9, "GFLOP/s")
	}
}

// TestAttentionAutoCoopmat: the seam. With tensor cores forced on (where available),
// AttentionAuto and AttentionBackwardAuto record the cooperative-matrix kernels and give the
// bits of AttentionCoopmat and AttentionBackwardCoopmat; forced off, they record none and
// give the bits of the WGSL kernel they fall back to (AttentionLanes on CPU adapters,
// Attention on GPUs).
func TestAttentionAutoCoopmat(t *testing.T) {
	d := gputest.Open(t)
	skipNoCoopmat(t, d)
	rng := rand.New(rand.NewPCG(29, 30))
	dims := gpu.AttentionDims{NB: 2, T: 19, NH: 4, NKV: 2, HeadDim: 64}
	rows := dims.NB * dims.T
	nq, nk := rows*dims.NH*dims.HeadDim, rows*dims.NKV*dims.HeadDim
	bs := newBufs(t, d)
	up := func(name string, n int) *gpu.Buffer {
		f, _ := randF32(rng, n, 1)
		return bs.up(name, f, n)
	}
	q, k, v, g := up("q", nq), up("k", nk), up("v", nk), up("dout", nq)
	wgslF, wgslB := gpu.Attention, gpu.AttentionBackward
	if gpu.AttentionLanesFits(d, dims) {
		wgslF, wgslB = gpu.AttentionLanes, gpu.AttentionBackwardLanes
	}
	run := func(fwd func(r *gpu.Recorder, q, k, v, out, lse *gpu.Buffer, dims gpu.AttentionDims) error,
		bwd func(r *gpu.Recorder, q, k, v, out, lse, dout, dq, dk, dv *gpu.Buffer, dims gpu.AttentionDims) error) (out [5][]float32, coop int) {
		o, lse := bs.nw("out", nq), bs.nw("lse", rows*dims.NH)
		dq, dk, dv := bs.nw("dq", nq), bs.nw("dk", nk), bs.nw("dv", nk)
		c0 := gpu.CoopDispatches()
		if err := d.Run(func(r *gpu.Recorder) error {
			if err := fwd(r, q, k, v, o, lse, dims); err != nil {
				return err
			}
			return bwd(r, q, k, v, o, lse, g, dq, dk, dv, dims)
		}); err != nil {
			t.Fatal(err)
		}
		for i, b := range []*gpu.Buffer{o, lse, dq, dk, dv} {
			out[i] = must(d.ReadFloat32(b)).T(t)
		}
		return out, gpu.CoopDispatches() - c0
	}
	same := func(what string, a, b [5][]float32) {
		for i := range a {
			for e := range a[i] {
				if math.Float32bits(a[i][e]) != math.Float32bits(b[i][e]) {
					t.Fatalf("%s: output %d element %d: %g, want %g", what, i, e, a[i][e], b[i][e])
				}
			}
		}
	}
	restore := gpu.SetTensorCores(true)
	auto, n := run(gpu.AttentionAuto, gpu.AttentionBackwardAuto)
	if n != 3 {
		t.Errorf("tensor cores on: %d cooperative-matrix kernels recorded, want 3", n)
	}
	ref, _ := run(gpu.AttentionCoopmat, gpu.AttentionBackwardCoopmat)
	same("Auto with tensor cores on", auto, ref)
	restore()
	defer gpu.SetTensorCores(false)()
	auto, n = run(gpu.AttentionAuto, gpu.AttentionBackwardAuto)
	if n != 0 {
		t.Errorf("tensor cores off: %d cooperative-matrix kernels recorded", n)
	}
	ref, _ = run(wgslF, wgslB)
	same("Auto with tensor cores off", auto, ref)
}
