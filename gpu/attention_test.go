package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
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
// One line per implementation: the tiled kernel (Attention) and the lane-blocked form of CPU
// adapters (AttentionLanes, where it runs: head_dim a multiple of 4, so not 37; it adds a
// geometry of odd t over several 8-row blocks).
func TestAttention(t *testing.T) {
	for _, impl := range []struct {
		name  string
		run   func(r *gpu.Recorder, q, k, v, out, lse *gpu.Buffer, dims gpu.AttentionDims) error
		lanes bool
	}{{"tiled", gpu.Attention, false}, {"lanes", gpu.AttentionLanes, true}} {
		t.Run(impl.name, func(t *testing.T) {
			if impl.lanes {
				skipNoLanes(t, gputest.Open(t))
			}
			testAttention(t, impl.run, impl.lanes)
		})
	}
}

func testAttention(t *testing.T, run func(r *gpu.Recorder, q, k, v, out, lse *gpu.Buffer, dims gpu.AttentionDims) error, lanes bool) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(27, 28))
	for _, tc := range []struct{ nb, t, nh, nkv, hd int }{{2, 37, 3, 1, 64}, {1, 19, 4, 2, 256}, {1, 70, 2, 1, 256}, {3, 1, 2, 2, 37}, {2, 21, 4, 2, 12}} {
		if lanes && tc.hd%4 != 0 {
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
		q := must(d.UploadFloat32("q", qf, rows, tc.nh, tc.hd)).T(t)
		k := must(d.UploadFloat32("k", kf, rows, tc.nkv, tc.hd)).T(t)
		v := must(d.UploadFloat32("v", vf, rows, tc.nkv, tc.hd)).T(t)
		o := must(d.NewBuffer("out", gpu.F32, rows, tc.nh, tc.hd)).T(t)
		lse := must(d.NewBuffer("lse", gpu.F32, rows, tc.nh)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error {
			return run(r, q, k, v, o, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t, NH: tc.nh, NKV: tc.nkv, HeadDim: tc.hd})
		}); err != nil {
			t.Fatal(err)
		}
		wo, wl, err := host.Attention(qd, kd, vd, tc.nb, tc.t, tc.nh, tc.nkv, tc.hd)
		if err != nil {
			t.Fatal(err)
		}
		tol := float64(4*2*tc.hd+64) * u32 // |q| ≤ 4, |k|, |v| ≤ 1
		checkClose(t, "Attention out", must(d.ReadFloat32(o)).T(t), wo, tol, 0)
		checkClose(t, "Attention lse", must(d.ReadFloat32(lse)).T(t), wl, tol, tol)
		r := d.Begin()
		if err := run(r, q, k, v, o, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t + 1, NH: tc.nh, NKV: tc.nkv, HeadDim: tc.hd}); err == nil {
			t.Error("wrong t accepted")
		}
		if err := run(r, q, k, v, q, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t, NH: tc.nh, NKV: tc.nkv, HeadDim: tc.hd}); err == nil {
			t.Error("out aliasing q accepted")
		}
		if err := run(r, q, k, v, o, lse, gpu.AttentionDims{NB: tc.nb, T: tc.t, NH: tc.nh + 1, NKV: tc.nkv, HeadDim: tc.hd}); err == nil {
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
	if err := run(r, x, x, x, x, x, gpu.AttentionDims{NB: 1, T: 1, NH: 1, NKV: 1, HeadDim: 512}); err == nil {
		t.Error("headDim 512 accepted")
	}
	r.Discard()
}

// BenchmarkAttention: one window of t = 512 tokens, nh = 8 query heads over nkv = 2 KV
// heads, head_dim 256 (Qwen3.5's); with NVG_BENCH_BIG=1 also t = 4096 with nh = 16, nkv = 4.
// Reports tokens/s (whole call), gpu-µs (kernel time from the profiler) and the causal
// score+value GFLOP/s over the GPU time (4·hd flops per (query, key ≤ query) pair and head).
func BenchmarkAttention(b *testing.B) {
	eachAttentionBenchSize(b, benchAttention)
}

// eachAttentionBenchSize runs bench as a sub-benchmark per attention geometry: one window of
// t = 512, nh = 8 over nkv = 2, head_dim 256, and with NVG_BENCH_BIG=1 t = 4096, nh = 16,
// nkv = 4.
func eachAttentionBenchSize(b *testing.B, bench func(b *testing.B, nb, tt, nh, nkv, hd int)) {
	for _, sz := range []struct {
		nb, t, nh, nkv, hd int
		big                bool
	}{{1, 512, 8, 2, 256, false}, {1, 4096, 16, 4, 256, true}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,nh=%d,nkv=%d,hd=%d", sz.nb, sz.t, sz.nh, sz.nkv, sz.hd), func(b *testing.B) {
			if sz.big && os.Getenv("NVG_BENCH_BIG") != "1" {
				b.Skip("model-sized run: set NVG_BENCH_BIG=1")
			}
			bench(b, sz.nb, sz.t, sz.nh, sz.nkv, sz.hd)
		})
	}
}

func benchAttention(b *testing.B, nb, tt, nh, nkv, hd int) {
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
	benchKernel(b, d, "Attention", rows, func(r *gpu.Recorder) error {
		return gpu.Attention(r, q, k, v, o, lse, gpu.AttentionDims{NB: nb, T: tt, NH: nh, NKV: nkv, HeadDim: hd})
	}, lse)
	flops := float64(nb*nh*tt*(tt+1)/2) * 4 * float64(hd)
	for _, kt := range d.Profile() {
		if kt.Name == "Attention" && kt.Total > 0 {
			b.ReportMetric(flops*float64(kt.Calls)/kt.Total.Seconds()/1e9, "GFLOP/s")
		}
	}
}
