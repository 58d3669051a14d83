package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestSplitQueryGateBackward: the split is a permutation, so its backward is the inverse
// scatter and host.SplitQueryGate of the result must give back dq and dgate exactly
// (tolerance zero; every dqg element is checked since each is one of them). headDim = 37
// and 3 heads make a halves-of-the-row scatter disagree outside head 0.
func TestSplitQueryGateBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(63, 64))
	rows, heads, hd := 23, 3, 37
	n := rows * heads * hd
	qf, qd := randF32(rng, n, 2)
	gf, gd := randF32(rng, n, 2)
	dq := must(d.UploadFloat32("dq", qf, rows, heads, hd)).T(t)
	dg := must(d.UploadFloat32("dgate", gf, rows, heads, hd)).T(t)
	dqg := must(d.NewBuffer("dqg", gpu.F32, rows, heads, 2*hd)).T(t)
	for _, b := range []*gpu.Buffer{dq, dg, dqg} {
		defer b.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.SplitQueryGateBackward(r, dq, dg, dqg, rows, heads, hd) }); err != nil {
		t.Fatal(err)
	}
	got := must(d.ReadFloat32(dqg)).T(t)
	g64 := make([]float64, len(got))
	for i, v := range got {
		g64[i] = float64(v)
	}
	bq, bg, err := host.SplitQueryGate(g64, rows, heads, hd)
	if err != nil {
		t.Fatal(err)
	}
	f32 := func(x []float64) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(v)
		}
		return y
	}
	checkClose(t, "SplitQueryGateBackward dq", f32(bq), qd, 0, 0)
	checkClose(t, "SplitQueryGateBackward dgate", f32(bg), gd, 0, 0)

	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"headDim":        gpu.SplitQueryGateBackward(r, dq, dg, dqg, rows, heads, hd+1),
		"rows 0":         gpu.SplitQueryGateBackward(r, dq, dg, dqg, 0, heads, hd),
		"dq is dgate":    gpu.SplitQueryGateBackward(r, dq, dq, dqg, rows, heads, hd),
		"dqg wrong size": gpu.SplitQueryGateBackward(r, dq, dg, dq, rows, heads, hd),
	})
}
