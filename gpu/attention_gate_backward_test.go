package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestAttentionGateBackward compares with host.AttentionGateBackward on n = 23·4·37 + 5
// values (not a multiple of the 256-thread workgroup), |gate| ≤ 8 so both branches of the
// overflow-free sigmoid and its saturated tails are hit. Bound, relative per element
// (u = 2⁻²⁴): e = exp(−|g|) is within (3 + 2|g|) ulp = (3 + 2|g|)·2u; the logarithmic
// sensitivity of σ and of σ(1−σ) = e/(1+e)² to e is at most 1; r = 1/(1+e) adds 2u (sum and
// division), squared 4u; the products e·r·r, dy·o·(…) or e·r, dy·σ add ≤ 4u. So
// |err| ≤ ((3 + 2|g|)·2 + 10)·u·|want| for do and dgate.
func TestAttentionGateBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(61, 62))
	n := 23*4*37 + 5
	of, od := randF32(rng, n, 3)
	gf, gd := randF32(rng, n, 8)
	dyf, dyd := randF32(rng, n, 1)
	o := must(d.UploadFloat32("o", of, n)).T(t)
	g := must(d.UploadFloat32("gate", gf, n)).T(t)
	dy := must(d.UploadFloat32("dy", dyf, n)).T(t)
	do := must(d.NewBuffer("do", gpu.F32, n)).T(t)
	dg := must(d.NewBuffer("dgate", gpu.F32, n)).T(t)
	for _, b := range []*gpu.Buffer{o, g, dy, do, dg} {
		defer b.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.AttentionGateBackward(r, o, g, dy, do, dg) }); err != nil {
		t.Fatal(err)
	}
	wdo, wdg, err := host.AttentionGateBackward(od, gd, dyd)
	if err != nil {
		t.Fatal(err)
	}
	bdo := make([]float64, n)
	bdg := make([]float64, n)
	for i := range bdo {
		k := ((3+2*math.Abs(gd[i]))*2 + 10) * u32
		bdo[i] = k * math.Abs(wdo[i])
		bdg[i] = k * math.Abs(wdg[i])
	}
	checkBound(t, "AttentionGateBackward do", must(d.ReadFloat32(do)).T(t), wdo, bdo)
	checkBound(t, "AttentionGateBackward dgate", must(d.ReadFloat32(dg)).T(t), wdg, bdg)

	r := d.Begin()
	defer r.Discard()
	short := must(d.NewBuffer("short", gpu.F32, n-1)).T(t)
	defer short.Release()
	u16 := must(d.NewBuffer("f16", gpu.F16, n)).T(t)
	defer u16.Release()
	for name, err := range map[string]error{
		"do is dy":    gpu.AttentionGateBackward(r, o, g, dy, dy, dg),
		"dgate is do": gpu.AttentionGateBackward(r, o, g, dy, do, do),
		"short gate":  gpu.AttentionGateBackward(r, o, short, dy, do, dg),
		"short dgate": gpu.AttentionGateBackward(r, o, g, dy, do, short),
		"f16 dy":      gpu.AttentionGateBackward(r, o, g, u16, do, dg),
		"nil o":       gpu.AttentionGateBackward(r, nil, g, dy, do, dg),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
}
