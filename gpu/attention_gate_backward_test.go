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
	in, out, bufs, outs := runElementwise(t, d, rng, n, []float64{3, 8, 1}, 2, func(r *gpu.Recorder, in, out []*gpu.Buffer) error {
		return gpu.AttentionGateBackward(r, in[0], in[1], in[2], out[0], out[1])
	})
	o, g, dy, do, dg := bufs[0], bufs[1], bufs[2], outs[0], outs[1]
	wdo, wdg, err := host.AttentionGateBackward(in[0], in[1], in[2])
	if err != nil {
		t.Fatal(err)
	}
	bdo := make([]float64, n)
	bdg := make([]float64, n)
	for i, gi := range in[1] {
		k := ((3+2*math.Abs(gi))*2 + 10) * u32
		bdo[i] = k * math.Abs(wdo[i])
		bdg[i] = k * math.Abs(wdg[i])
	}
	checkBound(t, "AttentionGateBackward do", out[0], wdo, bdo)
	checkBound(t, "AttentionGateBackward dgate", out[1], wdg, bdg)

	r := d.Begin()
	defer r.Discard()
	short := must(d.NewBuffer("short", gpu.F32, n-1)).T(t)
	defer short.Release()
	u16 := must(d.NewBuffer("f16", gpu.F16, n)).T(t)
	defer u16.Release()
	checkErrors(t, r, map[string]error{
		"do is dy":    gpu.AttentionGateBackward(r, o, g, dy, dy, dg),
		"dgate is do": gpu.AttentionGateBackward(r, o, g, dy, do, do),
		"short gate":  gpu.AttentionGateBackward(r, o, short, dy, do, dg),
		"short dgate": gpu.AttentionGateBackward(r, o, g, dy, do, short),
		"f16 dy":      gpu.AttentionGateBackward(r, o, g, u16, do, dg),
		"nil o":       gpu.AttentionGateBackward(r, nil, g, dy, do, dg),
	})
}
