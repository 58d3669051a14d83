package compress

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/x448/float16"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
)

// PathMode selects how many BLR paths a compressed tensor gets.
type PathMode int

// Path modes: PathsAuto picks 1 or 2 per tensor, whichever reconstructs the weight with the
// lower relative Frobenius error at the same bit budget; Paths1 and Paths2 force the count.
const (
	PathsAuto PathMode = 0
	Paths1    PathMode = 1
	Paths2    PathMode = 2
)

// String returns "auto", "1" or "2" (the spelling ParsePathMode accepts).
func (p PathMode) String() string {
	switch p {
	case PathsAuto:
		return "auto"
	case Paths1:
		return "1"
	case Paths2:
		return "2"
	}
	return fmt.Sprintf("PathMode(%d)", int(p))
}

// ParsePathMode parses "auto", "1" or "2"; anything else is an error quoting the input.
func ParsePathMode(s string) (PathMode, error) {
	switch s {
	case "auto":
		return PathsAuto, nil
	case "1":
		return Paths1, nil
	case "2":
		return Paths2, nil
	}
	return 0, fmt.Errorf("paths %q: want auto, 1 or 2", s)
}

// Options configure Model and Matrix. The zero value is valid: 1.0 bit
// per weight, paths auto, seed 0, the SVDOptions defaults, GOMAXPROCS workers.
type Options struct {
	// BitsPerWeight is the target storage cost of every compressed linear,
	// 8·len(payload)/(m·n) (DESIGN.md §4); 0 means 1.0. Must be finite and in (0, 32].
	BitsPerWeight float64
	// Paths is the number of BLR paths per tensor (PathsAuto, Paths1 or Paths2).
	Paths PathMode
	// Seed seeds the Gaussian sketches: each tensor draws from its own math/rand/v2 PCG
	// stream seeded with (Seed, FNV-1a-64 of the tensor name), so the output is identical
	// for a given seed whatever the worker count and order.
	Seed uint64
	// SVD tunes the randomised SVD (oversampling, power iterations).
	SVD SVDOptions
	// Workers is the number of tensors compressed at once (0: GOMAXPROCS).
	Workers int
	// Products computes the large products of the compressor (every randomised SVD's
	// sketch, power iterations, projection and U, and every path's reconstruction; see
	// Products); nil means CPUProducts{} (gonum, float64).
	// With another implementation (GPUProducts: float32 on a GPU) the output is still
	// deterministic for a given Seed on a given device, but not bit-identical to the CPU
	// path's: the sketch and the sign pattern of near-zero SVD factors shift with the
	// rounding, while ranks, paths budgets and bits per weight are the same and the relative
	// errors agree to well within 1e-3 (the randomised sketch varies them more than that).
	Products Products
	// Init is the initial factorisation: InitDualSVID (the zero value) or InitRefine.
	Init Init
	// Calibration holds the input statistics of every compressed linear (see Calibration).
	// InitRefine weights its reconstruction error by them (without them it refines the plain
	// Frobenius error); with either Init they give each TensorReport its weighted errors.
	// When set, every compressed tensor must have statistics of its n input features.
	Calibration *Calibration
	// RefineIters is the number of alternating rounds of InitRefine in the diagonal metric
	// and again, for tensors whose calibration has the Gram, in the Gram's (0:
	// DefaultRefineIters, at most 1000). A diagonal round costs about two randomised-SVD
	// power iterations of the tensor; a Gram round adds ~6·n²·r flops (DESIGN.md §5).
	RefineIters int
}

