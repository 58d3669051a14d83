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
// scales of every path by alternating minimisation of ‖(W − Ŵ)·diag(s)‖_F (DESIGN.md §5),
// with s_j = √E[x_j²] from Options.Calibration (s = 1, the plain Frobenius error, without
// one).
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

// DefaultRefineIters is the number of alternating rounds of InitRefine when
// Options.RefineIters is 0.
const DefaultRefineIters = 8

// maxSignSweeps bounds the coordinate-descent sweeps over one row of signs per sub-step.
const maxSignSweeps = 4

// refiner minimises f = ‖T − Σ_p Ŵ_p‖_F² over the signs and scales of paths, with
// Ŵ_p = diag(h)·U·diag(ℓ)·V·diag(g) and T bound in t (m×n), by block coordinate descent:
// per path, the left side (the signs U, then h, then ℓ, given V and g) and the right side
// (V, then g, then ℓ, given U and h) against the residual of the other paths. Every sub-step
// is an exact or descending minimisation of f over its block, so f never increases (up to
// rounding):
//
//   - U (V likewise, by columns): each row u of U solves a binary quadratic problem
//     min_u −2h·uᵀp + h²·uᵀGu with G = diag(ℓ)·R·Rᵀ·diag(ℓ), p = diag(ℓ)·(T_i·Rᵀ) and
//     R = V·diag(g), by coordinate descent (a sign flips only when that lowers f);
//   - h (g likewise): the least-squares scale of each row given its signs, h_i = uᵀp/uᵀGu;
//   - ℓ: the least-squares solution of the r×r normal equations
//     ((Uᵀdiag(h²)U) ⊙ (V·diag(g²)·Vᵀ))·ℓ = b (Cholesky), kept only when it lowers f.
//
// Scales stay non-negative: a negative least-squares scale is folded into the signs of its
// row (h, g) or column (ℓ) of U or V, which leaves Ŵ unchanged. The large products — T·Rᵀ,
// Tᵀ·diag(h)·U (m·n·r each), the r×r Grams of the factors and the m×r, n×r corrections of
// the other paths — go through t and prod (Products); the sign descent runs on the CPU in
// O((m + n)·r) per sweep plus O(r) per flip. Each side's Gram is computed once per round
// and reused by the other side (its signs folded in by rankScales).
type refiner struct {
	m, n  int
	t     BoundProducts
	prod  Products
	paths []pathF64
	// ga[p] = (diag(h)·U)ᵀ·(diag(h)·U) and gr[p] = (V·diag(g))·(V·diag(g))ᵀ of path p (r×r),
	// nil until computed; each is current whenever the other side runs.
	ga, gr [][]float64
	// trace, when non-nil, is called after every sub-step with its name: "U", "h", "ℓ"
	// (left side), "V", "g", "ℓ" (right side), and the path index (tests).
	trace func(step string, path int)
}

