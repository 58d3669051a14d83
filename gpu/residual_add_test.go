package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestResidualAdd: one f32 addition per element, so the GPU result is the correctly rounded
// sum of the f32 inputs: |err| ≤ 2⁻²⁴·|x+y| (half an ulp), checked as rtol 6e-8.
func TestResidualAdd(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 255, 257, 1000, 70001} {
		xf, xd := randF32(rng, n, 3)
		yf, yd := randF32(rng, n, 3)
		x := must(d.UploadFloat32("x", xf, n)).T(t)
		y := must(d.UploadFloat32("y", yf, n)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.ResidualAdd(r, x, y) }); err != nil {
			t.Fatal(err)
		}
		got := must(d.ReadFloat32(x)).T(t)
		want := must(host.ResidualAdd(xd, yd)).T(t)
		checkClose(t, "ResidualAdd", got, want, 1e-30, 6e-8)
		x.Release()
		y.Release()
	}
}

// TestResidualAddErrors: bad launcher input is an error, not a panic or an abort.
func TestResidualAddErrors(t *testing.T) {
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 4, 3)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 11)).T(t)
	h := must(d.NewBuffer("h", gpu.F16, 12)).T(t)
	defer x.Release()
	defer h.Release()
	r := d.Begin()
	if err := gpu.ResidualAdd(r, x, y); err == nil {
		t.Error("length mismatch accepted")
	}
	if err := gpu.ResidualAdd(r, x, h); err == nil {
		t.Error("f16 y accepted")
	}
	if err := gpu.ResidualAdd(r, x, x); err == nil {
		t.Error("aliased x, y accepted")
	}
	y.Release()
	if err := gpu.ResidualAdd(r, x, y); err == nil {
		t.Error("released y accepted")
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
	if err := r.Submit(); err != nil {
		t.Fatal(err)
	}
}
