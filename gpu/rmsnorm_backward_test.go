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

// TestRMSNormBackward compares with host.RMSNormBackward for both gain styles on awkward
// rows and n (n not a multiple of the 128-thread workgroup), dw accumulated onto non-zero
// values. Bounds (u = 2⁻²⁴): inv = rsqrt(Σx²/n + eps) has relative error δ ≤ (n/2 + 8)·u
// (as TestRMSNorm); the dot Σγ·dy·x, an n-term f32 sum, has |err| ≤ (n+2)·u·Σ|γ dy x|; so
// dx_i = inv·γ_i·dy_i − inv³·x_i·dot/n is within |inv γ dy|·(δ+3u) +
// inv³·|x_i|/n·(|dot|·(3δ+4u) + (n+2)·u·Σ|γ dy x|) + u·|dx_i|; dw_i += Σ_rows dy·x·inv sums
// rows terms by fma (4 lanes, then a tree), each with inv's δ: |err| ≤
// (δ + (rows + 4)·u)·Σ_rows|dy x inv| + u·|dw_i|.
func TestRMSNormBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(51, 52))
	const u = 1.0 / (1 << 24)
	for _, c := range []struct{ rows, n int }{{13, 333}, {70, 40}, {600, 40}} { // 600 rows: 3 chunks of the dw reduction
		for _, zc := range []bool{true, false} {
			t.Run(fmt.Sprintf("rows=%d n=%d zeroCentred=%v", c.rows, c.n, zc), func(t *testing.T) {
				rows, n, eps := c.rows, c.n, 1e-6
				xf, xd := randF32(rng, rows*n, 3)
				wf, wd := randF32(rng, n, 0.5)
				dyf, dyd := randF32(rng, rows*n, 1)
				dw0f, dw0 := randF32(rng, n, 1)
				x := must(d.UploadFloat32("x", xf, rows, n)).T(t)
				w := must(d.UploadFloat32("w", wf, n)).T(t)
				dy := must(d.UploadFloat32("dy", dyf, rows, n)).T(t)
				dx := must(d.NewBuffer("dx", gpu.F32, rows, n)).T(t)
				dw := must(d.UploadFloat32("dw", dw0f, n)).T(t)
				for _, b := range []*gpu.Buffer{x, w, dy, dx, dw} {
					defer b.Release()
				}
				if err := d.Run(func(r *gpu.Recorder) error {
					return gpu.RMSNormBackward(r, x, w, dy, dx, dw, rows, n, eps, zc)
				}); err != nil {
					t.Fatal(err)
				}
				wdx, wdw, err := host.RMSNormBackward(xd, rows, n, wd, eps, zc, dyd)
				if err != nil {
					t.Fatal(err)
				}
				off := 0.0
				if zc {
					off = 1
				}
				delta := (float64(n)/2 + 8) * u
				bdx := make([]float64, rows*n)
				bdw := make([]float64, n)
				wantDW := make([]float64, n)
				for r := 0; r < rows; r++ {
					var ss, dot, adot float64
					for i := 0; i < n; i++ {
						v := xd[r*n+i]
						ss += v * v
						dot += (off + wd[i]) * dyd[r*n+i] * v
						adot += math.Abs((off + wd[i]) * dyd[r*n+i] * v)
					}
					inv := 1 / math.Sqrt(ss/float64(n)+eps)
					for i := 0; i < n; i++ {
						e := r*n + i
						bdx[e] = math.Abs(inv*(off+wd[i])*dyd[e])*(delta+3*u) +
							inv*inv*inv*math.Abs(xd[e])/float64(n)*(math.Abs(dot)*(3*delta+4*u)+float64(n+2)*u*adot) +
							u*math.Abs(wdx[e])
						bdw[i] += (delta + float64(rows+4)*u) * math.Abs(dyd[e]*xd[e]*inv)
					}
				}
				for i := range wantDW {
					wantDW[i] = dw0[i] + wdw[i]
					bdw[i] += u * math.Abs(wantDW[i])
				}
				checkBound(t, "dx", must(d.ReadFloat32(dx)).T(t), wdx, bdx)
				checkBound(t, "dw", must(d.ReadFloat32(dw)).T(t), wantDW, bdw)
			})
		}
	}
}

func TestRMSNormBackwardErrors(t *testing.T) {
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 3, 8)).T(t)
	w := must(d.NewBuffer("w", gpu.F32, 8)).T(t)
	dy := must(d.NewBuffer("dy", gpu.F32, 3, 8)).T(t)
	dx := must(d.NewBuffer("dx", gpu.F32, 3, 8)).T(t)
	dw := must(d.NewBuffer("dw", gpu.F32, 8)).T(t)
	for _, b := range []*gpu.Buffer{x, w, dy, dx, dw} {
		defer b.Release()
	}
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"n":        gpu.RMSNormBackward(r, x, w, dy, dx, dw, 3, 9, 1e-6, true),
		"eps":      gpu.RMSNormBackward(r, x, w, dy, dx, dw, 3, 8, math.Inf(1), true),
		"dx is dy": gpu.RMSNormBackward(r, x, w, dy, dy, dw, 3, 8, 1e-6, true),
		"dw is w":  gpu.RMSNormBackward(r, x, w, dy, dx, w, 3, 8, 1e-6, false),
	})
}
