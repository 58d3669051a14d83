package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGatedRMSNorm: the norm part is RMSNorm's arithmetic (sum of dv squares: ≤ (dv/64 + 6)·u
// with 64 partial sums and a 6-level tree, halved by the square root, inverseSqrt 4u, the
// division by n and three products 4u) and silu(z) adds (8 + 2|z|)·2u ≤ 32u for |z| ≤ 4:
// |err| ≤ ((dv/64 + 6)/2 + 8 + 32)·u·|y| ≈ 44u for dv = 128; checked as rtol 64u. The
// model's dv = 128 and an awkward dv = 37 (fewer values than threads), several heads, and
// the plain gain w (a (1+w) mix-up would be off by O(1)).
func TestGatedRMSNorm(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(21, 22))
	eps := 1e-6
	for _, tc := range []struct{ rows, hv, dv int }{{2 * 37, 3, 128}, {11, 5, 37}} {
		n := tc.rows * tc.hv * tc.dv
		xf, xd := randF32(rng, n, 2)
		zf, zd := randF32(rng, n, 4)
		wf, wd := randF32(rng, tc.dv, 1.5)
		x := must(d.UploadFloat32("x", xf, tc.rows, tc.hv, tc.dv)).T(t)
		z := must(d.UploadFloat32("z", zf, tc.rows, tc.hv, tc.dv)).T(t)
		w := must(d.UploadFloat32("w", wf, tc.dv)).T(t)
		y := must(d.NewBuffer("y", gpu.F32, tc.rows, tc.hv, tc.dv)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.GatedRMSNorm(r, x, z, w, y, tc.rows, tc.hv, tc.dv, eps) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.GatedRMSNorm(xd, zd, tc.rows, tc.hv, tc.dv, wd, eps)).T(t)
		checkClose(t, "GatedRMSNorm", must(d.ReadFloat32(y)).T(t), want, 1e-37, 64*u32)
		r := d.Begin()
		if err := gpu.GatedRMSNorm(r, x, z, w, y, tc.rows, tc.hv+1, tc.dv, eps); err == nil {
			t.Error("wrong hv accepted")
		}
		if err := gpu.GatedRMSNorm(r, x, z, w, x, tc.rows, tc.hv, tc.dv, eps); err == nil {
			t.Error("y aliasing x accepted")
		}
		if err := gpu.GatedRMSNorm(r, x, z, w, y, tc.rows, tc.hv, tc.dv, math.Inf(1)); err == nil {
			t.Error("infinite eps accepted")
		}
		r.Discard()
		for _, b := range []*gpu.Buffer{x, z, w, y} {
			b.Release()
		}
	}
}
