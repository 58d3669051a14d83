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
	in, out, bufs, outs := runElementwise(t, d, rng, n, []float64{6, 2, 1}, 2, func(r *gpu.Recorder, in, out []*gpu.Buffer) error {
		return gpu.SwiGLUBackward(r, in[0], in[1], in[2], out[0], out[1])
	})
	gate, up, dy, dg, du := bufs[0], bufs[1], bufs[2], outs[0], outs[1]
	gd, ud, yd := in[0], in[1], in[2]
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
	checkBound(t, "dgate", out[0], wg, bg)
	checkBound(t, "dup", out[1], wu, bu)
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
