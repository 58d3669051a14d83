package compress

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nvg-project/nvg/cmf"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// Init selects the initial factorisation of every compressed linear (Options.Init).
type Init int

// Initial factorisations: InitDualSVID is Dual-SVID alone (LittleBit; Matrix); InitRefine
// starts from Dual-SVID of the input-weighted weight W·diag(s) and refines the signs and
// scales of every path by alternating minimisation of ‖(W − Ŵ)·diag(s)‖_F, s_j = √E[x_j²]
// from Options.Calibration (s = 1, the plain Frobenius error, without one), then, where the
// calibration kept the input's Gram C = E[x·xᵀ], of the output error tr((W − Ŵ)·C′·(W − Ŵ)ᵀ)
// with C′ = C shrunk toward its diagonal (DESIGN.md §5; after NanoQuant, arXiv 2602.06694).
const (
	InitDualSVID Init = 0
	InitRefine   Init = 1
)

// String returns "dual-svid" or "refine" (the spelling ParseInit accepts).
func (i Init) String() string {
	switch i {
	case InitDualSVID:
		return "dual-svid"
	case InitRefine:
		return "refine"
	}
	return fmt.Sprintf("Init(%d)", int(i))
}

// ParseInit parses "dual-svid" or "refine"; anything else is an error quoting the input.
func ParseInit(s string) (Init, error) {
	switch s {
	case "dual-svid":
		return InitDualSVID, nil
	case "refine":
		return InitRefine, nil
	}
	return 0, fmt.Errorf("init %q: want dual-svid or refine", s)
}

// DefaultRefineIters is the number of alternating rounds of InitRefine per metric when
// Options.RefineIters is 0. On the tiny teacher (8 × 64 held-out tokens, second moments
// only) 4, 8, 16 and 32 rounds gave a perplexity of 446, 374, 363 and 349.
const DefaultRefineIters = 8

// maxSignSweeps bounds the coordinate-descent sweeps over one row of signs per sub-step.
const maxSignSweeps = 4

// refiner minimises f = tr((T − Σ_p Ŵ_p)·C·(T − Σ_p Ŵ_p)ᵀ) (C = I, the squared Frobenius
// norm, when c is nil) over the signs and scales of paths, with
// Ŵ_p = diag(h)·U·diag(ℓ)·V·diag(g) and T·C bound in t (m×n), by block coordinate descent:
// per path, the left side (the signs U, then h, then ℓ, given V and g) and the right side
// (V, then g, then ℓ, given U and h) against the residual of the other paths. Every sub-step
// is an exact or descending minimisation of f over its block, so f never increases (up to
// rounding):
//
//   - U (V likewise, by columns, without a metric): each row u of U solves a binary
//     quadratic problem min_u −2h·uᵀp + h²·uᵀGu with G = diag(ℓ)·R·C·Rᵀ·diag(ℓ),
//     p = diag(ℓ)·(T·C·Rᵀ)_i and R = V·diag(g), by coordinate descent (a sign flips only
//     when that lowers f); with a metric the columns of V couple (rightSignsScalesC);
//   - h (g likewise): the least-squares scale of each row given its signs, h_i = uᵀp/uᵀGu;
//   - ℓ: the least-squares solution of the r×r normal equations
//     ((Uᵀdiag(h²)U) ⊙ (R·C·Rᵀ))·ℓ = b (Cholesky), kept only when it lowers f.
//
// Scales stay non-negative: a negative least-squares scale is folded into the signs of its
// row (h, g) or column (ℓ) of U or V, which leaves Ŵ unchanged. The large products —
// T·C·Rᵀ, C·Tᵀ·diag(h)·U (m·n·r each), the r×r Grams of the factors, the m×r, n×r
// corrections of the other paths and the products with C — go through t and prod
// (Products); the sign descent runs on the CPU in
// O((m + n)·r) per sweep plus O(r) per flip. Each side's Gram is computed once per round
// and reused by the other side (its signs folded in by rankScales).
type refiner struct {
	m, n int
	t    BoundProducts
	// c, when not nil, is the metric C (n×n, symmetric positive definite) and t is bound to
	// T·C: f is then tr((T − ΣŴ)·C·(T − ΣŴ)ᵀ), every Gram of the right factors is R·C·Rᵀ, and
	// the right side runs rightSignsScalesC.
	c     []float64
	prod  Products
	paths []pathF64
	// ga[p] = (diag(h)·U)ᵀ·(diag(h)·U) and gr[p] = R·C·Rᵀ (R·Rᵀ without c), R = V·diag(g), of
	// path p (r×r), nil until computed; each is current whenever the other side runs.
	ga, gr [][]float64
	// rc[p] = R·C of path p (r×n) with a metric, nil until computed and after R changes: the
	// largest product of a round (r·n² per path), computed once per round and path.
	rc [][]float64
	// trace, when non-nil, is called after every sub-step with its name: "U", "h", "ℓ"
	// (left side), "V", "g", "ℓ" (right side), and the path index (tests).
	trace func(step string, path int)
}