// run does iters rounds; each round refines every path, left side then right side.
func (f *refiner) run(iters int) error {
	f.ga, f.gr = make([][]float64, len(f.paths)), make([][]float64, len(f.paths))
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
// (rows×r), Y_q = y(q) (r×k) and Z = z (k×r): it turns a product T·Z′ into
// (T − Σ_{q≠p} Ŵ_q)·Z′ without forming the residual. The left side passes
// (X, Y) = (L_q, R_q) and Z = Rᵀ, the right side (R_qᵀ, L_qᵀ) and Z = diag(h)·U.
func (f *refiner) subOthers(dst []float64, rows, k int, p int, z []float64, x, y func(q *pathF64) []float64) error {
	r := f.paths[p].r
	for q := range f.paths {
		if q == p {
			continue
		}
		Q := &f.paths[q]
		yz := make([]float64, r*r) // Y_q·Z
		if err := f.prod.Mul(yz, y(Q), z, r, k, r); err != nil {
			return err
		}
		tmp := make([]float64, rows*r)
		if err := f.prod.Mul(tmp, x(Q), yz, rows, r, r); err != nil {
			return err
		}
		floats.Sub(dst, tmp)
	}
	return nil
}

// leftSide refines U, h and ℓ of path p against T minus the other paths.
func (f *refiner) leftSide(p int) error {
	P := &f.paths[p]
	m, n, r := P.m, P.n, P.r
	R := P.right()
	Rt := transpose(R, r, n)
	// Pm = (T − Σ_{q≠p} L_q·R_q)·Rᵀ (m×r).
	Pm := make([]float64, m*r)
	if err := f.t.MulW(Pm, Rt, r); err != nil {
		return err
	}
	err := f.subOthers(Pm, m, n, p, Rt,
		func(q *pathF64) []float64 { return q.left(false) },
		func(q *pathF64) []float64 { return q.right() })
	if err != nil {
		return err
	}
	if f.gr[p] == nil {
		if f.gr[p], err = gram(f.prod, R, r, n); err != nil {
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
	f.rankScales(P, f.ga[p], Gr, b, true)
	f.note("ℓ", p)
	return nil
}

// rightSide refines V, g and ℓ of path p against T minus the other paths.
func (f *refiner) rightSide(p int) error {
	P := &f.paths[p]
	m, n, r := P.m, P.n, P.r
	A := P.left(true) // diag(h)·U, m×r
	// Q0 = (T − Σ_{q≠p} L_q·R_q)ᵀ·A (n×r).
	Q0 := make([]float64, n*r)
	if err := f.t.MulWT(Q0, A, r); err != nil {
		return err
	}
	err := f.subOthers(Q0, n, m, p, A,
		func(q *pathF64) []float64 { return transpose(q.right(), q.r, q.n) },
		func(q *pathF64) []float64 { return transpose(q.left(false), q.m, q.r) })
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
	if err := f.signsAndScales(vt, P.g, Q0, Ga, P.l, n, "V", "g", p, func() { copy(P.v, transpose(vt, n, r)) }); err != nil {
		return err
	}
	// ℓ: b_c = Σ_j g_j·V_cj·Q0_jc; Gr = (V·diag(g))·(V·diag(g))ᵀ.
	R := P.right()
	b := make([]float64, r)
	for c := 0; c < r; c++ {
		for j := 0; j < n; j++ {
			b[c] += R[c*n+j] * Q0[j*r+c]
		}
	}
	if f.gr[p], err = gram(f.prod, R, r, n); err != nil {
		return err
	}
	f.rankScales(P, Ga, f.gr[p], b, false)
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
	G := make([]float64, r*r)
	for c := 0; c < r; c++ {
		for d := 0; d < r; d++ {
			G[c*r+d] = l[c] * gram[c*r+d] * l[d]
		}
	}
	pm := make([]float64, rows*r)
	for i := 0; i < rows; i++ {
		for c := 0; c < r; c++ {
			pm[i*r+c] = prod[i*r+c] * l[c]
		}
	}
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
func (f *refiner) rankScales(P *pathF64, Ga, Gr, b []float64, onU bool) {
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
// start of target (w·diag(s), or w when s is nil; the first path from svd when non-nil, as
// compressPaths), opt.RefineIters rounds of the refiner against target, then g ← g/s, the
// scales rebalanced and rounded to float16. Errors are those of the stored weight against
// w; the init errors those of the start (its plain error from its paths unweighted the same
// way, before rounding).
func refineMatrix(w, s, target []float64, m, n, r, paths int, svd *TruncatedSVD, rng *rand.Rand, opt Options) (*cmf.BLRWeight, matrixErrors, error) {
	_, startErrs, start, err := compressPaths(target, nil, m, n, r, paths, svd, rng, opt)
	if err != nil {
		return nil, matrixErrors{}, err
	}
	prod := opt.Products
	if prod == nil {
		prod = CPUProducts{}
	}
	var errs matrixErrors
	if s == nil {
		errs.initRel = startErrs.rel
	} else {
		errs.initWeighted = startErrs.rel
		if errs.initRel, _, err = pathsErrors(w, nil, start, s, prod); err != nil {
			return nil, matrixErrors{}, err
		}
	}
	bp, err := prod.Bind(target, m, n)
	if err != nil {
		return nil, matrixErrors{}, fmt.Errorf("refine: %w", err)
	}
	f := &refiner{m: m, n: n, t: bp, prod: prod, paths: start}
	err = f.run(opt.RefineIters)
	if cerr := bp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, matrixErrors{}, err
	}
	bw, err := storePaths(f.paths, s)
	if err != nil {
		return nil, matrixErrors{}, err
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
	errs.rel, errs.weighted = residualErrors(w, resid, s, m, n)
	return bw, errs, nil
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

// storePaths returns the BLR weight of the unweighted paths (unweighted with s), each with
// its scales rebalanced to equal RMS and rounded to float16. Errors: a scale beyond the
// float16 range.
func storePaths(paths []pathF64, s []float64) (*cmf.BLRWeight, error) {
	ps := unweighted(paths, s)
	bw := &cmf.BLRWeight{M: ps[0].m, N: ps[0].n, Rank: ps[0].r}
	for i := range ps {
		ps[i].balance()
		q, err := ps[i].toBLRPath()
		if err != nil {
			return nil, fmt.Errorf("path %d: %w", i, err)
		}
		bw.Paths = append(bw.Paths, q)
	}
	return bw, nil
}

// pathsErrors returns residualErrors of w against the unrounded paths unweighted with su
// (see unweighted), the error weighted by s.
func pathsErrors(w, s []float64, paths []pathF64, su []float64, prod Products) (rel, weighted float64, err error) {
	ps := unweighted(paths, su)
	m, n, r := ps[0].m, ps[0].n, ps[0].r
	var factors [][2][]float64
	for i := range ps {
		factors = append(factors, [2][]float64{ps[i].left(false), ps[i].right()})
	}
	resid := append([]float64(nil), w...)
	if err := subtractPaths(resid, m, n, r, factors, prod); err != nil {
		return 0, 0, err
	}
	rel, weighted = residualErrors(w, resid, s, m, n)
	return rel, weighted, nil
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
