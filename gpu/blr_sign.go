package gpu

import (
	"fmt"
	"math"
)

const signWG = 64

// signGradNaive forces BLRSignGrad's simple kernel instead of the blocked one (both in
// blr_sign_grad.wgsl; tests: SetSignGradNaive); signGradSplit, when > 0, forces the blocked
// kernel's number of row ranges (tests: SetSignGradSplit).
var (
	signGradNaive bool
	signGradSplit int
)

// SignMatrix is one sign factor of a BLR path for the sign-learning kernels (DESIGN.md
// "Sign learning"): Bits U32 [ceil(Rows·Cols/32)] (U or V of a BLRLayerPath), Scores U32
// [ceil(Rows·Cols/4)] holding one int8 score per sign (element e is byte e & 3 of word
// e >> 2), and the layer's rank-padding mask Live (nil: none). RankCols is true for U
// ([m, r]: the rank is the column index) and false for V ([r, n]: the row index).
type SignMatrix struct {
	Bits, Scores *Buffer
	Live         *Buffer
	Rows, Cols   int
	RankCols     bool
}

// SignMatrices returns the U and V sign matrices of path p of l with the given score
// buffers (NewSignScores). Errors: p out of range.
func (l *BLRLayer) SignMatrices(p int, su, sv *Buffer) (u, v SignMatrix, err error) {
	if p < 0 || p >= len(l.Paths) {
		return u, v, fmt.Errorf("gpu: SignMatrices: path %d of %d", p, len(l.Paths))
	}
	q := l.Paths[p]
	return SignMatrix{Bits: q.U, Scores: su, Live: l.Live, Rows: l.M, Cols: l.Rank, RankCols: true},
		SignMatrix{Bits: q.V, Scores: sv, Live: l.Live, Rows: l.Rank, Cols: l.N}, nil
}

// NewSignScores allocates the zeroed int8 scores of a rows×cols sign matrix: U32
// [ceil(rows·cols/4)]. Errors: non-positive sizes, those of NewBuffer.
func NewSignScores(d *Device, label string, rows, cols int) (*Buffer, error) {
	if rows < 1 || cols < 1 || rows*cols > maxU32Elems {
		return nil, fmt.Errorf("gpu: NewSignScores: %s: %d×%d signs", label, rows, cols)
	}
	return d.NewBuffer(label, U32, (rows*cols+3)/4)
}

func (s SignMatrix) check(op string) error {
	if s.Rows < 1 || s.Cols < 1 || s.Rows*s.Cols > maxU32Elems {
		return fmt.Errorf("gpu: %s: %d×%d signs", op, s.Rows, s.Cols)
	}
	count := s.Rows * s.Cols
	if err := need(op, "Bits", s.Bits, (count+31)/32, U32); err != nil {
		return err
	}
	if err := need(op, "Scores", s.Scores, (count+3)/4, U32); err != nil {
		return err
	}
	if s.Live != nil {
		rk := s.Rows
		if s.RankCols {
			rk = s.Cols
		}
		if err := need(op, "Live", s.Live, rk, U32); err != nil {
			return err
		}
	}
	return distinct(op, map[string]*Buffer{"Bits": s.Bits, "Scores": s.Scores})
}

type signParams struct {
	Stage          string
	Mask, MaskCols bool
	WG             int
}

// signGradParams are blr_sign_grad.wgsl's template parameters.
type signGradParams struct {
	Form                  string // "simple", "blocked" or "reduce"
	Mask, MaskCols, Split bool
	WG, TM, TN4           int
}

// signGradPartMax bounds the blocked kernel's partial sums (ranges × NA × NB f32, a recorder
// temporary) when it splits the rows.
const signGradPartMax = 64 << 20

