package host

import (
	"fmt"

	"github.com/nvg-project/nvg/cmf"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// BLRPathGrad holds the gradients of a loss with respect to the metric of one BLR path
// (DESIGN.md §4, y = h ⊙ U(ℓ ⊙ V(g ⊙ x))): H [m], L [r] (ℓ) and G [n], float64, summed over
// every row the layer was applied to.
type BLRPathGrad struct {
	H []float64 // d loss / d h, [m]
	L []float64 // d loss / d ℓ, [r]
	G []float64 // d loss / d g, [n]
}

// BLRLinearBackward is the backward of a BLR linear layer (cmf.BLRWeight.Apply),
// y = Σ_p h_p ⊙ U_p(ℓ_p ⊙ V_p(g_p ⊙ x)) per row. Per path, with x̃ = x ⊙ g (rows×n),
// a = x̃·Vᵀ (rows×r), b = a ⊙ ℓ, c = b·Uᵀ (rows×m):
//
//	dh = Σ_rows dy ⊙ c,   dc = dy ⊙ h,   db = dc·U,   dℓ = Σ_rows db ⊙ a,
//	da = db ⊙ ℓ,   dx̃ = da·V,   dg = Σ_rows dx̃ ⊙ x,   dx += dx̃ ⊙ g.
//
// The binary factors are frozen (no gradient). x is [rows, n] and dy [rows, m], row-major;
// it returns dx [rows, n] and one BLRPathGrad per path, in path order. The scales are read
// as stored (float16 values widened to float32) and all arithmetic is float64.
// Errors: w invalid (cmf.BLRWeight.Validate), rows not positive, or lengths that disagree.
func BLRLinearBackward(w *cmf.BLRWeight, x []float64, rows int, dy []float64) (dx []float64, grads []BLRPathGrad, err error) {
	if err := w.Validate(); err != nil {
		return nil, nil, fmt.Errorf("host.BLRLinearBackward: %w", err)
	}
	if rows <= 0 {
		return nil, nil, fmt.Errorf("host.BLRLinearBackward: rows = %d must be positive", rows)
	}
	m, n, r := w.M, w.N, w.Rank
	if err := checkLen("BLRLinearBackward", "x", x, rows*n, "rows·n"); err != nil {
		return nil, nil, err
	}
	if err := checkLen("BLRLinearBackward", "dy", dy, rows*m, "rows·m"); err != nil {
		return nil, nil, err
	}
	dx = make([]float64, rows*n)
	xg := make([]float64, rows*n)
	a := make([]float64, rows*r)
	c := make([]float64, rows*m)
	dc := make([]float64, rows*m)
	db := make([]float64, rows*r)
	dxg := make([]float64, rows*n)
	gen := func(rs, cs int, d []float64) blas64.General {
		return blas64.General{Rows: rs, Cols: cs, Stride: cs, Data: d}
	}
	for p := range w.Paths {
		q := &w.Paths[p]
		gr := BLRPathGrad{H: make([]float64, m), L: make([]float64, r), G: make([]float64, n)}
		U := signsF64(q.U, m, r)
		V := signsF64(q.V, r, n)
		for i := 0; i < rows; i++ {
			for j := 0; j < n; j++ {
				xg[i*n+j] = x[i*n+j] * float64(q.G[j])
			}
		}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, gen(rows, n, xg), gen(r, n, V), 0, gen(rows, r, a))
		// c = (a ⊙ ℓ)·Uᵀ, built in db as scratch.
		for i := 0; i < rows; i++ {
			for k := 0; k < r; k++ {
				db[i*r+k] = a[i*r+k] * float64(q.L[k])
			}
		}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, gen(rows, r, db), gen(m, r, U), 0, gen(rows, m, c))
		for i := 0; i < rows; i++ {
			for o := 0; o < m; o++ {
				gr.H[o] += dy[i*m+o] * c[i*m+o]
				dc[i*m+o] = dy[i*m+o] * float64(q.H[o])
			}
		}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, gen(rows, m, dc), gen(m, r, U), 0, gen(rows, r, db))
		for i := 0; i < rows; i++ {
			for k := 0; k < r; k++ {
				gr.L[k] += db[i*r+k] * a[i*r+k]
				db[i*r+k] *= float64(q.L[k])
			}
		}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, gen(rows, r, db), gen(r, n, V), 0, gen(rows, n, dxg))
		for i := 0; i < rows; i++ {
			for j := 0; j < n; j++ {
				gr.G[j] += dxg[i*n+j] * x[i*n+j]
				dx[i*n+j] += dxg[i*n+j] * float64(q.G[j])
			}
		}
		grads = append(grads, gr)
	}
	return dx, grads, nil
}

// signsF64 expands packed sign bits (rows×cols, bit b of byte k of a row is column 8k+b,
// 1 ↦ +1, 0 ↦ −1, DESIGN.md §4) into a row-major float64 matrix.
func signsF64(bits []byte, rows, cols int) []float64 {
	out := make([]float64, rows*cols)
	for i, byt := range bits {
		for b := 0; b < 8; b++ {
			if byt>>b&1 != 0 {
				out[i*8+b] = 1
			} else {
				out[i*8+b] = -1
			}
		}
	}
	return out
}

// LinearBackward is the backward of a Linear l applied to x [rows, l.In()] with output
// gradient dy [rows, l.Out()]: it returns dx [rows, l.In()] and, for a *BLRLinear, the
// metric gradients of every path (BLRLinearBackward); for a *Dense (frozen) paths is nil
// and dx = dy·W (LinearOpBackward).
// Errors: an implementation of Linear other than *Dense and *BLRLinear, rows not
// positive, or lengths that disagree.
func LinearBackward(l Linear, x []float64, rows int, dy []float64) (dx []float64, paths []BLRPathGrad, err error) {
	switch w := l.(type) {
	case *Dense:
		if err := checkLen("LinearBackward", "x", x, rows*w.in, "rows·in"); err != nil {
			return nil, nil, err
		}
		dx, err = LinearOpBackward(dy, rows, w.in, w.W, w.out)
		return dx, nil, err
	case *BLRLinear:
		return BLRLinearBackward(w.W, x, rows, dy)
	case nil:
		return nil, nil, fmt.Errorf("host.LinearBackward: nil Linear")
	}
	return nil, nil, fmt.Errorf("host.LinearBackward: no backward for Linear type %T", l)
}
