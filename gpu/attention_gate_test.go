package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestAttentionGate: sigmoid is one exp (≤ 3 + 2|g| ulp) and a division (1 ulp), then one
// product: relative error ≤ (3 + 2·8 + 2)·2u = 42u for |g| ≤ 8; checked as rtol 48u.
func TestAttentionGate(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(29, 30))
	n := 2*37*3*64 + 5
	of, od := randF32(rng, n, 3)
	gf, gd := randF32(rng, n, 8)
	o := must(d.UploadFloat32("o", of, n)).T(t)
	g := must(d.UploadFloat32("gate", gf, n)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, n)).T(t)
	defer o.Release()
	defer g.Release()
	defer y.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.AttentionGate(r, o, g, y) }); err != nil {
		t.Fatal(err)
	}
	want := must(host.AttentionGate(od, gd)).T(t)
	checkClose(t, "AttentionGate", must(d.ReadFloat32(y)).T(t), want, 1e-37, 48*u32)
	r := d.Begin()
	if err := gpu.AttentionGate(r, o, g, o); err == nil {
		t.Error("y aliasing o accepted")
	}
	short := must(d.NewBuffer("short", gpu.F32, n-1)).T(t)
	defer short.Release()
	if err := gpu.AttentionGate(r, o, short, y); err == nil {
		t.Error("length mismatch accepted")
	}
	r.Discard()
}