// run does iters rounds; each round refines every path, left side then right side.
func (f *refiner) run(iters int) error {
	f.ga, f.gr, f.rc = make([][]float64, len(f.paths)), make([][]float64, len(f.paths)), make([][]float64, len(f.paths))
	for it := 0; it < iters; it++ {
		for p := range f.paths {
			if err := f.leftSide(p); err != nil {
				return fmt.Errorf("refine round %d, path %d: %w", it+1, p, err)
			}
			if err := f.rightSide(p); err != nil {
				return fmt.Errorf("refine round %d, path %d: %w", it+1, p, err)
			}
		}
	}
	return nil
}

func (f *refiner) note(step string, p int) {
	if f.trace != nil {
		f.trace(step, p)
	}
}

// left returns diag(h)·U·diag(ℓ) (m×r) of path p; with noL, diag(h)·U.
func (p *pathF64) left(noL bool) []float64 {
	out := make([]float64, p.m*p.r)
	for i := 0; i < p.m; i++ {
		for c := 0; c < p.r; c++ {
			v := p.h[i] * p.u[i*p.r+c]
			if !noL {
				v *= p.l[c]
			}
			out[i*p.r+c] = v
		}
	}
	return out
}

// right returns V·diag(g) (r×n) of path p.
func (p *pathF64) right() []float64 {
	out := make([]float64, p.r*p.n)
	for c := 0; c < p.r; c++ {
		for j := 0; j < p.n; j++ {
			out[c*p.n+j] = p.v[c*p.n+j] * p.g[j]
		}
	}
	return out
}

// transpose returns the cols×rows transpose of the row-major rows×cols matrix a.
func transpose(a []float64, rows, cols int) []float64 {
	out := make([]float64, len(a))
	for i := 0; i < rows; i++ {
		for j, v := range a[i*cols : (i+1)*cols] {
			out[j*rows+i] = v
		}
	}
	return out
}

// gram returns a·aᵀ (rows×rows) of the row-major rows×cols matrix a, through prod.
func gram(prod Products, a []float64, rows, cols int) ([]float64, error) {
	g := make([]float64, rows*rows)
	return g, prod.Mul(g, a, transpose(a, rows, cols), rows, cols, rows)
}

// subOthers sets dst −= Σ_{q≠p} X_q·(Y_q·Z) over the other paths q, with X_q = x(q)
// (rows×r), Y_q = y(q) (r×k) and Z = z (k×r): it turns a product with the bound target into
// the same product with the residual of the other paths, without forming the residual. The
// left side passes (X, Y) = (L_q, R_q) and Z = C·Rᵀ, the right side (C·R_qᵀ, L_qᵀ) and
// Z = diag(h)·U (C = I without a metric).
func (f *refiner) subOthers(dst []float64, rows, k int, p int, z []float64, x, y func(q int) ([]float64, error)) error {
	r := f.paths[p].r
	for q := range f.paths {
		if q == p {
			continue
		}
		xq, err := x(q)
		if err != nil {
			return err
		}
		yq, err := y(q)
		if err != nil {
			return err
		}
		yz := make([]float64, r*r) // Y_q·Z
		if err := f.prod.Mul(yz, yq, z, r, k, r); err != nil {
			return err
		}
		tmp := make([]float64, rows*r)
		if err := f.prod.Mul(tmp, xq, yz, rows, r, r); err != nil {
			return err
		}
		floats.Sub(dst, tmp)
	}
	return nil
}

// timesC returns x·C for the row-major rows×n x, through prod; x itself without a metric.
func (f *refiner) timesC(x []float64, rows int) ([]float64, error) {
	if f.c == nil {
		return x, nil
	}
	out := make([]float64, rows*f.n)
	if err := f.prod.Mul(out, x, f.c, rows, f.n, f.n); err != nil {
		return nil, fmt.Errorf("refine: ·C: %w", err)
	}
	return out, nil
}

