package compress

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// decayingMatrix returns a row-major m×n matrix U·diag(σ)·Vᵀ + noise·G with random
// orthonormal U, V and σ_i = decay^i (a spectrum like a trained weight's, but known).
func decayingMatrix(rng *rand.Rand, m, n int, decay, noise float64) []float64 {
	k := min(m, n)
	randOrth := func(rows int) *mat.Dense {
		g := mat.NewDense(rows, k, nil)
		for i := 0; i < rows; i++ {
			for j := 0; j < k; j++ {
				g.Set(i, j, rng.NormFloat64())
			}
		}
		var qr mat.QR
		qr.Factorize(g)
		var q mat.Dense
		qr.QTo(&q)
		return mat.DenseCopyOf(q.Slice(0, rows, 0, k))
	}
	u, v := randOrth(m), randOrth(n)
	for j := 0; j < k; j++ {
		s := math.Pow(decay, float64(j))
		for i := 0; i < m; i++ {
			u.Set(i, j, u.At(i, j)*s)
		}
	}
	var w mat.Dense
	w.Mul(u, v.T())
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			out[i*n+j] = w.At(i, j) + noise*rng.NormFloat64()
		}
	}
	return out
}

func TestRandomizedSVDMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		m, n, k int
		tol     float64
	}{
		{120, 70, 20, 1e-9}, // sketch 36 < 70: power iterations matter
		{50, 90, 12, 1e-9},  // wide
		{40, 40, 30, 1e-12}, // sketch = full rank: exact
	} {
		a := decayingMatrix(rng, c.m, c.n, 0.9, 1e-3)
		var full mat.SVD
		if !full.Factorize(mat.NewDense(c.m, c.n, append([]float64(nil), a...)), mat.SVDThin) {
			t.Fatal("gonum SVD failed")
		}
		want := full.Values(nil)
		got, err := RandomizedSVD(a, c.m, c.n, c.k, SVDOptions{}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < c.k; i++ {
			if d := math.Abs(got.S[i] - want[i]); d > c.tol*want[0]+1e-6*want[i] {
				t.Errorf("%+v: σ_%d = %.12g, gonum %.12g", c, i, got.S[i], want[i])
			}
		}
		// Orthonormal factors, and U·diag(S)·Vᵀ as close to A as the best rank-k
		// approximation: ‖A − A_k‖_F² = Σ_{i≥k} σ_i² (Eckart–Young).
		var best float64
		for _, s := range want[c.k:] {
			best += s * s
		}
		var res float64
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				var s float64
				for r := 0; r < c.k; r++ {
					s += got.U[i*c.k+r] * got.S[r] * got.V[j*c.k+r]
				}
				d := a[i*c.n+j] - s
				res += d * d
			}
		}
		if res > best*(1+1e-6)+1e-20 {
			t.Errorf("%+v: ‖A−USVᵀ‖² = %g, optimum %g", c, res, best)
		}
		for _, f := range []struct {
			name string
			x    []float64
			rows int
		}{{"U", got.U, c.m}, {"V", got.V, c.n}} {
			for p := 0; p < c.k; p++ {
				for q := 0; q <= p; q++ {
					var d float64
					for i := 0; i < f.rows; i++ {
						d += f.x[i*c.k+p] * f.x[i*c.k+q]
					}
					if p == q {
						d--
					}
					if math.Abs(d) > 1e-10 {
						t.Fatalf("%+v: %s columns %d·%d off by %g", c, f.name, p, q, d)
					}
				}
			}
		}
	}
}

func TestRandomizedSVDErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	a := make([]float64, 12)
	for _, c := range []struct {
		a       []float64
		m, n, k int
		want    string
	}{
		{a, 3, 4, 0, "rank 0 outside [1, min(m, n) = 3]"},
		{a, 3, 4, 4, "rank 4 outside"},
		{a, 4, 4, 2, "12 values for a 4×4 matrix"},
		{a, 0, 4, 1, "matrix is 0×4"},
		{append(make([]float64, 5), math.Inf(1), 0, 0, 0, 0, 0, 0), 3, 4, 2, "entry (1, 1) = +Inf is not finite"},
	} {
		if _, err := RandomizedSVD(c.a, c.m, c.n, c.k, SVDOptions{}, rng); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d×%d k=%d: %v, want %q", c.m, c.n, c.k, err, c.want)
		}
	}
}

func BenchmarkRandomizedSVD3584x1024k792(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := make([]float64, 3584*1024)
	for i := range a {
		a[i] = rng.NormFloat64()
	}
	for b.Loop() {
		if _, err := RandomizedSVD(a, 3584, 1024, 792, SVDOptions{}, rand.New(rand.NewPCG(3, 4))); err != nil {
			b.Fatal(err)
		}
	}
}
