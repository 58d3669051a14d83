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
				gam := make([]float64, n)
				for i := range gam {
					gam[i] = wd[i]
					if zc {
						gam[i]++
					}
				}
				bdx := make([]float64, rows*n)
				bdw := make([]float64, n)
				for r := 0; r < rows; r++ {
					e := r * n
					rmsNormBackwardRowBound(xd[e:e+n], gam, dyd[e:e+n], nil, wdx[e:e+n], eps, rows, bdx[e:e+n], bdw)
				}
				wantDW := accumulated(dw0, wdw, bdw)
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

// rmsNormBackwardRowBound adds to bdx (the row's n entries) and bdw (n column sums of terms
// rows) the f32 bound of the RMSNorm backward of one row x with gains gam and output
// gradient g (f64; wdx the exact dx) — TestRMSNormBackward's: inv within δ = (n/2 + 8)·u,
// the n-term dot within (n+2)·u·Σ|γ g x|, u on the result — plus, when ep is not nil, g's
// own f32 error ep propagated linearly: inv·|γ_c|·ε_c + inv³·|x_c|/n·Σ_j|γ_j x_j|·ε_j on dx
// and |x_c·inv|·ε_c on dw.
func rmsNormBackwardRowBound(x, gam, g, ep, wdx []float64, eps float64, terms int, bdx, bdw []float64) {
	const u = 1.0 / (1 << 24)
	n := len(x)
	delta := (float64(n)/2 + 8) * u
	var ss, dot, adot, aeps float64
	for c, v := range x {
		ss += v * v
		dot += gam[c] * g[c] * v
		adot += math.Abs(gam[c] * g[c] * v)
		if ep != nil {
			aeps += math.Abs(gam[c]*v) * ep[c]
		}
	}
	inv := 1 / math.Sqrt(ss/float64(n)+eps)
	for c, v := range x {
		ax := inv * inv * inv * math.Abs(v) / float64(n)
		bdx[c] = math.Abs(inv*gam[c]*g[c])*(delta+3*u) + ax*(math.Abs(dot)*(3*delta+4*u)+float64(n+2)*u*adot) +
			u*math.Abs(wdx[c])
		bdw[c] += (delta + float64(terms+4)*u) * math.Abs(g[c]*v*inv)
		if ep != nil {
			bdx[c] += inv*math.Abs(gam[c])*ep[c] + ax*aeps
			bdw[c] += math.Abs(v*inv) * ep[c]
		}
	}
}

// accumulated returns want = base + add (a gradient accumulated onto base) and adds its
// final rounding, u·|want|, to the bound b.
func accumulated(base, add, b []float64) []float64 {
	want := make([]float64, len(base))
	for i := range want {
		want[i] = base[i] + add[i]
		b[i] += math.Abs(want[i]) / (1 << 24)
	}
	return want
}
