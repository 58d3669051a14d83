package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestSwiGLUBackward compares with host.SwiGLUBackward on an awkward length. σ and 1 − σ
// come from exp of a non-positive argument (≤ 2 ulp for |g| ≤ 6 here) and a division, so each
// has relative error ≤ (6 + 2|g|)·u (u = 2⁻²⁴, the exp argument carries |g|·u); the
// products add 4u. 1 + g·(1 − σ) may cancel (near g ≈ −1.28), so the bound on dgate is
// relative to the magnitudes of its terms: (12 + 4|g|)·u·|dy·up|·σ·(1 + |g|·(1 − σ));
// dup = dy·g·σ: (10 + 2|g|)·u·|dup|.
func TestSwiGLUBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(61, 62))
	n := 1000 + 37
	gf, gd := randF32(rng, n, 6)
	uf, ud := randF32(rng, n, 2)
	yf, yd := randF32(rng, n, 1)
	gate := must(d.UploadFloat32("gate", gf, n)).T(t)
	up := must(d.UploadFloat32("up", uf, n)).T(t)
	dy := must(d.UploadFloat32("dy", yf, n)).T(t)
	dg := must(d.NewBuffer("dgate", gpu.F32, n)).T(t)
	du := must(d.NewBuffer("dup", gpu.F32, n)).T(t)
	for _, b := range []*gpu.Buffer{gate, up, dy, dg, du} {
		defer b.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.SwiGLUBackward(r, gate, up, dy, dg, du) }); err != nil {
		t.Fatal(err)
	}
	wg, wu, err := host.SwiGLUBackward(gd, ud, yd)
	if err != nil {
		t.Fatal(err)
	}
	const u = 1.0 / (1 << 24)
	bg := make([]float64, n)
	bu := make([]float64, n)
	for i, g := range gd {
		s := 1 / (1 + math.Exp(-g))
		bg[i] = (12 + 4*math.Abs(g)) * u * math.Abs(yd[i]*ud[i]) * s * (1 + math.Abs(g)*(1-s))
		bu[i] = (10 + 2*math.Abs(g)) * u * math.Abs(wu[i])
	}
	checkBound(t, "dgate", must(d.ReadFloat32(dg)).T(t), wg, bg)
	checkBound(t, "dup", must(d.ReadFloat32(du)).T(t), wu, bu)
	r := d.Begin()
	defer r.Discard()
	if err := gpu.SwiGLUBackward(r, gate, up, dy, dg, dg); err == nil {
		t.Error("dgate aliasing dup accepted")
	}
	short := must(d.NewBuffer("short", gpu.F32, n-1)).T(t)
	defer short.Release()
	if err := gpu.SwiGLUBackward(r, gate, up, short, dg, du); err == nil {
		t.Error("short dy accepted")
	}
}