func (o Options) normalized() (Options, error) {
	if o.BitsPerWeight == 0 {
		o.BitsPerWeight = 1
	}
	if !(o.BitsPerWeight > 0 && o.BitsPerWeight <= 32) {
		return o, fmt.Errorf("compress: bits per weight %g must be in (0, 32]", o.BitsPerWeight)
	}
	if o.Paths != PathsAuto && o.Paths != Paths1 && o.Paths != Paths2 {
		return o, fmt.Errorf("compress: paths %d: want PathsAuto (0), Paths1 or Paths2", int(o.Paths))
	}
	if o.Workers < 0 {
		return o, fmt.Errorf("compress: workers %d is negative", o.Workers)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Init != InitDualSVID && o.Init != InitRefine {
		return o, fmt.Errorf("compress: init %d: want InitDualSVID (0) or InitRefine (1)", int(o.Init))
	}
	if o.RefineIters < 0 || o.RefineIters > maxRefineIters {
		return o, fmt.Errorf("compress: refine iterations %d outside [0, %d]", o.RefineIters, maxRefineIters)
	}
	if o.RefineIters == 0 {
		o.RefineIters = DefaultRefineIters
	}
	if o.Calibration != nil && o.Calibration.inputs == nil {
		return o, fmt.Errorf("compress: the Calibration was not made by NewCalibration")
	}
	return o, nil
}

// Kind is the kind of linear a compressed tensor is, as TensorReport.Kind gives it: its
// module's name, the last component of the checkpoint name before ".weight" ("gate_proj"
// for "model.layers.0.mlp.gate_proj.weight"), "" for a name that does not end in ".weight"
// after a module. Which tensors are compressed is the architecture's to say
// (arch.Tensor.BLR), not the name's.
func Kind(name string) string {
	mod, ok := strings.CutSuffix(name, ".weight")
	if !ok {
		return ""
	}
	return mod[strings.LastIndexByte(mod, '.')+1:]
}

// blrTensors returns the kind (Kind) of every tensor of cfg's architecture that the student
// stores as BLR (arch.Tensor.BLR): the decoder layers' projections except in_proj_a/b.
func blrTensors(cfg arch.Config) map[string]string {
	kinds := map[string]string{}
	for _, t := range cfg.Layout().Tensors() {
		if t.BLR {
			kinds[t.Name] = Kind(t.Name)
		}
	}
	return kinds
}

// BLRRank returns the rank Model and Matrix use for an m×n weight with the given number of
// paths at a budget of bpw bits per weight: the largest multiple of 8 whose payload
// (cmf.BLRPayloadSize) stays within bpw·m·n/8 bytes, at least 8, and at most min(m, n) rounded
// down to a multiple of 8 (a truncated SVD has no further components). ok is false when no
// rank ≥ 8 fits the budget (the rank returned is then 8). Arguments outside the domain
// (paths not 1 or 2, m or n < 8, n not a multiple of 8, bpw NaN or ≤ 0) give 0, false.
func BLRRank(bpw float64, paths, m, n int) (r int, ok bool) {
	if paths < 1 || paths > cmf.BLRMaxPaths || m < 8 || n < 8 || n%8 != 0 || !(bpw > 0) {
		return 0, false
	}
	capR := min(m, n) / 8 * 8
	fits := func(r int) bool { return cmf.BLRBitsPerWeight(paths, r, m, n) <= bpw }
	// payload(r) = 16 + P·(2m + 2n) + r·P·(2 + m/8 + n/8) is linear in r: start from the
	// real-valued solution, then step to the exact largest fitting multiple of 8.
	fixed := float64(cmf.BLRHeaderSize + paths*(2*m+2*n))
	slope := float64(paths) * (2 + float64(m)/8 + float64(n)/8)
	est := (bpw*float64(m)*float64(n)/8 - fixed) / slope
	r = int(math.Max(0, math.Min(math.Floor(est/8)*8, float64(capR))))
	for r > 0 && !fits(r) {
		r -= 8
	}
	for r+8 <= capR && fits(r+8) {
		r += 8
	}
	if r < 8 {
		return 8, false
	}
	return r, true
}

// Matrix compresses the row-major m×n matrix w (m output, n input features, n a
// multiple of 8, min(m, n) ≥ 8) into a BLR weight at opt.BitsPerWeight, by Dual-SVID
// (DESIGN.md §5, after LittleBit: Lee et al., "LittleBit: Ultra Low-Bit Quantization via
// Latent Factorization", 2025): truncated SVD W ≈ U′ΣV′ᵀ at rank r (RandomizedSVD),
// A = U′√Σ, B = √ΣV′ᵀ, U = sign(A), V = sign(B) (0 ↦ +1), (h, ℓ_u) the rank-1 factorisation
// of |A| and (ℓ_v, g) that of |B| (their top singular pairs, by power iteration, made
// positive), ℓ = ℓ_u ⊙ ℓ_v; a second path applies the same to the residual W − Ŵ₁ at the
// same rank. The rank comes from BLRRank. With PathsAuto both one path at the 1-path rank
// and two paths at the 2-path rank (the first path from the same SVD truncated) are built,
// and the one with the lower relative error is kept (one path on a tie, or when two paths
// cannot fit the budget). Per path the three scale vectors are rebalanced to equal RMS (the
// product is unchanged) and rounded to float16; Ŵ and the returned relative error
// ‖W − Ŵ‖_F/‖W‖_F use the rounded values. name seeds the random stream (see
// Options.Seed) and prefixes errors. w is not modified.
//
// Errors: a bad option, len(w) ≠ m·n, n not a multiple of 8, min(m, n) < 8, a non-finite
// entry, or scales beyond the float16 range (|W| entries above ~6·10⁴).
func Matrix(name string, w []float64, m, n int, opt Options) (*cmf.BLRWeight, float64, error) {
	opt, err := opt.normalized()
	if err != nil {
		return nil, 0, err
	}
	if m < 1 || n < 1 || len(w) != m*n {
		return nil, 0, fmt.Errorf("compress %s: %d values for a %d×%d matrix", name, len(w), m, n)
	}
	if n%8 != 0 {
		return nil, 0, fmt.Errorf("compress %s: n = %d input features is not a multiple of 8 (BLR needs whole bytes per sign row)", name, n)
	}
	if min(m, n) < 8 {
		return nil, 0, fmt.Errorf("compress %s: %d×%d is too small for BLR (min(m, n) < 8)", name, m, n)
	}
	r1, _ := BLRRank(opt.BitsPerWeight, 1, m, n)
	r2, ok2 := BLRRank(opt.BitsPerWeight, 2, m, n)
	bw, errs, err := compressMatrixRanks(name, w, m, n, r1, r2, ok2, opt)
	return bw, errs.rel, err
}

// matrixErrors are the relative reconstruction errors of one compressed tensor.
type matrixErrors struct {
	// rel = ‖W − Ŵ‖_F/‖W‖_F and weighted = ‖(W − Ŵ)·diag(s)‖_F/‖W·diag(s)‖_F of the stored
	// weight (weighted 0 without calibration).
	rel, weighted float64
	// initRel, initWeighted: the same of InitRefine's Dual-SVID start (0 for InitDualSVID).
	initRel, initWeighted float64
}

// compressMatrixRanks is Matrix at given ranks: r1 for one path, r2 for two (tried
// in PathsAuto mode only when ok2, that is when two paths fit the budget). opt is
// normalised and the shape checked. With opt.Calibration the tensor's metric comes from it
// (an error when it has no statistics for name); InitRefine then starts from W·diag(s) and
// picks the path count by the weighted error, InitDualSVID works on W and picks by the
// plain one.
func compressMatrixRanks(name string, w []float64, m, n, r1, r2 int, ok2 bool, opt Options) (*cmf.BLRWeight, matrixErrors, error) {
	mt, err := metricFor(opt.Calibration, name, n)
	if err != nil {
		return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
	}
	prod := opt.Products
	if prod == nil {
		prod = CPUProducts{}
	}
	if mt, err = mt.withWeight(w, m, n, prod); err != nil {
		return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
	}
	s := mt.s
	target := w // the matrix Dual-SVID factorises
	if opt.Init == InitRefine && s != nil {
		target = make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				target[i*n+j] = w[i*n+j] * s[j]
			}
		}
	}
	rng := rand.New(rand.NewPCG(opt.Seed, nameHash(name)))
	build := func(r, paths int, svd *TruncatedSVD) (*cmf.BLRWeight, matrixErrors, error) {
		if opt.Init == InitRefine {
			return refineMatrix(w, mt, target, m, n, r, paths, svd, rng, opt)
		}
		bw, errs, _, err := compressPaths(w, mt, m, n, r, paths, svd, rng, opt)
		return bw, errs, err
	}
	// better reports whether a has the lower error of the one Init minimises.
	better := func(a, b matrixErrors) bool {
		if opt.Init == InitRefine && s != nil {
			return a.weighted < b.weighted
		}
		return a.rel < b.rel
	}
	if opt.Paths == Paths2 {
		bw, e, err := build(r2, 2, nil)
		if err != nil {
			return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
		}
		return bw, e, nil
	}
	kSVD := r1
	if opt.Paths == PathsAuto && ok2 {
		kSVD = max(r1, r2)
	}
	svd, err := randomizedSVDWith(opt.Products, target, m, n, kSVD, opt.SVD, rng)
	if err != nil {
		return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
	}
	best, bestErr, err := build(r1, 1, svd)
	if err != nil {
		return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
	}
	if opt.Paths == PathsAuto && ok2 {
		two, twoErr, err := build(r2, 2, svd)
		if err != nil {
			return nil, matrixErrors{}, fmt.Errorf("compress %s: %w", name, err)
		}
		// The ranks of each path count fit the budget over all tensors, a mix of both need
		// not: InitRefine keeps two paths only where they cost no more bytes than one.
		// (InitDualSVID keeps today's choice, which stays within the budget on the models
		// measured because it picks two paths almost everywhere.)
		if better(twoErr, bestErr) && (opt.Init == InitDualSVID || two.PayloadSize() <= best.PayloadSize()) {
			best, bestErr = two, twoErr
		}
	}
	return best, bestErr, nil
}

