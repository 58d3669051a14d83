package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestCausalConv1dSiLU: the pre-activation s is a sum of K = 4 f32 products, so
// |δs| ≤ (K+1)·u·Σ|w·x| ≤ 5·u·K·0.5·2 = 20u (|w| ≤ 0.5, |x| ≤ 2); silu' ≤ 1.1 carries it to
// ≤ 22u absolute. silu itself (one exp ≤ 3 + 2|s| ulp, a division, a product) adds a relative
// (8 + 2|s|)·2u ≤ 32u for |s| ≤ 4. Checked as atol 24u, rtol 40u. Windows of t = 37 and of
// t = 2 < K (every tap of the second token's left context crosses the window start), an odd
// channel count, and a poisoned previous window: any leak across the boundary would be huge.
func TestCausalConv1dSiLU(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(11, 12))
	const K = 4
	for _, tc := range []struct{ nb, t, c int }{{2, 37, 301}, {3, 2, 5}, {1, 1, 7}} {
		n := tc.nb * tc.t * tc.c
		xf, xd := randF32(rng, n, 2)
		wf, wd := randF32(rng, tc.c*K, 0.5)
		x := must(d.UploadFloat32("x", xf, tc.nb*tc.t, tc.c)).T(t)
		w := must(d.UploadFloat32("w", wf, tc.c, 1, K)).T(t)
		y := must(d.NewBuffer("y", gpu.F32, tc.nb*tc.t, tc.c)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.CausalConv1dSiLU(r, x, w, y, tc.nb, tc.t, tc.c, K) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.CausalConv1dSiLU(xd, tc.nb, tc.t, tc.c, wd, K)).T(t)
		checkClose(t, "CausalConv1dSiLU", must(d.ReadFloat32(y)).T(t), want, 24*u32, 40*u32)
		x.Release()
		w.Release()
		y.Release()
	}

	// Leak check: window 0 holds 1e4, window 1 small values; window 1's outputs must match
	// the host (which pads with zeros) to the same tolerance.
	nb, tt, c := 2, 5, 3
	xf := make([]float32, nb*tt*c)
	xd := make([]float64, len(xf))
	for i := range xf {
		if i < tt*c {
			xf[i] = 1e4
		} else {
			xf[i] = float32(i%5) * 0.25
		}
		xd[i] = float64(xf[i])
	}
	wf, wd := randF32(rng, c*K, 0.5)
	x := must(d.UploadFloat32("x", xf, nb*tt, c)).T(t)
	w := must(d.UploadFloat32("w", wf, c*K)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, nb*tt, c)).T(t)
	defer x.Release()
	defer w.Release()
	defer y.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.CausalConv1dSiLU(r, x, w, y, nb, tt, c, K) }); err != nil {
		t.Fatal(err)
	}
	want := must(host.CausalConv1dSiLU(xd, nb, tt, c, wd, K)).T(t)
	checkClose(t, "CausalConv1dSiLU window 1", must(d.ReadFloat32(y)).T(t)[tt*c:], want[tt*c:], 24*u32, 40*u32)

	r := d.Begin()
	if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, tt+1, c, K); err == nil {
		t.Error("wrong t accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, tt, c, K+1); err == nil {
		t.Error("w of the wrong length accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, x, nb, tt, c, K); err == nil {
		t.Error("in-place y accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, y, 0, tt, c, K); err == nil {
		t.Error("nb = 0 accepted")
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
	r.Discard()
}
