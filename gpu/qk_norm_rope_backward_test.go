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

// TestQKNormRoPEBackward compares with host.QKNormRoPEBackward (itself checked by finite
// differences in host) on awkward sizes, dw accumulated onto non-zero values. Bound
// (u = 2⁻²⁴): the back-rotated gradient dn_c = dy_c·cos ± dy_partner·sin uses the f32
// table (u each), two products and a sum: |ε_c| ≤ 3u·(|dy_c| + |dy_partner|) on rotated
// dims, 0 elsewhere. The norm part is RMSNormBackward's arithmetic with dn for dy
// (TestRMSNormBackward's bound: inv within δ = (hd/2 + 8)·u, the hd-term dot within
// (hd+2)·u·Σ|γ dn x|, u on the result), plus ε propagated linearly:
// inv·|γ_c|·ε_c + inv³·|x_c|/hd·Σ_j|γ_j x_j|·ε_j for dx, and Σ|x_c·inv|·ε_c for dw (whose
// column sum runs over rows·heads terms: (δ + (rows·heads + 4)·u)·Σ|dn x inv|).
// Geometries: nb 2, t 23, 4 heads, head_dim 64 with rot 16 (the tiny model's partial
// rotary 1/4; positions restart per window); head_dim 256 with rot 64; rot = head_dim = 6.
func TestQKNormRoPEBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(65, 66))
	eps, theta := 1e-6, 1e7
	for _, tc := range []struct{ nb, t, heads, hd, rot int }{{2, 23, 4, 64, 16}, {1, 9, 2, 256, 64}, {2, 5, 3, 6, 6}} {
		t.Run(fmt.Sprintf("nb=%d t=%d heads=%d hd=%d rot=%d", tc.nb, tc.t, tc.heads, tc.hd, tc.rot), func(t *testing.T) {
			rows, hd := tc.nb*tc.t, tc.hd
			n := rows * tc.heads * hd
			x, xd := randUpload(t, d, rng, "x", 2, rows, tc.heads, hd)
			w, wd := randUpload(t, d, rng, "w", 0.5, hd)
			dy, dyd := randUpload(t, d, rng, "dy", 1, rows, tc.heads, hd)
			dw, dw0 := randUpload(t, d, rng, "dw", 1, hd)
			dx := must(d.NewBuffer("dx", gpu.F32, rows, tc.heads, hd)).T(t)
			defer dx.Release()
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: hd, Eps: eps, Rot: tc.rot, Theta: theta, T: tc.t})
			}); err != nil {
				t.Fatal(err)
			}
			wdx, wdw, err := host.QKNormRoPEBackward(xd, rows, tc.heads, hd, wd, eps, tc.rot, theta, tc.t, dyd)
			if err != nil {
				t.Fatal(err)
			}
			// The bound, from f64 dn and its f32 error bound ε.
			inv := host.RoPEInvFreq(tc.rot, theta)
			half := tc.rot / 2
			bdx := make([]float64, n)
			bdw := make([]float64, hd)
			dn := make([]float64, hd)
			ep := make([]float64, hd)
			gam := make([]float64, hd)
			for c := range gam {
				gam[c] = 1 + wd[c]
			}
			for r := 0; r < rows; r++ {
				p := float64(r % tc.t)
				for h := 0; h < tc.heads; h++ {
					base := (r*tc.heads + h) * hd
					g := dyd[base : base+hd]
					copy(dn, g)
					clear(ep)
					for i := range half {
						cs, sn := math.Cos(p*inv[i]), math.Sin(p*inv[i])
						dn[i] = g[i]*cs + g[i+half]*sn
						dn[i+half] = g[i+half]*cs - g[i]*sn
						ep[i] = 3 * u32 * (math.Abs(g[i]) + math.Abs(g[i+half]))
						ep[i+half] = ep[i]
					}
					rmsNormBackwardRowBound(xd[base:base+hd], gam, dn, ep, wdx[base:base+hd], eps, rows*tc.heads, bdx[base:base+hd], bdw)
				}
			}
			want := accumulated(dw0, wdw, bdw)
			checkBound(t, "QKNormRoPEBackward dx", must(d.ReadFloat32(dx)).T(t), wdx, bdx)
			checkBound(t, "QKNormRoPEBackward dw", must(d.ReadFloat32(dw)).T(t), want, bdw)
		})
	}
}

func TestQKNormRoPEBackwardErrors(t *testing.T) {
	d := gputest.Open(t)
	rows, heads, hd := 6, 2, 8
	x := must(d.NewBuffer("x", gpu.F32, rows, heads, hd)).T(t)
	w := must(d.NewBuffer("w", gpu.F32, hd)).T(t)
	dy := must(d.NewBuffer("dy", gpu.F32, rows, heads, hd)).T(t)
	dx := must(d.NewBuffer("dx", gpu.F32, rows, heads, hd)).T(t)
	dw := must(d.NewBuffer("dw", gpu.F32, hd)).T(t)
	for _, b := range []*gpu.Buffer{x, w, dy, dx, dw} {
		defer b.Release()
	}
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"odd rot":       gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 3, Theta: 1e7, T: 3}),
		"rot > hd":      gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 10, Theta: 1e7, T: 3}),
		"rows % t":      gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: 1e7, T: 4}),
		"theta NaN":     gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: math.NaN(), T: 3}),
		"eps Inf":       gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: math.Inf(1), Rot: 4, Theta: 1e7, T: 3}),
		"heads":         gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads + 1, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: 1e7, T: 3}),
		"dx is dy":      gpu.QKNormRoPEBackward(r, x, w, dy, dy, dw, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: 1e7, T: 3}),
		"dw is w":       gpu.QKNormRoPEBackward(r, x, w, dy, dx, w, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: 1e7, T: 3}),
		"dw wrong size": gpu.QKNormRoPEBackward(r, x, w, dy, dx, dx, gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: hd, Eps: 1e-6, Rot: 4, Theta: 1e7, T: 3}),
	})
}