// allocateRanks chooses the rank of every m×n shape for the given number of paths so that
// the bits of all of them together stay within bpw·Σ m·n: first each shape's own BLRRank,
// then, while the total allows, one more step of 8 to the shape with the lowest bits per
// weight that can still grow (ties to the lower index), until no step fits. This recovers
// the budget that rounding each rank down to a multiple of 8 leaves unused, so the overall
// bits per weight lands within one rank step of bpw. ok[i] is BLRRank's ok.
func allocateRanks(shapes [][2]int, paths int, bpw float64) (ranks []int, ok []bool) {
	ranks = make([]int, len(shapes))
	ok = make([]bool, len(shapes))
	var total, budget float64 // bits
	for i, s := range shapes {
		ranks[i], ok[i] = BLRRank(bpw, paths, s[0], s[1])
		total += 8 * float64(cmf.BLRPayloadSize(paths, ranks[i], s[0], s[1]))
		budget += bpw * float64(s[0]) * float64(s[1])
	}
	for {
		best, bestBPW := -1, math.Inf(1)
		for i, s := range shapes {
			if !ok[i] || ranks[i]+8 > min(s[0], s[1]) {
				continue
			}
			step := 8 * float64(cmf.BLRPayloadSize(paths, ranks[i]+8, s[0], s[1])-cmf.BLRPayloadSize(paths, ranks[i], s[0], s[1]))
			if total+step > budget {
				continue
			}
			if b := cmf.BLRBitsPerWeight(paths, ranks[i], s[0], s[1]); b < bestBPW {
				best, bestBPW = i, b
			}
		}
		if best < 0 {
			return ranks, ok
		}
		s := shapes[best]
		total += 8 * float64(cmf.BLRPayloadSize(paths, ranks[best]+8, s[0], s[1])-cmf.BLRPayloadSize(paths, ranks[best], s[0], s[1]))
		ranks[best] += 8
	}
}

