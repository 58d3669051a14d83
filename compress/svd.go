package compress

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// SVDOptions tune RandomizedSVD. The zero value selects the defaults.
type SVDOptions struct {
	// Oversample is the number of extra sketch columns p beyond the rank (default 16).
	Oversample int
	// PowerIters is the number q of subspace (power) iterations, each followed by a QR
	// re-orthonormalisation (default 2; a negative value means none).
	PowerIters int
}

func (o SVDOptions) withDefaults() SVDOptions {
	if o.Oversample <= 0 {
		o.Oversample = 16
	}
	if o.PowerIters == 0 {
		o.PowerIters = 2
	} else if o.PowerIters < 0 {
		o.PowerIters = 0
	}
	return o
}

// TruncatedSVD is a rank-K factorisation W ≈ U·diag(S)·Vᵀ of an M×N matrix, with U
// row-major M×K and V row-major N×K (orthonormal columns), S the K singular values in
// non-increasing order.
type TruncatedSVD struct {
	M, N, K int
	U       []float64 // M×K, row-major
	S       []float64 // K
	V       []float64 // N×K, row-major
}

// RandomizedSVD computes a rank-k truncated SVD of the row-major m×n matrix a by randomised
// subspace iteration (Halko, Martinsson & Tropp, "Finding structure with randomness",
// SIAM Review 53(2), 2011, Algorithms 4.4 and 5.1): a Gaussian sketch Y = A·Ω with
// ℓ = min(k + Oversample, min(m, n)) columns, Q = basis(Y), then PowerIters rounds of
// Q = basis(A·basis(Aᵀ·Q)) (skipped when ℓ = min(m, n), where the sketch already spans the
// range), where basis is P·L of an LU factorisation except for the last one, an
// orthonormal Q (§4.5's cheaper intermediate normalisation), then the SVD of the small ℓ×n matrix B = Qᵀ·A (gonum/LAPACK Dgesvd), U = Q·U_B.
// Orthonormalisation is Householder QR (Dgeqrf + Dorgqr). Products use gonum's blocked,
// parallel Dgemm (CPUProducts; Options.Products moves the large ones elsewhere). The result
// depends only on a and the random stream rng (for a fixed GOMAXPROCS-independent Dgemm,
// as gonum's is). a is not modified.
//
// Errors: m or n < 1, len(a) ≠ m·n, k outside [1, min(m, n)], a non-finite entry of a, or a
// failed LAPACK SVD.
func RandomizedSVD(a []float64, m, n, k int, opt SVDOptions, rng *rand.Rand) (*TruncatedSVD, error) {
	return randomizedSVDWith(nil, a, m, n, k, opt, rng)
}

// Products computes the large matrix products of the compressor: those with the weight of
// the randomised SVD (2·m·n·ℓ flops each: the sketch, two per power iteration, and the
// projection B = Qᵀ·W), through Bind, and dense ones through Mul: the left singular
// vectors U = Q·U_B (m×ℓ by ℓ×k) and each BLR path's reconstruction (m×r by r×n, subtracted
// from the weight to form the residual and the reported error). Bind prepares one matrix
// (a tensor, the residual of its first BLR path, or InitRefine's target W·diag(s) or W·C).
// InitRefine adds, per round, two products with the bound target and, through Mul, the r×r
// Grams of its factors, the products of the signs with them and, in a Gram's metric, the
// n×n ones (DESIGN.md §5). The rest (QR, the ℓ×n SVD, the Dual-SVID sign and rank-1 steps,
// the refinement's sign descent, r×r Cholesky and Gauss–Seidel sweeps) stays on the CPU in
// float64. CPUProducts (gonum,
// float64) is the default; GPUProducts runs them on a WebGPU device in float32. An
// implementation must be safe for concurrent use: Model runs one tensor per worker.
type Products interface {
	// Mul sets dst = a·b: a row-major m×k, b row-major k×n, dst row-major m×n
	// (overwritten). Errors: a size < 1, lengths that disagree with the sizes, or the
	// implementation's.
	Mul(dst, a, b []float64, m, k, n int) error
	// Bind returns the products with the row-major m×n matrix w (m, n ≥ 1, len(w) = m·n,
	// every entry finite; the caller checks this). The implementation may keep w until
	// Close and must not modify it. Errors: the implementation's (for example a matrix
	// that does not fit the device).
	Bind(w []float64, m, n int) (BoundProducts, error)
}

// BoundProducts are the products with one bound row-major m×n matrix W. One goroutine uses
// a BoundProducts at a time.
type BoundProducts interface {
	// MulW sets dst = W·x: x row-major n×l, dst row-major m×l (overwritten). Errors: l < 1,
	// lengths that disagree with m, n and l, or the implementation's.
	MulW(dst, x []float64, l int) error
	// MulWT sets dst = Wᵀ·x: x row-major m×l, dst row-major n×l (overwritten). Errors as MulW.
	MulWT(dst, x []float64, l int) error
	// Close releases what Bind allocated; the products must not be used afterwards.
	Close() error
}