// rightC returns R·C of path p (r×n, R = V·diag(g)), from f.rc when current; R itself
// without a metric.
func (f *refiner) rightC(p int) ([]float64, error) {
	P := &f.paths[p]
	if f.c == nil {
		return P.right(), nil
	}
	if f.rc[p] == nil {
		RC, err := f.timesC(P.right(), P.r)
		if err != nil {
			return nil, err
		}
		f.rc[p] = RC
	}
	return f.rc[p], nil
}

// rightGram returns R·C·Rᵀ (R·Rᵀ without a metric, r×r) of path p.
func (f *refiner) rightGram(p int) ([]float64, error) {
	P := &f.paths[p]
	RC, err := f.rightC(p)
	if err != nil {
		return nil, err
	}
	g := make([]float64, P.r*P.r)
	return g, f.prod.Mul(g, P.right(), transpose(RC, P.r, f.n), P.r, f.n, P.r)
}

// leftSide refines U, h and ℓ of path p against T minus the other paths.
func (f *refiner) leftSide(p int) error {
	P := &f.paths[p]
	m, n, r := P.m, P.n, P.r
	R := P.right()
	// Pm = (T − Σ_{q≠p} L_q·R_q)·C·Rᵀ (m×r), T·C bound in t.
	Pm := make([]float64, m*r)
	if err := f.t.MulW(Pm, transpose(R, r, n), r); err != nil {
		return err
	}
	RC, err := f.rightC(p)
	if err != nil {
		return err
	}
	err = f.subOthers(Pm, m, n, p, transpose(RC, r, n),
		func(q int) ([]float64, error) { return f.paths[q].left(false), nil },
		func(q int) ([]float64, error) { return f.paths[q].right(), nil })
	if err != nil {
		return err
	}
	if f.gr[p] == nil {
		if f.gr[p], err = f.rightGram(p); err != nil {
			return err
		}
	}
	Gr := f.gr[p]
	if err := f.signsAndScales(P.u, P.h, Pm, Gr, P.l, m, "U", "h", p); err != nil {
		return err
	}
	// ℓ: b_c = Σ_i h_i·U_ic·Pm_ic; Ga = (diag(h)·U)ᵀ·(diag(h)·U).
	A := P.left(true)
	b := make([]float64, r)
	for i := 0; i < m; i++ {
		for c := 0; c < r; c++ {
			b[c] += A[i*r+c] * Pm[i*r+c]
		}
	}
	if f.ga[p], err = gram(f.prod, transpose(A, m, r), r, m); err != nil {
		return err
	}
	f.rankScales(p, f.ga[p], Gr, b, true)
	f.note("ℓ", p)
	return nil
}

// rightSide refines V, g and ℓ of path p against T minus the other paths.
func (f *refiner) rightSide(p int) error {
	P := &f.paths[p]
	m, n, r := P.m, P.n, P.r
	A := P.left(true) // diag(h)·U, m×r
	// Q0 = C·(T − Σ_{q≠p} L_q·R_q)ᵀ·A (n×r), T·C bound in t.
	Q0 := make([]float64, n*r)
	if err := f.t.MulWT(Q0, A, r); err != nil {
		return err
	}
	err := f.subOthers(Q0, n, m, p, A,
		func(q int) ([]float64, error) {
			RqC, err := f.rightC(q)
			if err != nil {
				return nil, err
			}
			return transpose(RqC, f.paths[q].r, n), nil
		},
		func(q int) ([]float64, error) { return transpose(f.paths[q].left(false), m, f.paths[q].r), nil })
	if err != nil {
		return err
	}
	if f.ga[p] == nil {
		if f.ga[p], err = gram(f.prod, transpose(A, m, r), r, m); err != nil {
			return err
		}
	}
	Ga := f.ga[p]
	// V by columns: the rows of Vᵀ.
	vt := transpose(P.v, r, n)
	sync := func() { copy(P.v, transpose(vt, n, r)) }
	if f.c == nil {
		err = f.signsAndScales(vt, P.g, Q0, Ga, P.l, n, "V", "g", p, sync)
	} else {
		err = f.rightSignsScalesC(vt, P.g, Q0, Ga, P.l, "V", "g", p, sync)
	}
	if err != nil {
		return err
	}
	// ℓ: b_c = Σ_j g_j·V_cj·Q0_jc; Gr = R·C·Rᵀ.
	R := P.right()
	b := make([]float64, r)
	for c := 0; c < r; c++ {
		for j := 0; j < n; j++ {
			b[c] += R[c*n+j] * Q0[j*r+c]
		}
	}
	f.rc[p] = nil // V and g changed
	if f.gr[p], err = f.rightGram(p); err != nil {
		return err
	}
	f.rankScales(p, Ga, f.gr[p], b, false)
	f.note("ℓ", p)
	return nil
}

