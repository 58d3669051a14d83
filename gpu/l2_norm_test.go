package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestL2Norm: the f32 sum of n squares has relative error ≤ (n/64 + 6)·u here (64 serial
// partial sums of ≤ n/64 terms, then a 6-level tree), the square root halves it, inverseSqrt
// adds ≤ 2 ulp (4u) and the scale and the product 2u: |err| ≤ ((n/64 + 6)/2 + 6)·u·|y|;
// checked as rtol 16u for n ≤ 300. Rows of dk = 128 (the model's) and an awkward n = 77, the
// query scale dk^−½, and a row of zeros (y = 0, the ε keeps it finite).
func TestL2Norm(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, tc := range []struct {
		rows, n int
		scale   float64
	}{{2 * 37 * 3, 128, 1 / math.Sqrt(128)}, {2 * 37 * 3, 128, 1}, {41, 77, 1}, {5, 300, 0.5}} {
		xf, xd := randF32(rng, tc.rows*tc.n, 3)
		for i := 0; i < tc.n; i++ { // row 0 all zeros
			xf[i], xd[i] = 0, 0
		}
		x := must(d.UploadFloat32("x", xf, tc.rows, tc.n)).T(t)
		y := must(d.NewBuffer("y", gpu.F32, tc.rows, tc.n)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.L2Norm(r, x, y, tc.rows, tc.n, tc.scale) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.L2Norm(xd, tc.rows, tc.n, tc.scale)).T(t)
		checkClose(t, "L2Norm", must(d.ReadFloat32(y)).T(t), want, 1e-37, 16*u32)
		r := d.Begin()
		if err := gpu.L2Norm(r, x, y, tc.rows, tc.n+1, tc.scale); err == nil {
			t.Error("wrong n accepted")
		}
		if err := gpu.L2Norm(r, x, x, tc.rows, tc.n, tc.scale); err == nil {
			t.Error("in-place y accepted")
		}
		if err := gpu.L2Norm(r, x, y, tc.rows, tc.n, math.Inf(1)); err == nil {
			t.Error("infinite scale accepted")
		}
		r.Discard()
		x.Release()
		y.Release()
	}
}