// signGradPlan chooses the blocked kernel's block (BM = 16·tm rows of out, BN = 64·tn4
// columns) and how many row ranges of rs rows (a multiple of 16) it splits the reduction
// into: enough workgroups to fill a GPU (about 2 per SM of a large one, 264) when out alone
// has too few blocks, each range at least 64 rows, the partial sums at most signGradPartMax
// bytes; one range on CPU adapters (no gain there).
func (d *Device) signGradPlan(rows, na, nb int) (tm, tn4, splits, rs int) {
	tm, tn4 = 4, 1
	if na >= 128 {
		tm = 8
	}
	if nb >= 128 {
		tn4 = 2
	}
	blocks := ((na + 16*tm - 1) / (16 * tm)) * ((nb + 64*tn4 - 1) / (64 * tn4))
	chunks := (rows + 15) / 16
	splits = 1
	if !d.info.CPU {
		splits = max(1, min((264+blocks-1)/blocks, (chunks+3)/4, signGradPartMax/(4*na*nb)))
	}
	if signGradSplit > 0 {
		splits = min(signGradSplit, chunks)
	}
	rs = 16 * ((chunks + splits - 1) / splits)
	return tm, tn4, (rows + rs - 1) / rs, rs
}

// signGradCost is the blocked kernel's arithmetic (2·rows·na·nb) and least global traffic
// (a and b read once, out or the splits' partial sums written once), for the profiler.
func signGradCost(rows, na, nb, splits int) (flops, bytes float64) {
	return 2 * float64(rows) * float64(na) * float64(nb), 4 * (float64(rows)*float64(na+nb) + float64(splits)*float64(na)*float64(nb))
}

// signGrad records out = sa ⊙ (aᵀ·b) ⊙ sb of blr_sign_grad.wgsl (masked by live when not nil):
// the blocked kernel, split over row ranges plus a reduce pass when that fills the GPU
// better, or the simple twin (signGradNaive).
func signGrad(r *Recorder, op string, a, b, sa, sb, out, live *Buffer, rows, na, nb int, maskCols bool) error {
	mask := live != nil
	final := []Binding{Whole(sa), Whole(sb), Whole(out)}
	finalAccess := []Access{Read, Read, ReadWrite}
	if mask {
		final = append(final, Whole(live))
		finalAccess = append(finalAccess, Read)
	}
	in := []Binding{Whole(a), Whole(b)}
	uni := []uint32{uint32(rows), uint32(na), uint32(nb), 0}
	if !signGradNaive {
		// Tensor cores first (coopmat.go), as gemm and blrGEMM.
		if ok, err := coopSignGrad(r, op, a, b, sa, sb, out, live, rows, na, nb, maskCols); ok || err != nil {
			return err
		}
	}
	if signGradNaive {
		pr := signGradParams{Form: "simple", Mask: mask, MaskCols: maskCols, WG: signWG}
		return r.dispatch1D(KernelSpec{Name: op, File: "blr_sign_grad.wgsl", Params: pr,
			Bindings: append([]Access{Read, Read}, finalAccess...), Uniforms: 4},
			(na*nb+signWG-1)/signWG, uni, append(in, final...)...)
	}
	tm, tn4, splits, rs := r.d.signGradPlan(rows, na, nb)
	gx, gy := (nb+64*tn4-1)/(64*tn4), (na+16*tm-1)/(16*tm)
	if gx > 65535 || gy > 65535 {
		return fmt.Errorf("gpu: %s: a %d×%d sign gradient needs a %d×%d grid (max 65535 per dimension)", op, na, nb, gx, gy)
	}
	uni[3] = uint32(rs)
	pr := signGradParams{Form: "blocked", Mask: mask, MaskCols: maskCols, TM: tm, TN4: tn4, Split: splits > 1}
	if splits == 1 {
		k, err := r.d.Kernel(KernelSpec{Name: op + ".blocked", File: "blr_sign_grad.wgsl", Params: pr,
			Bindings: append([]Access{Read, Read}, finalAccess...), Uniforms: 4})
		if err != nil {
			return err
		}
		if err := r.Dispatch(k, [3]int{gx, gy, 1}, uni, append(in, final...)...); err != nil {
			return err
		}
		r.Cost(signGradCost(rows, na, nb, 1))
		return nil
	}
	mark := len(r.ops)
	part, err := r.Temp(op+" partial sums", F32, splits, na*nb)
	if err != nil {
		return err
	}
	k, err := r.d.Kernel(KernelSpec{Name: op + ".blocked", File: "blr_sign_grad.wgsl", Params: pr,
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 4})
	if err != nil {
		return err
	}
	if err := r.Dispatch(k, [3]int{gx, gy, splits}, uni, append(in, Whole(part))...); err != nil {
		return err
	}
	r.Cost(signGradCost(rows, na, nb, splits))
	red := signGradParams{Form: "reduce", Mask: mask, MaskCols: maskCols, WG: signWG}
	if err := r.dispatch1D(KernelSpec{Name: op + ".reduce", File: "blr_sign_grad.wgsl", Params: red,
		Bindings: append([]Access{Read}, finalAccess...), Uniforms: 4},
		(na*nb+signWG-1)/signWG, []uint32{uint32(splits), uint32(na), uint32(nb), 0}, append([]Binding{Whole(part)}, final...)...); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}