// signsAndScales refines the rows×r signs s (rows of U, or of Vᵀ) and then their scales
// sc (h or g) for the problems min −2·sc_i·s_iᵀp_i + sc_i²·s_iᵀG·s_i with
// G = diag(ℓ)·gram·diag(ℓ) and p_i = ℓ ⊙ (row i of prod), prod rows×r: the products of the
// target with the other factor (T·Rᵀ or Tᵀ·diag(h)·U, other paths removed), gram the other
// factor's Gram (r×r). sync, when given, is called after the signs change (to write Vᵀ back
// into V) before the "signs" trace, and again after the scales fold signs.
func (f *refiner) signsAndScales(s, sc, prod, gram, l []float64, rows int, signs, scales string, p int, sync ...func()) error {
	r := len(l)
	G, pm := withRankScales(gram, prod, l, rows)
	z := make([]float64, rows*r) // z_i = G·s_i (G symmetric: s·G)
	if err := f.prod.Mul(z, s, G, rows, r, r); err != nil {
		return err
	}
	for i := 0; i < rows; i++ {
		signDescent(s[i*r:(i+1)*r], pm[i*r:(i+1)*r], z[i*r:(i+1)*r], G, sc[i])
	}
	for _, fn := range sync {
		fn()
	}
	f.note(signs, p)
	for i := 0; i < rows; i++ {
		si, zi := s[i*r:(i+1)*r], z[i*r:(i+1)*r]
		num, den := floats.Dot(si, pm[i*r:(i+1)*r]), floats.Dot(si, zi)
		if !(den > 0) {
			sc[i] = 0
			continue
		}
		sc[i] = num / den
		if sc[i] < 0 {
			sc[i] = -sc[i]
			floats.Scale(-1, si)
		}
	}
	for _, fn := range sync {
		fn()
	}
	f.note(scales, p)
	return nil
}

// withRankScales returns diag(ℓ)·gram·diag(ℓ) (r×r) and prod·diag(ℓ) (rows×r).
func withRankScales(gram, prod, l []float64, rows int) (g, p []float64) {
	r := len(l)
	g = make([]float64, r*r)
	for c := 0; c < r; c++ {
		for d := 0; d < r; d++ {
			g[c*r+d] = l[c] * gram[c*r+d] * l[d]
		}
	}
	p = make([]float64, rows*r)
	for i := 0; i < rows; i++ {
		for c := 0; c < r; c++ {
			p[i*r+c] = prod[i*r+c] * l[c]
		}
	}
	return g, p
}

// gramBlock is the number of columns of V whose changes rightSignsScalesC applies to the
// others at once (as one product).
const gramBlock = 64

// gramScaleSweeps is the number of Gauss–Seidel sweeps of the g step in the metric C.
const gramScaleSweeps = 8

