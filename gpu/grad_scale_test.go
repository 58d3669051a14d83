package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestGradScale: one f32 product per element, |err| ≤ u·|s·g| (s exact in f32 here).
func TestGradScale(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(93, 94))
	n := 3001
	f, dd := randF32(rng, n, 3)
	g := must(d.UploadFloat32("g", f, n)).T(t)
	defer g.Release()
	s := 0.3125
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.GradScale(r, g, s) }); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, n)
	for i, x := range dd {
		want[i] = s * x
	}
	checkClose(t, "s·g", must(d.ReadFloat32(g)).T(t), want, 0, 1.0/(1<<24))
	r := d.Begin()
	defer r.Discard()
	if err := gpu.GradScale(r, g, math.Inf(1)); err == nil {
		t.Error("infinite scale accepted")
	}
}