// nameHash is FNV-1a-64 of s, the per-tensor half of the random seed.
func nameHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// compressPaths builds a BLR weight of the given paths at rank r by Dual-SVID of w. The
// first path comes from svd when it is non-nil (truncated to r) and from a fresh
// RandomizedSVD otherwise; the second from a RandomizedSVD of the residual (both with opt.SVD
// and opt.Products). It returns the stored weight, its errors (rel, and weighted in the
// metric mt) and the paths before rounding.
func compressPaths(w []float64, mt metric, m, n, r, paths int, svd *TruncatedSVD, rng *rand.Rand, opt Options) (*cmf.BLRWeight, matrixErrors, []pathF64, error) {
	bw := &cmf.BLRWeight{M: m, N: n, Rank: r}
	resid := append([]float64(nil), w...)
	prod := opt.Products
	if prod == nil {
		prod = CPUProducts{}
	}
	var start []pathF64
	for p := 0; p < paths; p++ {
		if p > 0 || svd == nil {
			var err error
			if svd, err = randomizedSVDWith(opt.Products, resid, m, n, r, opt.SVD, rng); err != nil {
				return nil, matrixErrors{}, nil, fmt.Errorf("path %d: %w", p, err)
			}
		}
		path := dualSVID(svd, r)
		start = append(start, path)
		q, err := path.toBLRPath()
		if err != nil {
			return nil, matrixErrors{}, nil, fmt.Errorf("path %d: %w", p, err)
		}
		bw.Paths = append(bw.Paths, q)
		// resid −= Ŵ_p, from the stored (float16) scales.
		one := &cmf.BLRWeight{M: m, N: n, Rank: r, Paths: []cmf.BLRPath{q}}
		left, right := one.PathFactors(0)
		if err := subtractPaths(resid, m, n, r, [][2][]float64{{left, right}}, prod); err != nil {
			return nil, matrixErrors{}, nil, fmt.Errorf("path %d: %w", p, err)
		}
	}
	rel, weighted, err := mt.errors(w, resid, m, n, prod)
	if err != nil {
		return nil, matrixErrors{}, nil, err
	}
	return bw, matrixErrors{rel: rel, weighted: weighted}, start, nil
}