// rightSignsScalesC is the V and g steps of the right side in the metric C, where the
// columns of V no longer separate: with L = diag(h)·U·diag(ℓ), M = LᵀL = diag(ℓ)·ga·diag(ℓ),
// K = diag(g)·C·diag(g) and B = Lᵀ·T·C (B_j = ℓ ⊙ row j of prod = C·Tᵀ·diag(h)·U), the
// objective in V is −2·Σ_j g_j·B_jᵀv_j + Σ_jk K_jk·v_jᵀ·M·v_k. Column j at a time (in order,
// vt holding the columns as rows), with the others fixed, that is the binary quadratic
// problem −2·v_jᵀ(g_j·B_j − Σ_{k≠j} K_jk·M·v_k) + K_jj·v_jᵀ·M·v_j, lowered by signDescent;
// E = K·(M·V)ᵀ keeps Σ_k K_jk·M·v_k current (the changes of each block of gramBlock columns
// applied to the others by one product, through prod, and within the block directly). Then
// g: the objective −2·gᵀβ + gᵀ·H·g with β_j = g-free B_jᵀv_j and H = C ⊙ (VᵀMV), by
// gramScaleSweeps Gauss–Seidel sweeps (each an exact minimisation over one g_j, so the
// objective never rises), negative g_j folded into v_j. Traces and sync as signsAndScales.
func (f *refiner) rightSignsScalesC(vt, g, prod, ga, l []float64, signs, scales string, p int, sync func()) error {
	n, r := f.n, len(l)
	M, B := withRankScales(ga, prod, l, n)
	K := make([]float64, n*n)
	for j := 0; j < n; j++ {
		for k := 0; k < n; k++ {
			K[j*n+k] = g[j] * f.c[j*n+k] * g[k]
		}
	}
	z := make([]float64, n*r) // z_j = M·v_j
	if err := f.prod.Mul(z, vt, M, n, r, r); err != nil {
		return err
	}
	e := make([]float64, n*r) // e_j = Σ_k K_jk·z_k
	if err := f.prod.Mul(e, K, z, n, n, r); err != nil {
		return err
	}
	dz := make([]float64, gramBlock*r) // the block's z_k changes
	pj := make([]float64, r)
	kb := make([]float64, n*gramBlock)
	upd := make([]float64, n*r)
	for j0 := 0; j0 < n; j0 += gramBlock {
		j1 := min(j0+gramBlock, n)
		clear(dz)
		for j := j0; j < j1; j++ {
			kjj := K[j*n+j]
			if !(kjj > 0) {
				continue
			}
			a := math.Sqrt(kjj)
			zj := z[j*r : (j+1)*r]
			// p̂ = g_j·B_j − (e_j + Σ_{k<j in block} K_jk·Δz_k − K_jj·z_j), over a.
			for c := 0; c < r; c++ {
				pj[c] = g[j]*B[j*r+c] - e[j*r+c] + kjj*zj[c]
			}
			for k := j0; k < j; k++ {
				floats.AddScaled(pj, -K[j*n+k], dz[(k-j0)*r:(k-j0+1)*r])
			}
			floats.Scale(1/a, pj)
			old := dz[(j-j0)*r : (j-j0+1)*r]
			copy(old, zj)
			if signDescent(vt[j*r:(j+1)*r], pj, zj, M, a) == 0 {
				clear(old)
				continue
			}
			for c := range old {
				old[c] = zj[c] - old[c]
			}
		}
		// e += K[:, j0:j1]·Δz for every column (those of the block included: they are done).
		b := j1 - j0
		for i := 0; i < n; i++ {
			copy(kb[i*b:(i+1)*b], K[i*n+j0:i*n+j1])
		}
		if err := f.prod.Mul(upd, kb[:n*b], dz[:b*r], n, b, r); err != nil {
			return err
		}
		floats.Add(e, upd)
	}
	sync()
	f.note(signs, p)
	// g: H = C ⊙ (z·vtᵀ), β_j = B_j·v_j.
	H := make([]float64, n*n)
	if err := f.prod.Mul(H, z, transpose(vt, n, r), n, r, n); err != nil {
		return err
	}
	beta := make([]float64, n)
	for j := 0; j < n; j++ {
		beta[j] = floats.Dot(B[j*r:(j+1)*r], vt[j*r:(j+1)*r])
		for k := 0; k < n; k++ {
			H[j*n+k] *= f.c[j*n+k]
		}
	}
	for sweep := 0; sweep < gramScaleSweeps; sweep++ {
		for j := 0; j < n; j++ {
			hjj := H[j*n+j]
			if !(hjj > 0) {
				continue
			}
			g[j] = (beta[j] - floats.Dot(H[j*n:(j+1)*n], g) + hjj*g[j]) / hjj
		}
	}
	for j := 0; j < n; j++ {
		if g[j] < 0 {
			g[j] = -g[j]
			floats.Scale(-1, vt[j*r:(j+1)*r])
		}
	}
	sync()
	f.note(scales, p)
	return nil
}

