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

// TestL2NormBackward compares with host.L2NormBackward at n = dk = 128 (scale dk^−½, the
// query's) and an awkward n = 37 (scale 1, the key's), with ordinary rows, rows of tiny
// norm (|x| ~ 1e−5, where ε dominates Σx²: the ε-free Jacobian would be off by 100×) and an
// all-zero row (dx = scale·f·dy with f = 1000). Bounds (u = 2⁻²⁴): f = rsqrt(Σx² + ε) has
// relative error δ ≤ (n/2 + 8)·u (an n-term sum of squares, halved by the square root,
// plus the inverse square root); x·dy has (n + 2)·u·Σ|x dy| of summation; so
// dx = scale·f·dy − scale·f³·x·(x·dy) is within |scale f dy|·(δ + 2u) +
// |scale|·f³·|x|·(|x·dy|·(3δ + 4u) + (n + 2)·u·Σ|x dy|) + u·|dx|.
func TestL2NormBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(91, 92))
	const u = 1.0 / (1 << 24)
	for _, tc := range []struct {
		rows, n int
		scale   float64
	}{{2 * 37 * 2, 128, 1 / math.Sqrt(128)}, {23, 37, 1}} {
		t.Run(fmt.Sprintf("rows=%d n=%d", tc.rows, tc.n), func(t *testing.T) {
			rows, n, scale := tc.rows, tc.n, tc.scale
			xf, xd := randF32(rng, rows*n, 1)
			for r := 0; r < rows; r += 5 { // tiny norms
				for i := 0; i < n; i++ {
					xf[r*n+i] *= 1e-5
					xd[r*n+i] = float64(xf[r*n+i])
				}
			}
			for i := 0; i < n; i++ { // a zero row
				xf[(rows-1)*n+i], xd[(rows-1)*n+i] = 0, 0
			}
			yf, yd := randF32(rng, rows*n, 1)
			x := must(d.UploadFloat32("x", xf, rows, n)).T(t)
			dy := must(d.UploadFloat32("dy", yf, rows, n)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, rows, n)).T(t)
			for _, b := range []*gpu.Buffer{x, dy, dx} {
				defer b.Release()
			}
			if err := d.Run(func(r *gpu.Recorder) error { return gpu.L2NormBackward(r, x, dy, dx, rows, n, scale) }); err != nil {
				t.Fatal(err)
			}
			want := must(host.L2NormBackward(xd, rows, n, scale, yd)).T(t)
			delta := (float64(n)/2 + 8) * u
			bound := make([]float64, rows*n)
			for r := 0; r < rows; r++ {
				var ss, dot, adot float64
				for i := 0; i < n; i++ {
					e := r*n + i
					ss += xd[e] * xd[e]
					dot += xd[e] * yd[e]
					adot += math.Abs(xd[e] * yd[e])
				}
				f := 1 / math.Sqrt(ss+1e-6)
				for i := 0; i < n; i++ {
					e := r*n + i
					bound[e] = math.Abs(scale*f*yd[e])*(delta+2*u) +
						math.Abs(scale)*f*f*f*math.Abs(xd[e])*(math.Abs(dot)*(3*delta+4*u)+float64(n+2)*u*adot) +
						u*math.Abs(want[e])
				}
			}
			checkBound(t, "dx", must(d.ReadFloat32(dx)).T(t), want, bound)

			r := d.Begin()
			defer r.Discard()
			checkErrors(t, r, map[string]error{
				"n":        gpu.L2NormBackward(r, x, dy, dx, rows, n+1, scale),
				"scale":    gpu.L2NormBackward(r, x, dy, dx, rows, n, math.NaN()),
				"dx is dy": gpu.L2NormBackward(r, x, dy, dy, rows, n, scale),
			})
		})
	}
}