// BLRSignGrad records the straight-through gradients of the loss with respect to the
// signs of every path of l (U and V treated as real), given the forward input x F32
// [rows, l.N] and dy F32 [rows, l.M]:
//
//	t1 = (x⊙g)·Vᵀ;  G_U = (dy⊙h)ᵀ·(t1⊙ℓ) [m, r];  dt2 = (dy⊙h)·U;  G_V = (dt2⊙ℓ)ᵀ·(x⊙g) [r, n].
//
// gu[p] F32 [m·r] and gv[p] F32 [r·n] (row-major, the bit order of U and V) are
// overwritten; padded ranks (l.Live) get exactly 0. t1 as in BLRBackward and dt2 as
// BLRBackward left it in BLRGrad.DT2 (one F32 [rows, r] per path; each nil: recomputed, the
// same values bit for bit). Up to two sign-bit GEMMs (none with t1 and dt2 given) and two
// row-reducing GEMMs per path (blocked, split over row ranges when that fills the GPU
// better), f32, deterministic. Host reference: host.BLRSignGrad. Errors: those of
// BLRBackward's checks, gu, gv or dt2 of the wrong count or size.
func BLRSignGrad(r *Recorder, l *BLRLayer, x *Buffer, t1, dt2 []*Buffer, dy *Buffer, gu, gv []*Buffer, rows int) error {
	const op = "BLRSignGrad"
	if err := checkBLRRows(op, l, rows, x, "dy", dy); err != nil {
		return err
	}
	m, n, rk := l.M, l.N, l.Rank
	if m*rk > maxU32Elems || rk*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: layer m·rank or rank·n exceeds the 2³¹ index range", op)
	}
	if err := checkT1(op, l, t1, rows); err != nil {
		return err
	}
	if len(gu) != len(l.Paths) || len(gv) != len(l.Paths) {
		return fmt.Errorf("gpu: %s: %d gu and %d gv for %d paths", op, len(gu), len(gv), len(l.Paths))
	}
	all := map[string]*Buffer{"x": x, "dy": dy}
	for p := range l.Paths {
		if err := need(op, fmt.Sprintf("gu[%d]", p), gu[p], m*rk, F32); err != nil {
			return err
		}
		if err := need(op, fmt.Sprintf("gv[%d]", p), gv[p], rk*n, F32); err != nil {
			return err
		}
		all[fmt.Sprintf("gu[%d]", p)] = gu[p]
		all[fmt.Sprintf("gv[%d]", p)] = gv[p]
	}
	for p := range t1 {
		all[fmt.Sprintf("t1[%d]", p)] = t1[p]
	}
	if dt2 != nil {
		if len(dt2) != len(l.Paths) {
			return fmt.Errorf("gpu: %s: %d dt2 for %d paths", op, len(dt2), len(l.Paths))
		}
		for p := range dt2 {
			if err := need(op, fmt.Sprintf("dt2[%d]", p), dt2[p], rows*rk, F32); err != nil {
				return err
			}
			all[fmt.Sprintf("dt2[%d]", p)] = dt2[p]
		}
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	fail := r.rollback()
	var dt2s *Buffer
	if dt2 == nil {
		var err error
		if dt2s, err = r.Temp(op+" dt2", F32, rows, rk); err != nil {
			return err
		}
	}
	var t1s *Buffer
	if t1 == nil {
		var err error
		if t1s, err = r.Temp(op+" t1", F32, rows, rk); err != nil {
			return err
		}
	}
	grad := func(a, b, sa, sb, out *Buffer, na, nb int, maskCols bool) error {
		return signGrad(r, op, a, b, sa, sb, out, l.Live, rows, na, nb, maskCols)
	}
	for p, q := range l.Paths {
		tb := t1s
		if t1 != nil {
			tb = t1[p]
		} else if err := blrGEMM(r, op+".t1", false, x, q.V, q.G, nil, tb, nil, rows, n, rk, true, false); err != nil {
			return fail(err)
		}
		if err := grad(dy, tb, q.H, q.L, gu[p], m, rk, true); err != nil {
			return fail(err)
		}
		db := dt2s
		if dt2 != nil {
			db = dt2[p]
		} else if err := blrGEMM(r, op+".dt2", false, dy, q.U, q.H, nil, db, nil, rows, m, rk, false, false); err != nil {
			return fail(err)
		}
		if err := grad(db, x, q.L, q.G, gv[p], rk, n, false); err != nil {
			return fail(err)
		}
	}
	return nil
}

