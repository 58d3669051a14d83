package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestAttentionBackward compares with host.AttentionBackward (checked by finite
// differences in host) given the same f32 inputs: q, k, v, dout random, out and lse from
// host.Attention rounded to f32. The bound is propagated per element from first-order f32
// rounding (u = 2⁻²⁴), computed here in float64:
//
//   - score s = (scale·q)·k, an hd-term dot in NS partial sums: |δs| ≤ (hd + 3)·u·scale·Σ|q k|
//     (+ the roundings of scale and of scale·q);
//   - p = exp(s − lse): relative error |δs| + u·|s − lse| + (3 + 2|s − lse|)·2u (exp's
//     accuracy in ulp);
//   - dp = dout·v and D = dout·out: hd-term dots, |δ| ≤ hd·u·Σ|terms|;
//   - ds = p·(dp − D): |δds| ≤ |δp|·|dp − D| + p·(|δdp| + |δD| + u·|dp − D|) + u·|ds|;
//   - dq = scale·Σ_j ds·k (t terms): scale·Σ_j(|δds|·|k| + (t + 1)·u·|ds k|) + u·|dq|;
//     dk = Σ ds·(scale·q) and dv = Σ p·dout over the group's g·t terms likewise.
//
// Geometries: nb 2, t 23, nh 4 over nkv 2, head_dim 64 (2 dim slices, blocks of 128 rows
// and tiles of 16, the last partial); head_dim 256 (8 slices, nh 4, nkv 2, t 19 over tiles
// of 8); head_dim 37 (dims not a multiple of 4: padded vec4s) with nh 3 over nkv 1 and t 5
// (shorter than a tile); head_dim 64 with nh = nkv = 2 (no group sum: pass 1 writes dk and
// dv directly), t 9, taking out and lse from gpu.Attention as the student step does (both
// backwards then see those values, so the bound above still applies).
//
// One line per implementation: the tiled kernels (AttentionBackward, with Attention's
// forward), the lane-blocked form of CPU adapters (AttentionBackwardLanes with
// AttentionLanes, where they run: head_dim a multiple of 4, so not 37; it adds nh 4 over
// nkv 1 with t 17 over 8-row blocks) and the cooperative-matrix kernels
// (AttentionBackwardCoopmat with AttentionCoopmat, where tensor cores are available: the
// bound of their f16 operands, attentionBackwardBound's coop form, against the exact inputs
// and, tighter, against the host on the f16 operands they multiply; they add t = 70 over
// two 64-row blocks and a case with v ×2²⁰, k ×2⁻²⁰ and dout ×2⁻⁴⁰ — gradients far below
// f16's range — where every gradient must scale exactly; the "coopmat-gputiles" line runs
// them, up to head_dim 64, under the GPUs' tiles, gpuTiles).
func TestAttentionBackward(t *testing.T) {
	for _, impl := range attentionBackwardImpls {
		t.Run(impl.name, func(t *testing.T) {
			d := gputest.Open(t)
			skipForm(t, d, impl.lanes, impl.coop)
			testAttentionBackward(t, impl)
		})
	}
}

// attentionBackwardImpl is an implementation of the attention backward with its forward.
type attentionBackwardImpl struct {
	name     string
	forward  func(r *gpu.Recorder, q, k, v, out, lse *gpu.Buffer, dims gpu.AttentionDims) error
	backward func(r *gpu.Recorder, q, k, v, out, lse, dout, dq, dk, dv *gpu.Buffer, dims gpu.AttentionDims) error
	lanes    bool // runs on devices with a probed subgroup size only, head_dim a multiple of 4
	coop     bool // the cooperative-matrix kernels: tensor cores only, f16 operands
	maxHD    int  // when not 0, the largest head_dim it runs (lavapipe compiles the GPUs' dk/dv
	// kernel for head_dim 256 in about three minutes)
}

var attentionBackwardImpls = []attentionBackwardImpl{
	{"tiled", gpu.Attention, gpu.AttentionBackward, false, false, 0},
	{"lanes", gpu.AttentionLanes, gpu.AttentionBackwardLanes, true, false, 0},
	{"coopmat", gpu.AttentionCoopmat, gpu.AttentionBackwardCoopmat, false, true, 0},
	{"coopmat-gputiles", gpuTiles(gpu.AttentionCoopmat), gpuTiles(gpu.AttentionBackwardCoopmat), false, true, 64},
}

func testAttentionBackward(t *testing.T, impl attentionBackwardImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(67, 68))
	for _, tc := range []struct {
		nb, t, nh, nkv, hd int
		gpuFwd             bool
		ke, ve, ge         int // powers of two scaling k, v and dout (the coopmat line's cases)
		coop               bool
	}{{2, 23, 4, 2, 64, false, 0, 0, 0, false}, {1, 19, 4, 2, 256, false, 0, 0, 0, false}, {3, 5, 3, 1, 37, false, 0, 0, 0, false},
		{2, 9, 2, 2, 64, true, 0, 0, 0, false}, {2, 17, 4, 1, 12, true, 0, 0, 0, false},
		{1, 70, 2, 1, 64, true, 0, 0, 0, true}, {2, 23, 4, 2, 64, false, -20, 20, -40, true}} {
		if impl.lanes && tc.hd%4 != 0 || tc.coop && !impl.coop || impl.maxHD != 0 && tc.hd > impl.maxHD {
			continue
		}
		t.Run(fmt.Sprintf("nb=%d t=%d nh=%d nkv=%d hd=%d gpuForward=%v scales=%d,%d,%d", tc.nb, tc.t, tc.nh, tc.nkv, tc.hd, tc.gpuFwd, tc.ke, tc.ve, tc.ge), func(t *testing.T) {
			nb, tt, nh, nkv, hd := tc.nb, tc.t, tc.nh, tc.nkv, tc.hd
			rows := nb * tt
			nq, nk := rows*nh*hd, rows*nkv*hd
			qf, qd := randF32(rng, nq, 3) // |q| ≤ 3: a sharp softmax
			kf, kd := randF32(rng, nk, 1)
			vf, vd := randF32(rng, nk, 1)
			gf, gd := randF32(rng, nq, 1)
			scalePow2(pow2Scaled{kf, kd, tc.ke}, pow2Scaled{vf, vd, tc.ve}, pow2Scaled{gf, gd, tc.ge})
			o64, l64, err := host.Attention(qd, kd, vd, nb, tt, nh, nkv, hd)
			if err != nil {
				t.Fatal(err)
			}
			round := func(x []float64) ([]float32, []float64) {
				f := make([]float32, len(x))
				y := make([]float64, len(x))
				for i, v := range x {
					f[i] = float32(v)
					y[i] = float64(f[i])
				}
				return f, y
			}
			of, od := round(o64)
			lf, ld := round(l64)
			q := must(d.UploadFloat32("q", qf, rows, nh, hd)).T(t)
			k := must(d.UploadFloat32("k", kf, rows, nkv, hd)).T(t)
			v := must(d.UploadFloat32("v", vf, rows, nkv, hd)).T(t)
			o := must(d.UploadFloat32("out", of, rows, nh, hd)).T(t)
			lse := must(d.UploadFloat32("lse", lf, rows, nh)).T(t)
			g := must(d.UploadFloat32("dout", gf, rows, nh, hd)).T(t)
			dq := must(d.NewBuffer("dq", gpu.F32, rows, nh, hd)).T(t)
			dk := must(d.NewBuffer("dk", gpu.F32, rows, nkv, hd)).T(t)
			dv := must(d.NewBuffer("dv", gpu.F32, rows, nkv, hd)).T(t)
			for _, b := range []*gpu.Buffer{q, k, v, o, lse, g, dq, dk, dv} {
				defer b.Release()
			}
			if tc.gpuFwd {
				if err := d.Run(func(r *gpu.Recorder) error {
					return impl.forward(r, q, k, v, o, lse, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
				}); err != nil {
					t.Fatal(err)
				}
				for i, x := range must(d.ReadFloat32(o)).T(t) {
					od[i] = float64(x)
				}
				for i, x := range must(d.ReadFloat32(lse)).T(t) {
					ld[i] = float64(x)
				}
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				return impl.backward(r, q, k, v, o, lse, g, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
			}); err != nil {
				t.Fatal(err)
			}
			ef := 0.0
			if impl.coop {
				ef = e16
			}
			got := [3][]float32{must(d.ReadFloat32(dq)).T(t), must(d.ReadFloat32(dk)).T(t), must(d.ReadFloat32(dv)).T(t)}
			check := func(what string, q, k, v, g []float64, ef float64) {
				wq, wk, wv, err := host.AttentionBackward(q, k, v, od, ld, g, nb, tt, nh, nkv, hd)
				if err != nil {
					t.Fatal(err)
				}
				bq, bk, bv := attentionBackwardBound(q, k, v, od, ld, g, nb, tt, nh, nkv, hd, impl.coop, ef)
				for i := range bq {
					bq[i] += u32 * math.Abs(wq[i])
				}
				checkBound(t, what+" dq", got[0], wq, bq)
				checkBound(t, what+" dk", got[1], wk, bk)
				checkBound(t, what+" dv", got[2], wv, bv)
			}
			check("AttentionBackward", qd, kd, vd, gd, ef)
			if impl.coop { // the host on the f16 operands the kernels multiply
				check("… vs the host on f16 operands:", roundF16Blocks(qd, nb, tt, nh, hd, false), roundF16Blocks(kd, nb, tt, nkv, hd, false),
					roundF16Blocks(vd, nb, tt, nkv, hd, false), roundF16Blocks(gd, nb, tt, nh, hd, false), 0)
			}
		})
	}
}

// attentionBackwardBound returns the first-order error bounds of dq, dk and dv described at
// TestAttentionBackward (without the final u·|dq| term) for the f32 kernels (coop false), or
// for the cooperative-matrix kernels (coop true): their operands q, k, v and dout rounded to
// f16 (|δx| ≤ ef·|x| + sub16·max|x|, ef = e16 for exact inputs, 0 for inputs already rounded
// as the kernels round them), ds rounded to f16 with its tile's scale (≤ e16·|ds| +
// sub16·max|ds| of the head) and p to f16(2¹⁴·p) for dv (≤ e16·p + 2⁻³⁹), and every f32
// accumulation's (n+1)·u doubled (coopRel: an accumulator that may truncate).
func attentionBackwardBound(q, k, v, out, lse, dout []float64, nb, t, nh, nkv, hd int, coop bool, ef float64) (bq, bk, bv []float64) {
	const u = u32
	bq = make([]float64, len(q))
	bk = make([]float64, len(k))
	bv = make([]float64, len(v))
	scale := 1 / math.Sqrt(float64(hd))
	group := nh / nkv
	nacc := float64(group*t + 1)
	acc, sub, ep16, sub39 := 1.0, 0.0, 0.0, 0.0
	if coop {
		acc, sub, ep16, sub39 = 2, sub16, e16, 0x1p-39
	}
	mq, mk, mv, mg := maxAbs(q), maxAbs(k), maxAbs(v), maxAbs(dout)
	abs := func(x []float64) (s float64) {
		for _, y := range x {
			s += math.Abs(y)
		}
		return s
	}
	for b := 0; b < nb; b++ {
		for h := 0; h < nh; h++ {
			kh := h / group
			mds := 0.0 // the head's largest |ds| (bounds every tile's)
			for pass := range 2 {
				for i := 0; i < t; i++ {
					ri := (b*t+i)*nh + h
					qi, oi, gi := q[ri*hd:][:hd], out[ri*hd:][:hd], dout[ri*hd:][:hd]
					aq, ag := abs(qi), abs(gi)
					var D, aD float64
					for c := range hd {
						D += gi[c] * oi[c]
						aD += math.Abs(gi[c] * oi[c])
					}
					eD := float64(hd) * u * aD
					if coop {
						// The kernels form D from the f32 dout: against a reference on the f16
						// dout (the tight check) D differs by up to e16·Σ|dout·out|.
						eD += e16 * aD
					}
					for j := 0; j <= i; j++ {
						rj := (b*t+j)*nkv + kh
						kj, vj := k[rj*hd:][:hd], v[rj*hd:][:hd]
						var s, as, dp, adp float64
						for c := range hd {
							s += qi[c] * kj[c]
							as += math.Abs(qi[c] * kj[c])
							dp += gi[c] * vj[c]
							adp += math.Abs(gi[c] * vj[c])
						}
						s *= scale
						x := s - lse[ri]
						p := math.Exp(x)
						dd := dp - D
						ds := p * dd
						if pass == 0 {
							mds = math.Max(mds, math.Abs(ds))
							continue
						}
						es := acc*float64(hd+3)*u*scale*as + 2*u*math.Abs(s) + scale*(2*ef*as+sub*(mq*abs(kj)+mk*aq))
						ep := p * (es + u*math.Abs(x) + (3+2*math.Abs(x))*2*u)
						edp := acc*float64(hd)*u*adp + 2*ef*adp + sub*(mg*abs(vj)+mv*ag)
						eds := ep*math.Abs(dd) + p*(edp+eD+u*math.Abs(dd)) + u*math.Abs(ds) + ep16*math.Abs(ds) + sub*mds
						for c := range hd {
							bq[ri*hd+c] += scale * (eds*math.Abs(kj[c]) + ef*math.Abs(ds*kj[c]) + sub*mk*math.Abs(ds) + acc*float64(t+1)*u*math.Abs(ds*kj[c]))
							bk[rj*hd+c] += scale * (math.Abs(qi[c])*(eds+ef*math.Abs(ds)+acc*(nacc+1)*u*math.Abs(ds)) + sub*mq*math.Abs(ds))
							bv[rj*hd+c] += math.Abs(gi[c])*(ep+ep16*p+sub39+acc*nacc*u*p) + ef*p*math.Abs(gi[c]) + sub*mg*p
						}
					}
				}
			}
		}
	}
	return bq, bk, bv
}

func TestAttentionBackwardErrors(t *testing.T) {
	for _, impl := range attentionBackwardImpls {
		t.Run(impl.name, func(t *testing.T) {
			skipForm(t, gputest.Open(t), impl.lanes, impl.coop)
			testAttentionBackwardErrors(t, impl.backward)
		})
	}
}

func testAttentionBackwardErrors(t *testing.T, backward func(r *gpu.Recorder, q, k, v, out, lse, dout, dq, dk, dv *gpu.Buffer, dims gpu.AttentionDims) error) {
	d := gputest.Open(t)
	nb, tt, nh, nkv, hd := 1, 3, 2, 1, 8
	rows := nb * tt
	mk := func(name string, shape ...int) *gpu.Buffer {
		b := must(d.NewBuffer(name, gpu.F32, shape...)).T(t)
		t.Cleanup(b.Release)
		return b
	}
	q, o, g, dq := mk("q", rows, nh, hd), mk("out", rows, nh, hd), mk("dout", rows, nh, hd), mk("dq", rows, nh, hd)
	k, v, dk, dv := mk("k", rows, nkv, hd), mk("v", rows, nkv, hd), mk("dk", rows, nkv, hd), mk("dv", rows, nkv, hd)
	lse := mk("lse", rows, nh)
	big := mk("big", 512)
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"t":          backward(r, q, k, v, o, lse, g, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt + 1, NH: nh, NKV: nkv, HeadDim: hd}),
		"nh % nkv":   backward(r, q, k, v, o, lse, g, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: 3, HeadDim: hd}),
		"nb 0":       backward(r, q, k, v, o, lse, g, dq, dk, dv, gpu.AttentionDims{NB: 0, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
		"headDim":    backward(r, big, big, big, big, lse, big, big, big, big, gpu.AttentionDims{NB: 1, T: 1, NH: 1, NKV: 1, HeadDim: 512}),
		"dq is q":    backward(r, q, k, v, o, lse, g, q, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
		"dk is dv":   backward(r, q, k, v, o, lse, g, dq, dv, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
		"lse is dq":  backward(r, q, k, v, o, dq, g, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
		"dk swapped": backward(r, q, k, v, o, lse, g, dk, dq, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
		"nil dout":   backward(r, q, k, v, o, lse, nil, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd}),
	})
}

// BenchmarkAttentionBackward: the geometries and kernel forms of BenchmarkAttention (one
// window of t = 512, nh = 8 over nkv = 2, head_dim 256; with NVG_BENCH_LARGE=1 also nb = 8
// windows with the 0.8B's and the 4B's heads, with NVG_BENCH_BIG=1 t = 4096, nh = 16, nkv = 4; wgsl: AttentionBackward, coopmat:
// AttentionBackwardCoopmat with its packs).
// Reports tokens/s (whole call), gpu-µs (the three passes' kernel time from the profiler,
// each pass logged) and GFLOP/s over that time of the backward's five causal t×t×hd products (scores again, dp, dv, dq, dk: 10·hd flops per
// (query, key ≤ query) pair and head). H200, 2026-11-30: 3.1 ms (860 GFLOP/s) at t = 512
// and 139 ms (2.47 TFLOP/s; the forward: 36 ms) at t = 4096.
func BenchmarkAttentionBackward(b *testing.B) {
	eachAttentionBenchSize(b, benchAttentionBackward)
}

func benchAttentionBackward(b *testing.B, nb, tt, nh, nkv, hd int, coop bool) {
	d := gputest.Open(b)
	rng := rand.New(rand.NewPCG(69, 70))
	rows := nb * tt
	up := func(name string, n int, shape ...int) *gpu.Buffer {
		f, _ := randF32(rng, n, 1)
		x := must(d.UploadFloat32(name, f, shape...)).T(b)
		b.Cleanup(x.Release)
		return x
	}
	q, o, g := up("q", rows*nh*hd, rows, nh, hd), up("out", rows*nh*hd, rows, nh, hd), up("dout", rows*nh*hd, rows, nh, hd)
	k, v := up("k", rows*nkv*hd, rows, nkv, hd), up("v", rows*nkv*hd, rows, nkv, hd)
	dq, dk, dv := up("dq", rows*nh*hd, rows, nh, hd), up("dk", rows*nkv*hd, rows, nkv, hd), up("dv", rows*nkv*hd, rows, nkv, hd)
	lse := up("lse", rows*nh, rows, nh)
	if err := d.Run(func(r *gpu.Recorder) error {
		return gpu.Attention(r, q, k, v, o, lse, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
	}); err != nil {
		b.Fatal(err)
	}
	bw := gpu.AttentionBackward
	if coop {
		bw = gpu.AttentionBackwardCoopmat
	}
	run := func() {
		if err := d.Run(func(r *gpu.Recorder) error {
			return bw(r, q, k, v, o, lse, g, dq, dk, dv, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
		}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.ReadFloat32(dv); err != nil { // waits for the GPU
			b.Fatal(err)
		}
	}
	run() // compile the pipelines outside the timing
	benchWarm(run)
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if err := d.SetProfiling(true); err != nil {
		return
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	run()
	var total float64
	for _, kt := range d.Profile() {
		if strings.HasPrefix(kt.Name, "AttentionBackward") {
			total += kt.Total.Seconds()
			b.Logf("%s: %.1f µs", kt.Name, kt.Total.Seconds()*1e6)
		}
	}
	if total > 0 {
		b.ReportMetric(total*1e6, "gpu-µs")
		b.ReportMetric(float64(nb*nh*tt*(tt+1)/2*10*hd)/total/1e9, "GFLOP/s")
	}
}