// pathF64 is one Dual-SVID path before rounding: Ŵ = diag(h)·U·diag(l)·V·diag(g), with the
// sign matrices as ±1 row-major U m×r and V r×n.
type pathF64 struct {
	m, n, r int
	h, g, l []float64
	u, v    []float64 // ±1
}

// dualSVID is the Dual-SVID initialisation of one path from the first r components of svd
// (see Matrix), with the scales rebalanced to equal RMS.
func dualSVID(svd *TruncatedSVD, r int) pathF64 {
	m, n, k := svd.M, svd.N, svd.K
	p := pathF64{m: m, n: n, r: r, u: make([]float64, m*r), v: make([]float64, r*n)}
	absA := make([]float64, m*r) // |A| = |U′|·√Σ, m×r
	for i := 0; i < m; i++ {
		for c := 0; c < r; c++ {
			a := svd.U[i*k+c] * math.Sqrt(svd.S[c])
			p.u[i*r+c] = signPM(a)
			absA[i*r+c] = math.Abs(a)
		}
	}
	absB := make([]float64, r*n) // |B| = √Σ·|V′ᵀ|, r×n
	for j := 0; j < n; j++ {
		for c := 0; c < r; c++ {
			b := svd.V[j*k+c] * math.Sqrt(svd.S[c])
			p.v[c*n+j] = signPM(b)
			absB[c*n+j] = math.Abs(b)
		}
	}
	h, lu := rank1Nonneg(absA, m, r)
	lv, g := rank1Nonneg(absB, r, n)
	p.h, p.g, p.l = h, g, lu
	for c := range p.l {
		p.l[c] *= lv[c]
	}
	p.balance()
	return p
}

// roundF16 rounds x to the nearest float16 value (via float32), returned as float32.
func roundF16(x float64) float32 { return float16.Fromfloat32(float32(x)).Float32() }

// signPM is sign(x) with sign(0) = +1.
func signPM(x float64) float64 {
	if x < 0 {
		return -1
	}
	return 1
}

// rank1Nonneg returns the best rank-1 approximation a ≈ x·yᵀ of the non-negative row-major
// rows×cols matrix a, x = √σ·u and y = √σ·v with (σ, u, v) its top singular triple, made
// non-negative (Perron–Frobenius), by power iteration on aᵀa from the all-ones vector
// (which keeps every iterate non-negative), until the direction changes by less than 1e-12
// or after 500 steps. A zero matrix gives zero vectors.
func rank1Nonneg(a []float64, rows, cols int) (x, y []float64) {
	A := blas64.General{Rows: rows, Cols: cols, Stride: cols, Data: a}
	x = make([]float64, rows)
	y = make([]float64, cols)
	prev := make([]float64, cols)
	for j := range y {
		y[j] = 1 / math.Sqrt(float64(cols))
	}
	var sigma float64
	for it := 0; it < 500; it++ {
		copy(prev, y)
		blas64.Gemv(blas.NoTrans, 1, A, blas64.Vector{N: cols, Inc: 1, Data: y}, 0, blas64.Vector{N: rows, Inc: 1, Data: x})
		nx := floats.Norm(x, 2)
		if nx == 0 {
			clear(x)
			clear(y)
			return x, y
		}
		floats.Scale(1/nx, x)
		blas64.Gemv(blas.Trans, 1, A, blas64.Vector{N: rows, Inc: 1, Data: x}, 0, blas64.Vector{N: cols, Inc: 1, Data: y})
		sigma = floats.Norm(y, 2)
		floats.Scale(1/sigma, y)
		if floats.Distance(y, prev, 2) < 1e-12 {
			break
		}
	}
	s := math.Sqrt(sigma)
	floats.Scale(s, x)
	floats.Scale(s, y)
	for i := range x {
		x[i] = math.Abs(x[i]) // exact zeros may carry a sign
	}
	for j := range y {
		y[j] = math.Abs(y[j])
	}
	return x, y
}