// SignScoreConfig holds SignScoreUpdate's knobs: the new score is
// clamp(round_stochastic(Beta·s + Alpha·(G·b)/σ), ±127) with σ the RMS of G over the
// matrix that step; Seed, Step and Matrix (an index unique per sign matrix) select the
// rounding offsets, so a resumed run draws the same ones.
type SignScoreConfig struct {
	Alpha, Beta        float32
	Seed, Step, Matrix uint32
}

// SignScoreUpdate records the score update of s from its sign gradient g F32
// [s.Rows·s.Cols] (BLRSignGrad): per sign e with sign b = ±1, σ = sqrt(Σ g²/count) and
//
//	score_e ← clamp(floor(β·score_e + α·g_e·b/σ + u_e), −127, 127),
//
// u_e = host.SignUniform(Seed, Step, Matrix, e) ∈ [0, 1); padded signs (s.Live) keep score 0.
// A non-finite σ or term adds no pressure (only the decay applies). A positive score is
// pressure to flip (descent wants the other sign). Host reference:
// host.SignScoreUpdate. Errors: s invalid, g of the wrong size, Alpha or Beta not finite or
// Beta outside [0, 1].
func SignScoreUpdate(r *Recorder, s SignMatrix, g *Buffer, c SignScoreConfig) error {
	const op = "SignScoreUpdate"
	if err := s.check(op); err != nil {
		return err
	}
	count := s.Rows * s.Cols
	if err := need(op, "g", g, count, F32); err != nil {
		return err
	}
	if math.IsNaN(float64(c.Alpha)) || math.IsInf(float64(c.Alpha), 0) || !(c.Beta >= 0 && c.Beta <= 1) {
		return fmt.Errorf("gpu: %s: alpha = %g, beta = %g: want a finite alpha and beta in [0, 1]", op, c.Alpha, c.Beta)
	}
	if err := distinct(op, map[string]*Buffer{"g": g, "Bits": s.Bits, "Scores": s.Scores}); err != nil {
		return err
	}
	ss, err := r.Temp(op+" ss", F32, 1)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	if err := GradSumSquares(r, g, ss); err != nil {
		return err
	}
	pr := signParams{Mask: s.Live != nil, MaskCols: s.RankCols, WG: signWG}
	binds := []Binding{Whole(g), Whole(s.Bits), Whole(ss), Whole(s.Scores)}
	access := []Access{Read, Read, Read, ReadWrite}
	if s.Live != nil {
		binds = append(binds, Whole(s.Live))
		access = append(access, Read)
	}
	words := (count + 3) / 4
	uni := []uint32{uint32(count), uint32(s.Cols), c.Seed, c.Step, c.Matrix, math.Float32bits(c.Alpha), math.Float32bits(c.Beta)}
	if err := r.dispatch1D(KernelSpec{Name: op, File: "sign_score_update.wgsl", Params: pr, Bindings: access, Uniforms: 7},
		(words+signWG-1)/signWG, uni, binds...); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}

// SignFlipConfig holds SignFlip's knobs: Tau (1..127) the least score that may flip and
// Budget the most signs of the matrix that flip in one call.
type SignFlipConfig struct {
	Tau, Budget int
}

// SignFlipBudget is the flip budget of a matrix of count signs at frac (the most flips per
// step as a fraction of its signs): ceil(frac·count), 0 when frac ≤ 0.
func SignFlipBudget(count int, frac float64) int {
	if !(frac > 0) {
		return 0
	}
	return int(math.Min(math.Ceil(frac*float64(count)), float64(count)))
}

