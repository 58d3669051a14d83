package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestSplitQueryGate: a copy, so the tolerance is zero. headDim = 37 and 3 heads make a
// halves-of-the-row split (the DESIGN.md §11 pitfall) disagree everywhere but in head 0.
func TestSplitQueryGate(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(23, 24))
	rows, heads, hd := 2*37, 3, 37
	f, fd := randF32(rng, rows*heads*2*hd, 2)
	qg := must(d.UploadFloat32("qg", f, rows, heads, 2*hd)).T(t)
	q := must(d.NewBuffer("q", gpu.F32, rows, heads, hd)).T(t)
	g := must(d.NewBuffer("gate", gpu.F32, rows, heads, hd)).T(t)
	defer qg.Release()
	defer q.Release()
	defer g.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.SplitQueryGate(r, qg, q, g, rows, heads, hd) }); err != nil {
		t.Fatal(err)
	}
	wq, wg, err := host.SplitQueryGate(fd, rows, heads, hd)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "SplitQueryGate q", must(d.ReadFloat32(q)).T(t), wq, 0, 0)
	checkClose(t, "SplitQueryGate gate", must(d.ReadFloat32(g)).T(t), wg, 0, 0)
	r := d.Begin()
	if err := gpu.SplitQueryGate(r, qg, q, g, rows, heads, hd+1); err == nil {
		t.Error("wrong headDim accepted")
	}
	if err := gpu.SplitQueryGate(r, qg, q, q, rows, heads, hd); err == nil {
		t.Error("q and gate aliased accepted")
	}
	r.Discard()
}