// balance rescales h, g and l to the same RMS, their geometric mean, leaving the product
// h_i·l_k·g_j unchanged (it keeps all three well inside the float16 range).
func (p *pathF64) balance() {
	rms := func(v []float64) float64 { return floats.Norm(v, 2) / math.Sqrt(float64(len(v))) }
	rh, rg, rl := rms(p.h), rms(p.g), rms(p.l)
	if rh == 0 || rg == 0 || rl == 0 {
		return
	}
	t := math.Cbrt(rh * rg * rl)
	floats.Scale(t/rh, p.h)
	floats.Scale(t/rg, p.g)
	floats.Scale(t/rl, p.l)
}

// dense returns Ŵ of the unrounded path, row-major m×n.
func (p *pathF64) dense() []float64 {
	out := make([]float64, p.m*p.n)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: p.m, Cols: p.r, Stride: p.r, Data: p.left(false)},
		blas64.General{Rows: p.r, Cols: p.n, Stride: p.n, Data: p.right()}, 0,
		blas64.General{Rows: p.m, Cols: p.n, Stride: p.n, Data: out})
	return out
}

// toBLRPath rounds the scales to float16 and packs the signs. Errors: a scale beyond the
// float16 range.
func (p *pathF64) toBLRPath() (cmf.BLRPath, error) {
	conv := func(name string, v []float64) ([]float32, error) {
		out := make([]float32, len(v))
		for i, x := range v {
			if !(math.Abs(x) <= cmf.F16Max) {
				return nil, fmt.Errorf("scale %s[%d] = %g is outside the float16 range", name, i, x)
			}
			out[i] = roundF16(x)
		}
		return out, nil
	}
	var q cmf.BLRPath
	var err error
	if q.H, err = conv("h", p.h); err != nil {
		return q, err
	}
	if q.G, err = conv("g", p.g); err != nil {
		return q, err
	}
	if q.L, err = conv("ℓ", p.l); err != nil {
		return q, err
	}
	q.U = cmf.PackSigns(p.u, p.m, p.r)
	q.V = cmf.PackSigns(p.v, p.r, p.n)
	return q, nil
}