// SignFlipBucket is the number of signs per index bucket of SignFlip's tie-break for a matrix
// of count signs: ceil(count/4096).
func SignFlipBucket(count int) int { return (count + 4095) / 4096 }

// SignFlip records the flip of s: the signs with the highest scores ≥ Tau flip, taken by
// whole score values from 127 down while the total stays ≤ Budget; of the first score value
// that does not fit whole, whole index buckets (SignFlipBucket signs each, in index order)
// are taken while they fit (deterministic: histograms, no ordering); each flipped sign's bit is XORed in
// s.Bits (an exact bit update) and its score reset to 0. Padded signs never flip.
// counts[index] (U32) is set to the number of flips. Host reference: host.SignFlip.
// Errors: s invalid, Tau outside 1..127, Budget < 0, index outside counts.
func SignFlip(r *Recorder, s SignMatrix, counts *Buffer, index int, c SignFlipConfig) error {
	const op = "SignFlip"
	if err := s.check(op); err != nil {
		return err
	}
	if c.Tau < 1 || c.Tau > 127 || c.Budget < 0 || c.Budget > maxU32Elems {
		return fmt.Errorf("gpu: %s: tau = %d, budget = %d: want tau in 1..127 and budget ≥ 0", op, c.Tau, c.Budget)
	}
	if err := need(op, "counts", counts, -1, U32); err != nil {
		return err
	}
	if index < 0 || index >= counts.numel {
		return fmt.Errorf("gpu: %s: index %d outside counts of %d", op, index, counts.numel)
	}
	if err := distinct(op, map[string]*Buffer{"counts": counts, "Bits": s.Bits, "Scores": s.Scores}); err != nil {
		return err
	}
	count := s.Rows * s.Cols
	bsize := SignFlipBucket(count)
	hist, err := r.Temp(op+" hist", U32, 128)
	if err != nil {
		return err
	}
	bhist, err := r.Temp(op+" buckets", U32, (count+bsize-1)/bsize)
	if err != nil {
		return err
	}
	res, err := r.Temp(op+" cut", U32, 5)
	if err != nil {
		return err
	}
	uni := []uint32{uint32(count), uint32(s.Cols), uint32(c.Tau), uint32(c.Budget), uint32(index), uint32(bsize)}
	spec := func(stage string, access ...Access) KernelSpec {
		return KernelSpec{Name: op + "." + stage, File: "sign_flip.wgsl", Bindings: access, Uniforms: 6,
			Params: signParams{Stage: stage, Mask: s.Live != nil, MaskCols: s.RankCols, WG: signWG}}
	}
	fail := r.rollback()
	withMask := func(b []Binding, a []Access) ([]Binding, []Access) {
		if s.Live != nil {
			return append(b, Whole(s.Live)), append(a, Read)
		}
		return b, a
	}
	one := func(stage string, h *Buffer) error {
		k, err := r.d.Kernel(spec(stage, Read, ReadWrite, ReadWrite))
		if err != nil {
			return err
		}
		return r.Dispatch(k, [3]int{1, 1, 1}, uni, Whole(h), Whole(res), Whole(counts))
	}
	scoreWGs := ((count+3)/4 + signWG - 1) / signWG
	hb, ha := withMask([]Binding{Whole(s.Scores), Whole(hist)}, []Access{Read, ReadWrite})
	if err := r.dispatch1D(spec("hist", ha...), scoreWGs, uni, hb...); err != nil {
		return fail(err)
	}
	if err := one("cut", hist); err != nil {
		return fail(err)
	}
	bb, ba := withMask([]Binding{Whole(s.Scores), Whole(bhist), Whole(res)}, []Access{Read, ReadWrite, Read})
	if err := r.dispatch1D(spec("bhist", ba...), scoreWGs, uni, bb...); err != nil {
		return fail(err)
	}
	if err := one("bcut", bhist); err != nil {
		return fail(err)
	}
	ab, aa := withMask([]Binding{Whole(res), Whole(s.Bits), Whole(s.Scores)}, []Access{Read, ReadWrite, ReadWrite})
	if err := r.dispatch1D(spec("apply", aa...), ((count+31)/32+signWG-1)/signWG, uni, ab...); err != nil {
		return fail(err)
	}
	return nil
}
