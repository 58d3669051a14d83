package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestCausalConv1dSiLUBackward compares with host.CausalConv1dSiLUBackward at the model's
// K = 4 on two windows of t = 37 with 512 channels (Hk = 1, Hv = 2, dk = dv = 128: q, k, v),
// on windows shorter than the kernel (t = 2 < K − 1, nb = 3, 37 channels, where most taps
// fall outside the window) and on K = 1. A gradient leaking across windows (or a tap
// beyond the window's end) would be O(1) off. Bounds (u = 2⁻²⁴): the pre-activation s, a
// K-term f32 sum, is within e_s = (K + 1)·u·Σ|w x|; silu′(s) = σ(1 + s(1 − σ)) may cancel
// (near s ≈ −1.28), so its rounding is bounded relative to the term magnitudes,
// (12 + 4|s|)·u·σ·(1 + |s|(1 − σ)), plus 2·|silu″(s)|·e_s from the error in s; ds = dy·silu′
// adds u·|ds|; dx, a fused K-term sum of w·ds, is within Σ|w|·err(ds) + (K + 1)·u·Σ|w ds|.
func TestCausalConv1dSiLUBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(95, 96))
	const u = 1.0 / (1 << 24)
	for _, tc := range []struct{ nb, t, ch, K int }{{2, 37, 512, 4}, {3, 2, 37, 4}, {2, 5, 7, 1}} {
		t.Run(fmt.Sprintf("nb=%d t=%d channels=%d K=%d", tc.nb, tc.t, tc.ch, tc.K), func(t *testing.T) {
			nb, tt, ch, K := tc.nb, tc.t, tc.ch, tc.K
			n := nb * tt * ch
			xf, xd := randF32(rng, n, 2)
			wf, wd := randF32(rng, ch*K, 1)
			yf, yd := randF32(rng, n, 1)
			x := must(d.UploadFloat32("x", xf, nb*tt, ch)).T(t)
			w := must(d.UploadFloat32("w", wf, ch, 1, K)).T(t)
			dy := must(d.UploadFloat32("dy", yf, nb*tt, ch)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, nb*tt, ch)).T(t)
			for _, b := range []*gpu.Buffer{x, w, dy, dx} {
				defer b.Release()
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, nb, tt, ch, K)
			}); err != nil {
				t.Fatal(err)
			}
			want := must(host.CausalConv1dSiLUBackward(xd, nb, tt, ch, wd, K, yd)).T(t)
			// Per element of ds: its value and its error bound.
			ds := make([]float64, n)
			eds := make([]float64, n)
			for b := 0; b < nb; b++ {
				for tau := 0; tau < tt; tau++ {
					for c := 0; c < ch; c++ {
						var s, as float64
						for i := 0; i < K; i++ {
							if src := tau - K + 1 + i; src >= 0 {
								v := wd[c*K+i] * xd[(b*tt+src)*ch+c]
								s += v
								as += math.Abs(v)
							}
						}
						e := (b*tt+tau)*ch + c
						sg := 1 / (1 + math.Exp(-s))
						d1 := sg * (1 + s*(1-sg))
						d2 := sg * (1 - sg) * (2 + s*(1-2*sg))
						ds[e] = yd[e] * d1
						eds[e] = math.Abs(yd[e])*((12+4*math.Abs(s))*u*sg*(1+math.Abs(s)*(1-sg))+2*math.Abs(d2)*float64(K+1)*u*as) +
							u*math.Abs(ds[e])
					}
				}
			}
			bound := make([]float64, n)
			for b := 0; b < nb; b++ {
				for tau := 0; tau < tt; tau++ {
					for c := 0; c < ch; c++ {
						var ew, aw float64
						for i := 0; i < K; i++ {
							if dst := tau + K - 1 - i; dst < tt {
								e := (b*tt+dst)*ch + c
								ew += math.Abs(wd[c*K+i]) * eds[e]
								aw += math.Abs(wd[c*K+i] * ds[e])
							}
						}
						bound[(b*tt+tau)*ch+c] = ew + float64(K+1)*u*aw
					}
				}
			}
			checkBound(t, "dx", must(d.ReadFloat32(dx)).T(t), want, bound)

			r := d.Begin()
			defer r.Discard()
			checkErrors(t, r, map[string]error{
				"t":        gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, nb, tt+1, ch, K),
				"K":        gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, nb, tt, ch, K+1),
				"dx is x":  gpu.CausalConv1dSiLUBackward(r, x, w, dy, x, nb, tt, ch, K),
				"dy is dx": gpu.CausalConv1dSiLUBackward(r, x, w, dx, dx, nb, tt, ch, K),
			})
		})
	}
}
