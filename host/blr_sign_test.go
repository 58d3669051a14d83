package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/testkit/blrtest"
)

// TestBLRSignGradFD checks BLRSignGrad by central differences of the real-valued relaxation
// L(U, V) = Σ dy ⊙ Σ_p ((((x⊙g)·Vᵀ)⊙ℓ)·Uᵀ)⊙h with U, V real matrices started at the signs.
// L is linear in each entry, so the quotient with ε = 2⁻¹⁰ is exact up to f64 rounding:
// tolerance 1e-9·(1 + |grad|). Sizes: odd m and rows, 2 paths, rank padding (live 5 of 8).
func TestBLRSignGradFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	const rows, m, n, r, live = 3, 7, 16, 8, 5
	w := blrtest.Random(rng, m, n, r, 2, live, func(x float64) float32 { return float32(x) })
	x := make([]float64, rows*n)
	dy := make([]float64, rows*m)
	for i := range x {
		x[i] = rng.Float64()*2 - 1
	}
	for i := range dy {
		dy[i] = rng.Float64()*2 - 1
	}
	gu, gv, err := BLRSignGrad(w, x, rows, dy)
	if err != nil {
		t.Fatal(err)
	}
	U := make([][]float64, 2)
	V := make([][]float64, 2)
	for p := range w.Paths {
		U[p] = signsF64(w.Paths[p].U, m, r)
		V[p] = signsF64(w.Paths[p].V, r, n)
	}
	loss := func() float64 {
		var s float64
		for p, q := range w.Paths {
			for i := 0; i < rows; i++ {
				for o := 0; o < m; o++ {
					var y float64
					for k := 0; k < r; k++ {
						var t1 float64
						for j := 0; j < n; j++ {
							t1 += x[i*n+j] * float64(q.G[j]) * V[p][k*n+j]
						}
						y += t1 * float64(q.L[k]) * U[p][o*r+k]
					}
					s += dy[i*m+o] * y * float64(q.H[o])
				}
			}
		}
		return s
	}
	const eps = 1.0 / 1024
	check := func(what string, got float64, v []float64, i int) {
		v[i] += eps
		lp := loss()
		v[i] -= 2 * eps
		lm := loss()
		v[i] += eps
		if fd := (lp - lm) / (2 * eps); math.Abs(fd-got) > 1e-9*(1+math.Abs(got)) {
			t.Errorf("%s: sign gradient %g, central difference %g", what, got, fd)
		}
	}
	for p := range w.Paths {
		for i := range U[p] {
			check(fmt.Sprintf("path %d G_U[%d]", p, i), gu[p][i], U[p], i)
		}
		for i := range V[p] {
			check(fmt.Sprintf("path %d G_V[%d]", p, i), gv[p][i], V[p], i)
		}
		for i, v := range gu[p] {
			if i%r >= live && v != 0 {
				t.Errorf("path %d: padded G_U[%d] = %g, want 0", p, i, v)
			}
		}
		for i, v := range gv[p] {
			if i/n >= live && v != 0 {
				t.Errorf("path %d: padded G_V[%d] = %g, want 0", p, i, v)
			}
		}
	}
}

// TestSignFlipHost checks the reference flip rule on a hand-made case: budget, whole score
// values, padding, reset.
func TestSignFlipHost(t *testing.T) {
	// 2×8 U-like matrix (rank = cols = 8, live 6): scores per element.
	scores := []int8{
		9, 3, 5, 5, 0, -4, 100, 100, // elements 6, 7 are padded
		5, 9, 1, 2, 3, 4, 0, 0,
	}
	bits := []byte{0x0f, 0xf0}
	n := SignFlip(bits, scores, 8, true, 6, 2, 4)
	// live scores ≥ 2: 9 (e0, e9) fit whole; 5 (e2, e3, e8) does not: of its index buckets (1
	// sign each at this size) e2 and e3 fit the 2 left, e8 does not. Padded e6, e7 never flip.
	if n != 4 {
		t.Fatalf("flips = %d, want 4", n)
	}
	if bits[0] != 0x02 || bits[1] != 0xf2 {
		t.Errorf("bits = %#x %#x, want 0x2 0xf2", bits[0], bits[1])
	}
	if scores[0] != 0 || scores[9] != 0 || scores[2] != 0 || scores[3] != 0 || scores[8] != 5 || scores[6] != 100 {
		t.Errorf("scores after flip %v", scores)
	}
}
