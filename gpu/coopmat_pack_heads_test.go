package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestCoopmatPackHeadsForms: both forms of CoopmatPackHeads (the vector form and the general
// form, its simple twin) give the host's packing bit for bit — per block of 64 rows of a
// head, e = 15 − frexp(max |x|).exp, each value f16(x·2^e) (round to nearest even), zero past
// t and past hd, the scale 2^−e — on windows that end inside a block, padded columns,
// columns from an offset within longer rows, the head-major layout, 16 vectors per
// invocation, an all-zero block, and a head_dim not a multiple of 4 (general form only).
func TestCoopmatPackHeadsForms(t *testing.T) {
	d := gputest.Open(t)
	type shape struct {
		nb, t, heads, n, np, stride, col0 int
		headMajor                         bool
		nv                                int // the vector form's vectors an invocation (0: general)
	}
	for _, s := range []shape{
		{2, 100, 3, 128, 128, 128, 0, false, 8},
		{1, 64, 2, 120, 128, 120, 0, false, 8},
		{2, 70, 2, 64, 64, 192, 64, false, 4},
		{3, 37, 2, 32, 48, 32, 0, true, 3},
		{1, 130, 1, 256, 256, 256, 0, false, 16},
		{1, 10, 2, 6, 8, 6, 0, false, 0},
	} {
		t.Run(fmt.Sprintf("%+v", s), func(t *testing.T) {
			if hp4, nv := gpu.CoopPackHeadsForm(s.n, s.np, s.stride, s.col0); nv != s.nv || (nv > 0) != (hp4 == s.np/4) {
				t.Errorf("form: %d vectors a row, %d an invocation; want %d, %d", hp4, nv, s.np/4, s.nv)
			}
			rows := s.nb * s.t * s.heads
			rng := rand.New(rand.NewPCG(uint64(s.t), uint64(s.n)))
			xf := make([]float32, rows*s.stride)
			for i := range xf {
				// Magnitudes over 2⁻²⁰ … 2²⁰, so blocks take different scales.
				xf[i] = float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(41)-20))
			}
			if s.t > 64 { // the first head's second block all zero (scale 1)
				for tau := 64; tau < min(s.t, 128); tau++ {
					for c := range s.n {
						xf[xIndex(s.headMajor, s.heads, s.t, s.stride, 0, 0, tau)+s.col0+c] = 0
					}
				}
			}
			x := must(d.UploadFloat32("x", xf, len(xf))).T(t)
			defer x.Release()
			nblk := (s.t + 63) / 64
			var got [2][]uint32
			var gotS [2][]float32
			for i, general := range []bool{false, true} {
				restore := gpu.SetCoopPackHeadsGeneral(general)
				var err error
				got[i], gotS[i], err = gpu.CoopPackHeads(d, x, s.nb, s.t, s.heads, s.n, s.np, s.stride, s.col0, s.headMajor)
				restore()
				if err != nil {
					t.Fatal(err)
				}
			}
			for i, form := range []string{"vector", "general"} {
				for b := range s.nb {
					for h := range s.heads {
						for blk := range nblk {
							amax := 0.0
							for r := range 64 {
								tau := blk*64 + r
								if tau >= s.t {
									break
								}
								for c := range s.n {
									amax = math.Max(amax, math.Abs(float64(xf[xIndex(s.headMajor, s.heads, s.t, s.stride, b, h, tau)+s.col0+c])))
								}
							}
							e := 0
							if amax > 0 {
								_, exp := math.Frexp(amax)
								e = max(-126, min(126, 15-exp))
							}
							bi := (b*s.heads+h)*nblk + blk
							if want := float32(math.Ldexp(1, -e)); gotS[i][bi] != want {
								t.Fatalf("%s: scale of window %d head %d block %d = %g, want %g", form, b, h, blk, gotS[i][bi], want)
							}
							for r := range 64 {
								tau := blk*64 + r
								for c := range s.np {
									want := uint16(0)
									if tau < s.t && c < s.n {
										v := float64(xf[xIndex(s.headMajor, s.heads, s.t, s.stride, b, h, tau)+s.col0+c])
										want = float16.Fromfloat32(float32(math.Ldexp(v, e))).Bits()
									}
									w := got[i][(bi*64+r)*s.np/2+c/2]
									if g := uint16(w >> (16 * (c % 2))); g != want {
										t.Fatalf("%s: window %d head %d row %d column %d: %#04x, want %#04x", form, b, h, tau, c, g, want)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

// xIndex is the index of row tau of head h in window b of a packed operand with rows of
// stride values, token-major [nb·t, heads, stride] or head-major [nb·heads·t, stride].
func xIndex(headMajor bool, heads, t, stride, b, h, tau int) int {
	if headMajor {
		return ((b*heads+h)*t + tau) * stride
	}
	return ((b*t+tau)*heads + h) * stride
}