// Model turns a teacher into a BLR student (DESIGN.md §5): every tensor of the teacher
// that its architecture stores as BLR (arch.Tensor.BLR: every large projection of every
// decoder layer) becomes a BLR tensor of logical shape [m, n] made as by Matrix, except that
// the ranks are allocated over all those tensors together (per path count: each tensor's
// BLRRank, then steps of 8 to the tensors with the lowest bits per weight while the total
// stays within opt.BitsPerWeight·Σ m·n), so the overall bits per weight (see
// OverallBitsPerWeight) comes within a rank step of the target instead of up to ~8 % below
// it on small matrices; a single tensor may then exceed the target slightly. The budget can
// only be missed from below when ranks reach min(m, n) (very high targets). Every other
// tensor (embedding, head, norms, conv1d, A_log, dt_bias, in_proj_a/b) is shared, not
// copied, with the teacher, which must therefore stay open while the result is used. An
// 8-bit teacher (fp8 or q8 projections, cmf's Quant; DESIGN.md §4) compresses from the exact
// products code value × scale (Tensor.Float64), and the tensors it shares are its dense
// views (Tensor.Dequantized: in_proj_a/b become F32), so the student holds no 8-bit tensor. The
// result is a new in-memory Model with the teacher's config. Tensors are compressed in
// parallel (opt.Workers at a time, largest first); the output is the same for a given
// opt.Seed whatever the worker count. progress, if non-nil, is called after each
// compressed tensor with the number done, the total and the tensor's name, from one
// goroutine at a time. Reports come back sorted by name.
//
// Errors, naming the tensor: a nil teacher, an invalid config (arch.Config.Validate), a bad
// option, a BLR tensor that is not a 2-D float or quantized matrix (including one already BLR), with
// opt.Calibration a BLR tensor without statistics of its input features (all checked before
// any tensor is compressed), or any Matrix error.
func Model(m *cmf.Model, opt Options, progress func(done, total int, name string)) (*cmf.Model, []TensorReport, error) {
	if m == nil {
		return nil, nil, fmt.Errorf("compress: nil teacher")
	}
	if err := m.Config.Validate(); err != nil {
		return nil, nil, fmt.Errorf("compress: %w", err)
	}
	opt, err := opt.normalized()
	if err != nil {
		return nil, nil, err
	}
	out := cmf.NewModel(m.Config)
	type job struct {
		t    *cmf.Tensor
		kind string
	}
	var jobs []job
	blr := blrTensors(m.Config)
	for _, name := range m.Names() {
		t := m.Tensors[name]
		kind, ok := blr[name]
		if !ok {
			out.Tensors[name] = t.Dequantized() // a student's dense tensors are never 8-bit
			continue
		}
		if t.DType == cmf.BLR {
			return nil, nil, fmt.Errorf("compress: tensor %s is already BLR: compress a full-precision teacher", name)
		}
		if t.Quant == nil && !t.DType.Float() || len(t.Shape) != 2 {
			return nil, nil, fmt.Errorf("compress: tensor %s (%s, shape %v) is not a 2-D float weight", name, t.DType, t.Shape)
		}
		if opt.Calibration != nil { // before any work, in name order
			if _, err := opt.Calibration.inputWeights(name, t.Shape[1]); err != nil {
				return nil, nil, fmt.Errorf("compress %s: %w", name, err)
			}
		}
		jobs = append(jobs, job{t, kind})
	}
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].t.NumElements() > jobs[j].t.NumElements() })
	shapes := make([][2]int, len(jobs))
	for i, j := range jobs {
		m, n := j.t.Shape[0], j.t.Shape[1]
		if n%8 != 0 || min(m, n) < 8 {
			return nil, nil, fmt.Errorf("compress: tensor %s: shape %v cannot be BLR (n must be a multiple of 8 and min(m, n) ≥ 8)", j.t.Name, j.t.Shape)
		}
		shapes[i] = [2]int{m, n}
	}
	ranks1, _ := allocateRanks(shapes, 1, opt.BitsPerWeight)
	ranks2, ok2 := allocateRanks(shapes, 2, opt.BitsPerWeight)

	reports := make([]TensorReport, len(jobs))
	results := make([]*cmf.Tensor, len(jobs))
	var (
		mu       sync.Mutex
		done     int
		firstErr error
		next     int
		wg       sync.WaitGroup
	)
	for range min(opt.Workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if firstErr != nil || next == len(jobs) {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				rep, t, err := compressTensor(jobs[i].t, jobs[i].kind, ranks1[i], ranks2[i], ok2[i], opt)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else {
					reports[i], results[i] = rep, t
					done++
					if progress != nil {
						progress(done, len(jobs), t.Name)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	for _, t := range results {
		if err := out.Set(t); err != nil {
			return nil, nil, err
		}
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].Name < reports[j].Name })
	return out, reports, nil
}

func compressTensor(t *cmf.Tensor, kind string, r1, r2 int, ok2 bool, opt Options) (TensorReport, *cmf.Tensor, error) {
	w, err := t.Float64()
	if err != nil {
		return TensorReport{}, nil, err
	}
	m, n := t.Shape[0], t.Shape[1]
	if len(w) != m*n {
		return TensorReport{}, nil, fmt.Errorf("compress: tensor %s: %d values for shape %v", t.Name, len(w), t.Shape)
	}
	bw, errs, err := compressMatrixRanks(t.Name, w, m, n, r1, r2, ok2, opt)
	if err != nil {
		return TensorReport{}, nil, err
	}
	payload, err := cmf.EncodeBLR(bw)
	if err != nil {
		return TensorReport{}, nil, fmt.Errorf("compress %s: %w", t.Name, err)
	}
	bt, err := cmf.NewTensor(t.Name, cmf.BLR, []int{m, n}, payload)
	if err != nil {
		return TensorReport{}, nil, err
	}
	return TensorReport{
		Name: t.Name, Kind: kind, Shape: []int{m, n}, Rank: bw.Rank, Paths: len(bw.Paths),
		BitsPerWeight: 8 * float64(len(payload)) / (float64(m) * float64(n)), RelErr: errs.rel,
		WeightedRelErr: errs.weighted, InitRelErr: errs.initRel, InitWeightedRelErr: errs.initWeighted,
	}, bt, nil
}