// signDescent lowers φ(u) = −2a·uᵀp + a²·uᵀG·u over u ∈ {±1}^r (G symmetric r×r, a ≥ 0) by
// coordinate descent from u: flipping u_c changes φ by 4a·u_c·(p_c − a·(z_c − G_cc·u_c))
// with z = G·u, so u_c flips when that is negative (beyond rounding), and z is updated by
// −2u_c·G_c. At most maxSignSweeps sweeps over c = 0…r−1, fewer when one flips nothing.
// It returns the number of flips.
func signDescent(u, p, z, G []float64, a float64) int {
	r := len(u)
	if a == 0 {
		return 0
	}
	flips := 0
	for sweep := 0; sweep < maxSignSweeps; sweep++ {
		changed := false
		for c := 0; c < r; c++ {
			gcc := G[c*r+c]
			q := p[c] - a*(z[c]-gcc*u[c])
			tol := 1e-12 * (math.Abs(p[c]) + a*(math.Abs(z[c])+gcc))
			if u[c]*q < -tol {
				floats.AddScaled(z, -2*u[c], G[c*r:(c+1)*r])
				u[c] = -u[c]
				flips++
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return flips
}

// rankScales sets ℓ of P to the least-squares solution of N·ℓ = b with N = Ga ⊙ Gr (the
// Hadamard product of the r×r Grams of diag(h)·U and V·diag(g)) when that lowers
// φ(ℓ) = ℓᵀNℓ − 2bᵀℓ (the part of f that depends on ℓ), then folds negative entries into
// the signs of U's column (onU; Ga's row and column c change sign) or V's row (Gr's). N is
// positive semidefinite; a singular N gets a growing ridge before the solve, and a solve
// that does not lower φ is dropped.
func (f *refiner) rankScales(p int, Ga, Gr, b []float64, onU bool) {
	P := &f.paths[p]
	r := P.r
	N := mat.NewSymDense(r, nil)
	var maxDiag float64
	for c := 0; c < r; c++ {
		for d := c; d < r; d++ {
			N.SetSym(c, d, Ga[c*r+d]*Gr[c*r+d])
		}
		maxDiag = max(maxDiag, N.At(c, c))
	}
	if !(maxDiag > 0) {
		return
	}
	phi := func(l []float64) float64 {
		var q float64
		for c := 0; c < r; c++ {
			var row float64
			for d := 0; d < r; d++ {
				row += N.At(c, d) * l[d]
			}
			q += l[c] * (row - 2*b[c])
		}
		return q
	}
	bv := mat.NewVecDense(r, b)
	var chol mat.Cholesky
	ridge := 0.0
	for try := 0; try < 6; try++ {
		M := N
		if ridge > 0 {
			M = mat.NewSymDense(r, nil)
			M.CopySym(N)
			for c := 0; c < r; c++ {
				M.SetSym(c, c, M.At(c, c)+ridge)
			}
		}
		if chol.Factorize(M) {
			var x mat.VecDense
			if err := chol.SolveVecTo(&x, bv); err == nil {
				l := x.RawVector().Data
				if phi(l) <= phi(P.l) {
					copy(P.l, l)
				}
				break
			}
		}
		ridge = max(ridge*100, 1e-12*maxDiag)
	}
	for c := 0; c < r; c++ {
		if P.l[c] >= 0 {
			continue
		}
		P.l[c] = -P.l[c]
		g := Gr
		if onU {
			g = Ga
			for i := 0; i < P.m; i++ {
				P.u[i*r+c] = -P.u[i*r+c]
			}
		} else {
			floats.Scale(-1, P.v[c*P.n:(c+1)*P.n])
			if f.rc != nil && f.rc[p] != nil {
				floats.Scale(-1, f.rc[p][c*P.n:(c+1)*P.n]) // row c of R·C follows row c of V
			}
		}
		for d := 0; d < r; d++ {
			if d != c {
				g[c*r+d], g[d*r+c] = -g[c*r+d], -g[d*r+c]
			}
		}
	}
}

// maxRefineIters bounds Options.RefineIters.
const maxRefineIters = 1000

// refineMatrix builds one InitRefine candidate of the given paths at rank r: the Dual-SVID
// start of target (w·diag(s), or w without weights; the first path from svd when non-nil,
// as compressPaths), opt.RefineIters rounds of the refiner against target, then g ← g/s;
// where mt has the Gram, opt.RefineIters more rounds against w in the Gram's metric (the
// output error); last the scales rebalanced and rounded to float16. Errors are those of the
// stored weight against w in mt, the init errors those of the start (before rounding).
func refineMatrix(w []float64, mt metric, target []float64, m, n, r, paths int, svd *TruncatedSVD, rng *rand.Rand, opt Options) (*cmf.BLRWeight, matrixErrors, error) {
	_, _, start, err := compressPaths(target, metric{}, m, n, r, paths, svd, rng, opt)
	if err != nil {
		return nil, matrixErrors{}, err
	}
	prod := opt.Products
	if prod == nil {
		prod = CPUProducts{}
	}
	var errs matrixErrors
	if errs.initRel, errs.initWeighted, err = pathsErrors(w, mt, unweighted(start, mt.s), prod); err != nil {
		return nil, matrixErrors{}, err
	}
	ps, err := refineAgainst(target, nil, start, opt.RefineIters, prod)
	if err != nil {
		return nil, matrixErrors{}, err
	}
	ps = unweighted(ps, mt.s)
	if mt.gram != nil {
		c := mt.regularisedGram(n)
		wc := make([]float64, m*n)
		if err := prod.Mul(wc, w, c, m, n, n); err != nil {
			return nil, matrixErrors{}, fmt.Errorf("refine: W·C: %w", err)
		}
		if ps, err = refineAgainst(wc, c, ps, opt.RefineIters, prod); err != nil {
			return nil, matrixErrors{}, err
		}
	}
	bw := &cmf.BLRWeight{M: m, N: n, Rank: r}
	for i := range ps {
		ps[i].balance()
		q, err := ps[i].toBLRPath()
		if err != nil {
			return nil, matrixErrors{}, fmt.Errorf("path %d: %w", i, err)
		}
		bw.Paths = append(bw.Paths, q)
	}
	var factors [][2][]float64
	for p := range bw.Paths {
		left, right := bw.PathFactors(p)
		factors = append(factors, [2][]float64{left, right})
	}
	resid := append([]float64(nil), w...)
	if err := subtractPaths(resid, m, n, r, factors, prod); err != nil {
		return nil, matrixErrors{}, err
	}
	if errs.rel, errs.weighted, err = mt.errors(w, resid, m, n, prod); err != nil {
		return nil, matrixErrors{}, err
	}
	return bw, errs, nil
}

// refineAgainst runs iters rounds of the refiner on the paths with the bound matrix t (the
// target T, or W·C in the metric c) and returns them.
func refineAgainst(t, c []float64, paths []pathF64, iters int, prod Products) ([]pathF64, error) {
	m, n := paths[0].m, paths[0].n
	bp, err := prod.Bind(t, m, n)
	if err != nil {
		return nil, fmt.Errorf("refine: %w", err)
	}
	f := &refiner{m: m, n: n, t: bp, c: c, prod: prod, paths: paths}
	err = f.run(iters)
	if cerr := bp.Close(); err == nil {
		err = cerr
	}
	return f.paths, err
}

// unweighted returns a copy of the paths with g_j divided by s_j (the paths of Ŵ when they
// are those of Ŵ·diag(s)); s nil returns plain copies.
func unweighted(paths []pathF64, s []float64) []pathF64 {
	out := make([]pathF64, len(paths))
	for i, p := range paths {
		p.h = append([]float64(nil), p.h...)
		p.l = append([]float64(nil), p.l...)
		p.g = append([]float64(nil), p.g...)
		p.u = append([]float64(nil), p.u...)
		p.v = append([]float64(nil), p.v...)
		for j := range p.g {
			if s != nil {
				p.g[j] /= s[j]
			}
		}
		out[i] = p
	}
	return out
}

// pathsErrors returns mt.errors of w against the unrounded paths.
func pathsErrors(w []float64, mt metric, ps []pathF64, prod Products) (rel, weighted float64, err error) {
	m, n, r := ps[0].m, ps[0].n, ps[0].r
	var factors [][2][]float64
	for i := range ps {
		factors = append(factors, [2][]float64{ps[i].left(false), ps[i].right()})
	}
	resid := append([]float64(nil), w...)
	if err := subtractPaths(resid, m, n, r, factors, prod); err != nil {
		return 0, 0, err
	}
	return mt.errors(w, resid, m, n, prod)
}

// subtractPaths sets resid −= Σ_p left_p·right_p (left m×r, right r×n, row-major), the
// products through prod.
func subtractPaths(resid []float64, m, n, r int, factors [][2][]float64, prod Products) error {
	what := make([]float64, m*n)
	for p, f := range factors {
		if err := prod.Mul(what, f[0], f[1], m, r, n); err != nil {
			return fmt.Errorf("reconstruction of path %d: %w", p, err)
		}
		floats.Sub(resid, what)
	}
	return nil
}