// CPUProducts are Products on the CPU with gonum's blocked, parallel GEMM; the zero value
// is the default of Options. The result does not depend on GOMAXPROCS.
type CPUProducts struct {
	// Float32 selects float32 products (Sgemm on float32 copies of W and of Wᵀ made by
	// Bind, m·n·8 bytes more memory per bound matrix; x and the results are rounded
	// to float32): about twice as fast as float64 on 2 cores of an x86-64 (gonum's f32
	// kernels use twice the SIMD lanes, and Wᵀ·x runs as a plain product on the stored
	// Wᵀ). The relative rounding of the products, ~1e-6, is far below what the random
	// sketch itself varies, so the compressed model's relative errors stay within ~1e-4
	// of the float64 ones (the same arithmetic as GPUProducts). False: Dgemm in
	// float64 on the bound matrix itself (Bind copies nothing).
	Float32 bool
}

// Bind returns gonum products with w (see Products.Bind). Errors: len(w) ≠ m·n, m or n < 1,
// or (Float32) an entry beyond the float32 range.
func (p CPUProducts) Bind(w []float64, m, n int) (BoundProducts, error) {
	if m < 1 || n < 1 || len(w) != m*n {
		return nil, fmt.Errorf("products: %d values for a %d×%d matrix", len(w), m, n)
	}
	if !p.Float32 {
		return cpuBound{blas64.General{Rows: m, Cols: n, Stride: n, Data: w}}, nil
	}
	b := cpuBound32{
		w:  blas32.General{Rows: m, Cols: n, Stride: n, Data: make([]float32, m*n)},
		wt: blas32.General{Rows: n, Cols: m, Stride: m, Data: make([]float32, m*n)},
	}
	for i := 0; i < m; i++ {
		for j, x := range w[i*n : (i+1)*n] {
			f := float32(x)
			if f-f != 0 {
				return nil, fmt.Errorf("products: entry (%d, %d) = %g is beyond the float32 range", i, j, x)
			}
			b.w.Data[i*n+j] = f
			b.wt.Data[j*m+i] = f
		}
	}
	return b, nil
}

// cpuBound32 is W (and Wᵀ) in float32 for Sgemm.
type cpuBound32 struct{ w, wt blas32.General }

// mul32 sets dst = a·x in float32 (x rounded, dst widened).
func mul32(a blas32.General, dst, x []float64, l int) {
	x32 := make([]float32, len(x))
	for i, v := range x {
		x32[i] = float32(v)
	}
	y32 := make([]float32, a.Rows*l)
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, a, blas32.General{Rows: a.Cols, Cols: l, Stride: l, Data: x32},
		0, blas32.General{Rows: a.Rows, Cols: l, Stride: l, Data: y32})
	for i, v := range y32 {
		dst[i] = float64(v)
	}
}

func (c cpuBound32) MulW(dst, x []float64, l int) error {
	if err := checkProducts("MulW", dst, x, c.w.Cols, c.w.Rows, l); err != nil {
		return err
	}
	mul32(c.w, dst, x, l)
	return nil
}

func (c cpuBound32) MulWT(dst, x []float64, l int) error {
	if err := checkProducts("MulWT", dst, x, c.w.Rows, c.w.Cols, l); err != nil {
		return err
	}
	mul32(c.wt, dst, x, l)
	return nil
}

func (cpuBound32) Close() error { return nil }

type cpuBound struct{ a blas64.General }

// checkMul checks the sizes and lengths of Products.Mul.
func checkMul(dst, a, b []float64, m, k, n int) error {
	if m < 1 || k < 1 || n < 1 {
		return fmt.Errorf("products: Mul of sizes %d, %d, %d", m, k, n)
	}
	if len(a) != m*k || len(b) != k*n || len(dst) != m*n {
		return fmt.Errorf("products: Mul: a has %d values (want %d×%d), b %d (want %d×%d), dst %d (want %d×%d)", len(a), m, k, len(b), k, n, len(dst), m, n)
	}
	return nil
}

// Mul sets dst = a·b with Dgemm, or Sgemm on float32 copies when Float32 (see
// Products.Mul).
func (p CPUProducts) Mul(dst, a, b []float64, m, k, n int) error {
	if err := checkMul(dst, a, b, m, k, n); err != nil {
		return err
	}
	if !p.Float32 {
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, blas64.General{Rows: m, Cols: k, Stride: k, Data: a},
			blas64.General{Rows: k, Cols: n, Stride: n, Data: b}, 0, blas64.General{Rows: m, Cols: n, Stride: n, Data: dst})
		return nil
	}
	a32 := make([]float32, len(a))
	for i, v := range a {
		a32[i] = float32(v)
	}
	mul32(blas32.General{Rows: m, Cols: k, Stride: k, Data: a32}, dst, b, n)
	return nil
}

// checkProducts checks the lengths of a product: x rows·l with rows its inner dimension,
// dst out·l.
func checkProducts(op string, dst, x []float64, rows, out, l int) error {
	if l < 1 {
		return fmt.Errorf("products: %s with %d columns", op, l)
	}
	if len(x) != rows*l || len(dst) != out*l {
		return fmt.Errorf("products: %s: x has %d values (want %d×%d), dst %d (want %d×%d)", op, len(x), rows, l, len(dst), out, l)
	}
	return nil
}

func (c cpuBound) MulW(dst, x []float64, l int) error { return c.mul("MulW", blas.NoTrans, dst, x, l) }

func (c cpuBound) MulWT(dst, x []float64, l int) error { return c.mul("MulWT", blas.Trans, dst, x, l) }

// mul is dst = op(W)·x, op(W) = W (NoTrans) or Wᵀ (Trans), x [inner, l] and dst [outer, l]
// row-major, after checkProducts (op names the product in its errors).
func (c cpuBound) mul(op string, t blas.Transpose, dst, x []float64, l int) error {
	inner, outer := c.a.Cols, c.a.Rows
	if t == blas.Trans {
		inner, outer = outer, inner
	}
	if err := checkProducts(op, dst, x, inner, outer, l); err != nil {
		return err
	}
	blas64.Gemm(t, blas.NoTrans, 1, c.a, blas64.General{Rows: inner, Cols: l, Stride: l, Data: x},
		0, blas64.General{Rows: outer, Cols: l, Stride: l, Data: dst})
	return nil
}

func (cpuBound) Close() error { return nil }

// randomizedSVDWith is RandomizedSVD with its large products (the sketch, the power
// iterations and B = Qᵀ·A, computed as (Aᵀ·Q)ᵀ) done by prod, CPUProducts when nil.
func randomizedSVDWith(prod Products, a []float64, m, n, k int, opt SVDOptions, rng *rand.Rand) (*TruncatedSVD, error) {
	if m < 1 || n < 1 {
		return nil, fmt.Errorf("svd: matrix is %d×%d", m, n)
	}
	if len(a) != m*n {
		return nil, fmt.Errorf("svd: %d values for a %d×%d matrix", len(a), m, n)
	}
	if k < 1 || k > min(m, n) {
		return nil, fmt.Errorf("svd: rank %d outside [1, min(m, n) = %d]", k, min(m, n))
	}
	for i, x := range a {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("svd: entry (%d, %d) = %g is not finite", i/n, i%n, x)
		}
	}
	if prod == nil {
		prod = CPUProducts{}
	}
	opt = opt.withDefaults()
	l := min(k+opt.Oversample, min(m, n))
	bp, err := prod.Bind(a, m, n)
	if err != nil {
		return nil, fmt.Errorf("svd: %w", err)
	}
	defer bp.Close()

	omega := blas64.General{Rows: n, Cols: l, Stride: l, Data: make([]float64, n*l)}
	for i := range omega.Data {
		omega.Data[i] = rng.NormFloat64()
	}
	q := blas64.General{Rows: m, Cols: l, Stride: l, Data: make([]float64, m*l)}
	if err := bp.MulW(q.Data, omega.Data, l); err != nil {
		return nil, fmt.Errorf("svd: sketch: %w", err)
	}
	iters := opt.PowerIters
	if l == min(m, n) {
		iters = 0
	}
	// Between products a basis of the right span is enough: P·L of an LU factorisation
	// (a quarter of the flops of Householder QR); the last basis is orthonormal (QR).
	normalize := func(y blas64.General, last bool) {
		if last {
			orthonormalize(y)
		} else {
			luBasis(y)
		}
	}
	normalize(q, iters == 0)
	z := omega // reuse: n×l
	for it := 0; it < iters; it++ {
		if err := bp.MulWT(z.Data, q.Data, l); err != nil {
			return nil, fmt.Errorf("svd: power iteration %d: %w", it+1, err)
		}
		normalize(z, false)
		if err := bp.MulW(q.Data, z.Data, l); err != nil {
			return nil, fmt.Errorf("svd: power iteration %d: %w", it+1, err)
		}
		normalize(q, it == iters-1)
	}
	// B = Qᵀ·A (l×n, l ≤ n) = (Aᵀ·Q)ᵀ.
	if err := bp.MulWT(z.Data, q.Data, l); err != nil {
		return nil, fmt.Errorf("svd: projection: %w", err)
	}
	b := blas64.General{Rows: l, Cols: n, Stride: n, Data: make([]float64, l*n)}
	for j := 0; j < n; j++ {
		for c, x := range z.Data[j*l : (j+1)*l] {
			b.Data[c*n+j] = x
		}
	}
	ub, s, vt, err := thinSVD(b)
	if err != nil {
		return nil, err
	}
	// U = Q·U_B[:, :k] (m×k), V = (Vᵀ[:k, :])ᵀ (n×k).
	ubk := make([]float64, l*k)
	for i := 0; i < l; i++ {
		copy(ubk[i*k:(i+1)*k], ub.Data[i*ub.Stride:i*ub.Stride+k])
	}
	u := blas64.General{Rows: m, Cols: k, Stride: k, Data: make([]float64, m*k)}
	if err := prod.Mul(u.Data, q.Data, ubk, m, l, k); err != nil {
		return nil, fmt.Errorf("svd: U = Q·U_B: %w", err)
	}
	v := make([]float64, n*k)
	for i := 0; i < k; i++ {
		row := vt.Data[i*vt.Stride : i*vt.Stride+n]
		for j, x := range row {
			v[j*k+i] = x
		}
	}
	return &TruncatedSVD{M: m, N: n, K: k, U: u.Data, S: append([]float64(nil), s[:k]...), V: v}, nil
}

// orthonormalize replaces the columns of the tall matrix y (rows ≥ cols) by an orthonormal
// basis of their span: the thin Q of a Householder QR (LAPACK Dgeqrf, Dorgqr).
func orthonormalize(y blas64.General) {
	tau := make([]float64, y.Cols)
	work := []float64{0}
	lapack64.Geqrf(y, tau, work, -1)
	lw := int(work[0])
	lapack64.Orgqr(y, tau, work, -1)
	lw = max(lw, int(work[0]), y.Cols)
	work = make([]float64, lw)
	lapack64.Geqrf(y, tau, work, lw)
	lapack64.Orgqr(y, tau, work, lw)
}

// luBasis replaces the columns of the tall matrix y (rows ≥ cols) by P·L of its LU
// factorisation with partial pivoting (LAPACK Dgetrf): y = P·L·U with L unit lower
// trapezoidal, so P·L spans the columns of y when y has full column rank (as the power
// iterations' products do, almost surely), with entries bounded by 1. It is the
// intermediate normalisation of Halko, Martinsson & Tropp §4.5 (as in scikit-learn's
// randomized_range_finder): it keeps the iterates well scaled at a quarter of the flops of
// Householder QR (m·l² − l³/3 against ~4·m·l² − 4/3·l³ for Dgeqrf + Dorgqr).
func luBasis(y blas64.General) {
	ipiv := make([]int, y.Cols)
	lapack64.Getrf(y, ipiv) // a zero pivot leaves its column unscaled: no NaN
	for i := 0; i < y.Cols; i++ {
		row := y.Data[i*y.Stride : i*y.Stride+y.Cols]
		row[i] = 1
		clear(row[i+1:])
	}
	// y = P_0·P_1·…·P_{c−1}·L·U with P_i swapping rows i and ipiv[i]: apply them to L last first.
	for i := y.Cols - 1; i >= 0; i-- {
		if j := ipiv[i]; j != i {
			a, b := y.Data[i*y.Stride:i*y.Stride+y.Cols], y.Data[j*y.Stride:j*y.Stride+y.Cols]
			for c := range a {
				a[c], b[c] = b[c], a[c]
			}
		}
	}
}

// thinSVD returns the thin SVD b = U·diag(s)·Vᵀ of a wide or square l×n matrix (l ≤ n):
// U l×l, s l values (non-increasing), Vᵀ l×n. b is overwritten.
func thinSVD(b blas64.General) (u blas64.General, s []float64, vt blas64.General, err error) {
	l, n := b.Rows, b.Cols
	u = blas64.General{Rows: l, Cols: l, Stride: l, Data: make([]float64, l*l)}
	vt = blas64.General{Rows: l, Cols: n, Stride: n, Data: make([]float64, l*n)}
	s = make([]float64, l)
	work := []float64{0}
	lapack64.Gesvd(lapack.SVDStore, lapack.SVDStore, b, u, vt, s, work, -1)
	lw := int(work[0])
	work = make([]float64, lw)
	if ok := lapack64.Gesvd(lapack.SVDStore, lapack.SVDStore, b, u, vt, s, work, lw); !ok {
		return u, s, vt, fmt.Errorf("svd: LAPACK Dgesvd did not converge on the %d×%d projected matrix", l, n)
	}
	return u, s, vt, nil
}
