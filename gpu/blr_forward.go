package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// BLRLayerPath holds one path of a BLR layer on the GPU (DESIGN.md §4): the trainable
// scales H F32 [m], G F32 [n] and L (ℓ) F32 [r], and the frozen sign factors U [m][r] and
// V [r][n] as packed bits in U32 buffers of ceil(m·r/32) and ceil(r·n/32) words: the
// payload's bit rows laid end to end, so element e of the row-major matrix is bit e & 31 of
// word e >> 5 (bit b of payload byte k of a row is element 8k+b; 1 ↦ +1, 0 ↦ −1).
type BLRLayerPath struct {
	H, G, L *Buffer
	U, V    *Buffer
}

// BLRLayer is a binary low-rank linear layer on the GPU, y = Σ_p h_p ⊙ U_p(ℓ_p ⊙ V_p(g_p ⊙ x))
// for M output and N input features at rank Rank (a multiple of 8, as N), with 1 or 2
// paths. Live, when not nil, is a U32 [Rank] rank-padding mask shared by the paths: 1 marks
// a live rank, 0 a padded one whose ℓ is zero and gets exactly zero gradient
// (BLRBackward) and no Adam update, so it stays zero.
type BLRLayer struct {
	M, N, Rank int
	Paths      []BLRLayerPath
	Live       *Buffer
}

// BLRHostPath is one path of a BLR weight in host memory. Its fields are those of
// cmf.BLRPath in the same order, so a cmf path converts directly:
// gpu.BLRHostPath(w.Paths[p]). H [m], G [n], L [r] hold float16 values widened to float32;
// U [m·r/8] and V [r·n/8] are the payload's packed sign bits.
type BLRHostPath struct {
	H []float32 // [m] output scales
	G []float32 // [n] input scales
	L []float32 // [r] rank scales
	U []byte    // [m][r/8] sign bits
	V []byte    // [r][n/8] sign bits
}

// Release frees every buffer of the layer (scales, bits and mask).
func (l *BLRLayer) Release() {
	for _, p := range l.Paths {
		for _, b := range []*Buffer{p.H, p.G, p.L, p.U, p.V} {
			if b != nil {
				b.Release()
			}
		}
	}
	if l.Live != nil {
		l.Live.Release()
	}
}

// ReadScales reads the trainable scales of every path back to the host (for export and
// snapshots): one BLRHostPath per path with H, G and L filled (U and V nil; the sign bits are
// frozen and stay as uploaded). It waits for the GPU. Errors: a released buffer or a failed
// readback.
func (l *BLRLayer) ReadScales() ([]BLRHostPath, error) {
	out := make([]BLRHostPath, len(l.Paths))
	for p, q := range l.Paths {
		for _, f := range []struct {
			b   *Buffer
			dst *[]float32
		}{{q.H, &out[p].H}, {q.G, &out[p].G}, {q.L, &out[p].L}} {
			if err := f.b.usable(); err != nil {
				return nil, fmt.Errorf("gpu: BLRLayer.ReadScales: path %d: %w", p, err)
			}
			v, err := f.b.dev.ReadFloat32(f.b)
			if err != nil {
				return nil, err
			}
			*f.dst = v
		}
	}
	return out, nil
}

// packedWords returns the bytes as little-endian u32 words, zero-padded to a multiple of 4.
func packedWords(b []byte) []uint32 {
	w := make([]uint32, (len(b)+3)/4)
	var pad [4]byte
	for i := range w {
		if 4*i+4 <= len(b) {
			w[i] = binary.LittleEndian.Uint32(b[4*i:])
		} else {
			copy(pad[:], b[4*i:])
			w[i] = binary.LittleEndian.Uint32(pad[:])
		}
	}
	return w
}

// UploadBLR uploads a BLR weight of m output features, n input features and rank rank
// (the fields of a decoded cmf.BLRWeight; convert its paths with BLRHostPath(p)) into a
// BLRLayer whose buffers are labelled label.h0, label.U0, …. liveRank ≤ rank is the number
// of live ranks: when it is less than rank, ranks liveRank.. are padding and get a Live
// mask; their ℓ must be zero. Errors: sizes (n and rank positive multiples of 8, m ≥ 1,
// 1 or 2 paths), slice lengths that disagree, a non-finite scale, a non-zero padded ℓ,
// or an allocation failure (the buffers made so far are released).
func UploadBLR(d *Device, label string, m, n, rank int, paths []BLRHostPath, liveRank int) (*BLRLayer, error) {
	const op = "UploadBLR"
	if m < 1 || n < 8 || n%8 != 0 || rank < 8 || rank%8 != 0 {
		return nil, fmt.Errorf("gpu: %s: %s: m = %d, n = %d, rank = %d: want m ≥ 1 and n, rank positive multiples of 8", op, label, m, n, rank)
	}
	if uint64(m)*uint64(rank) >= 1<<32 || uint64(rank)*uint64(n) >= 1<<32 || m*n > maxU32Elems {
		return nil, fmt.Errorf("gpu: %s: %s: m·r or r·n bits exceed the 2³² bit index range", op, label)
	}
	if len(paths) < 1 || len(paths) > 2 {
		return nil, fmt.Errorf("gpu: %s: %s: %d paths, want 1 or 2", op, label, len(paths))
	}
	if liveRank < 1 || liveRank > rank {
		return nil, fmt.Errorf("gpu: %s: %s: liveRank = %d must be in 1..rank = %d", op, label, liveRank, rank)
	}
	for p, q := range paths {
		for _, f := range []struct {
			name string
			v    []float32
			want int
		}{{"h", q.H, m}, {"g", q.G, n}, {"ℓ", q.L, rank}} {
			if len(f.v) != f.want {
				return nil, fmt.Errorf("gpu: %s: %s path %d: %s has %d values, want %d", op, label, p, f.name, len(f.v), f.want)
			}
			for i, x := range f.v {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					return nil, fmt.Errorf("gpu: %s: %s path %d: %s[%d] = %g is not finite", op, label, p, f.name, i, x)
				}
			}
		}
		for i := liveRank; i < rank; i++ {
			if q.L[i] != 0 {
				return nil, fmt.Errorf("gpu: %s: %s path %d: padded ℓ[%d] = %g, want 0", op, label, p, i, q.L[i])
			}
		}
		if len(q.U) != m*rank/8 {
			return nil, fmt.Errorf("gpu: %s: %s path %d: U has %d bytes, want m·r/8 = %d", op, label, p, len(q.U), m*rank/8)
		}
		if len(q.V) != rank*n/8 {
			return nil, fmt.Errorf("gpu: %s: %s path %d: V has %d bytes, want r·n/8 = %d", op, label, p, len(q.V), rank*n/8)
		}
	}
	l := &BLRLayer{M: m, N: n, Rank: rank}
	fail := func(err error) (*BLRLayer, error) {
		l.Release()
		return nil, err
	}
	for p, q := range paths {
		var lp BLRLayerPath
		var err error
		if lp.H, err = d.UploadFloat32(fmt.Sprintf("%s.h%d", label, p), q.H, m); err != nil {
			return fail(err)
		}
		l.Paths = append(l.Paths, lp)
		cur := &l.Paths[len(l.Paths)-1]
		if cur.G, err = d.UploadFloat32(fmt.Sprintf("%s.g%d", label, p), q.G, n); err != nil {
			return fail(err)
		}
		if cur.L, err = d.UploadFloat32(fmt.Sprintf("%s.l%d", label, p), q.L, rank); err != nil {
			return fail(err)
		}
		uw := packedWords(q.U)
		if cur.U, err = d.UploadUint32(fmt.Sprintf("%s.U%d", label, p), uw, len(uw)); err != nil {
			return fail(err)
		}
		vw := packedWords(q.V)
		if cur.V, err = d.UploadUint32(fmt.Sprintf("%s.V%d", label, p), vw, len(vw)); err != nil {
			return fail(err)
		}
	}
	if liveRank < rank {
		mask := make([]uint32, rank)
		for i := range liveRank {
			mask[i] = 1
		}
		var err error
		if l.Live, err = d.UploadUint32(label+".live", mask, rank); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// checkBLRRows checks what every BLR launcher (op) takes first: the layer (checkBLRLayer),
// rows ≥ 1 with [rows, n], [rows, m] and [rows, rank] within the 2³¹ index range, x F32
// [rows, n] and the [rows, m] operand ym (named yName: y or dy) F32.
func checkBLRRows(op string, l *BLRLayer, rows int, x *Buffer, yName string, ym *Buffer) error {
	if err := checkBLRLayer(op, l); err != nil {
		return err
	}
	if err := positive(op, "rows", rows); err != nil {
		return err
	}
	if rows*l.N > maxU32Elems || rows*l.M > maxU32Elems || rows*l.Rank > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows = %d exceeds the 2³¹ index range", op, rows)
	}
	if err := need(op, "x", x, rows*l.N, F32); err != nil {
		return err
	}
	return need(op, yName, ym, rows*l.M, F32)
}

// checkBLRLayer validates a layer's sizes and buffers for op.
func checkBLRLayer(op string, l *BLRLayer) error {
	if l == nil {
		return fmt.Errorf("gpu: %s: nil BLR layer", op)
	}
	m, n, r := l.M, l.N, l.Rank
	if m < 1 || n < 8 || n%8 != 0 || r < 8 || r%8 != 0 {
		return fmt.Errorf("gpu: %s: layer m = %d, n = %d, rank = %d: want m ≥ 1 and n, rank positive multiples of 8", op, m, n, r)
	}
	if uint64(m)*uint64(r) >= 1<<32 || uint64(r)*uint64(n) >= 1<<32 || m*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: layer m·r or r·n exceeds the 2³² bit index range", op)
	}
	if len(l.Paths) < 1 || len(l.Paths) > 2 {
		return fmt.Errorf("gpu: %s: layer has %d paths, want 1 or 2", op, len(l.Paths))
	}
	for p, q := range l.Paths {
		for _, c := range []struct {
			name string
			b    *Buffer
			n    int
			t    DType
		}{{"h", q.H, m, F32}, {"g", q.G, n, F32}, {"ℓ", q.L, r, F32},
			{"U", q.U, (m*r + 31) / 32, U32}, {"V", q.V, (r*n + 31) / 32, U32}} {
			if err := need(op, fmt.Sprintf("path %d %s", p, c.name), c.b, c.n, c.t); err != nil {
				return err
			}
		}
	}
	if l.Live != nil {
		if err := need(op, "Live", l.Live, r, U32); err != nil {
			return err
		}
	}
	return nil
}

const blrNaiveWG = 64

type blrGemmParams struct {
	TransB, ScaleC, Accum, Raw, Fast bool
	BM, BN, BK, N, K                 int
}

type blrGemmNaiveParams struct {
	TransB, ScaleC, Accum, Raw bool
	WG                         int
}

// blrGEMM records C[m, n] (+)= (A ⊙ sa)·B (⊙ sc) with B a packed sign matrix ([n, k] when
// transB, else [k, n]); sc may be nil. raw, when not nil (sc too), receives the sums before
// ⊙ sc, F32 [m, n]. Buffers are checked by the caller.
func blrGEMM(r *Recorder, op string, naive bool, a, bits, sa, sc, c, raw *Buffer, m, k, n int, transB, accum bool) error {
	return blrGEMMPre(r, op, naive, nil, a, bits, sa, sc, c, raw, m, k, n, transB, accum)
}

// blrGEMMPre is blrGEMM with A ⊙ sa perhaps packed already for tensor cores (pre, from
// coopPackPaths; nil: none).
func blrGEMMPre(r *Recorder, op string, naive bool, pre *coopA, a, bits, sa, sc, c, raw *Buffer, m, k, n int, transB, accum bool) error {
	if raw != nil && sc == nil {
		return fmt.Errorf("gpu: %s: a raw output needs the column scales", op)
	}
	binds := []Binding{Whole(a), Whole(bits), Whole(sa)}
	access := []Access{Read, Read, Read}
	if sc != nil {
		binds = append(binds, Whole(sc))
		access = append(access, Read)
	}
	binds = append(binds, Whole(c))
	access = append(access, ReadWrite)
	if raw != nil {
		binds = append(binds, Whole(raw))
		access = append(access, ReadWrite)
	}
	uni := []uint32{uint32(m), uint32(n), uint32(k)}
	// The seam of the implementation choice, as in gemm: tensor cores first.
	if !naive {
		if ok, err := coopBLRGEMM(r, op, pre, a, bits, sa, sc, c, raw, m, k, n, transB, accum); ok || err != nil {
			return err
		}
	}
	if naive {
		kn, err := r.d.Kernel(KernelSpec{Name: op, File: "blr_forward_naive.wgsl",
			Params:   blrGemmNaiveParams{TransB: transB, ScaleC: sc != nil, Accum: accum, Raw: raw != nil, WG: blrNaiveWG},
			Bindings: access, Uniforms: 3})
		if err != nil {
			return err
		}
		g, err := Grid1D((m*n + blrNaiveWG - 1) / blrNaiveWG)
		if err != nil {
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		return r.Dispatch(kn, g, uni, binds...)
	}
	if lp, ok := r.d.blrLanes(m, n, k, transB, Whole(a), Whole(sa)); ok {
		kn, err := r.d.Kernel(KernelSpec{Name: op, File: "blr_forward_lanes.wgsl",
			Params:   blrLanesParams{TransB: transB, ScaleC: sc != nil, Accum: accum, Raw: raw != nil, Chunk: blrChunk(transB, k), lanesParams: lp},
			Bindings: access, Uniforms: 3})
		if err != nil {
			return err
		}
		if err := r.dispatchLanes(kn, lp, m, n, uni, binds...); err != nil {
			return err
		}
		r.Cost(blrGEMMCost(m, k, n, accum, raw != nil))
		return nil
	}
	bm, bn, bk := r.d.gemmTileFor(m, n, k)
	pr := blrGemmParams{TransB: transB, ScaleC: sc != nil, Accum: accum, Raw: raw != nil, BM: bm, BN: bn, BK: bk}
	if gemmFast(n, k, bn, bk, binds...) {
		pr.Fast, pr.N, pr.K = true, n, k
	}
	kn, err := r.d.Kernel(KernelSpec{Name: op, File: "blr_forward.wgsl",
		Params:   pr,
		Bindings: access, Uniforms: 3})
	if err != nil {
		return err
	}
	gx, gy := (n+bn-1)/bn, (m+bm-1)/bm
	if gx > 65535 || gy > 65535 {
		return fmt.Errorf("gpu: %s: %d×%d output needs a %d×%d grid (max 65535 per dimension)", op, m, n, gx, gy)
	}
	if err := r.Dispatch(kn, [3]int{gx, gy, 1}, uni, binds...); err != nil {
		return err
	}
	r.Cost(blrGEMMCost(m, k, n, accum, raw != nil))
	return nil
}

// blrGEMMPair records blrGEMM for the two paths of a BLR layer that share A — t1 (A = x, B =
// V_q [n, k]) or dt2 (A = dy, B = U_q [k, n]) — in one lane-blocked pass that loads each
// element of A once: c_q = (A ⊙ sa_q)·B_q for q = 0, 1, the same products and fma chains as
// two blrGEMM calls, so the same bits. It returns false (nothing recorded) where the pass
// does not apply: not a CPU adapter's lanes form, pathPairsOff, or shapes blrGEMM would not run
// in lanes, or a block the pair would not speed up. Buffers are checked by the caller.
//
// Why: on lavapipe A's loads are 35–40 % of t1 and dt2 at k = 256 (DESIGN §7 "Sign chunks").
func blrGEMMPair(r *Recorder, op string, a *Buffer, bits, sa, c [2]*Buffer, m, k, n int, transB bool) (bool, error) {
	if pathPairsOff || !r.d.info.CPU || r.d.coopUse() {
		return false, nil
	}
	lp, ok := r.d.blrLanes(m, n, k, transB, Whole(a), Whole(sa[0]), Whole(sa[1]))
	if !ok || lp.C > 8 || lp.R < 2 {
		// Where the single GEMM already takes 16 columns per lane (n > 8·S), a pair's 32
		// columns by 1 row block was slower: t1 at k = 768, n = 80 +8–10 %.
		return false, nil
	}
	// Each path keeps the single GEMM's C columns per lane; half the row blocks keep the
	// accumulators per lane (R·S·C) as they were.
	lp.Pair, lp.C, lp.R = true, 2*lp.C, lp.R/2
	kn, err := r.d.Kernel(KernelSpec{Name: op, File: "blr_forward_lanes.wgsl",
		Params:   blrLanesParams{TransB: transB, Chunk: blrChunk(transB, k), lanesParams: lp},
		Bindings: []Access{Read, Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 3})
	if err != nil {
		return false, err
	}
	if err := r.dispatchLanes(kn, lp, m, n, []uint32{uint32(m), uint32(n), uint32(k)},
		Whole(a), Whole(bits[0]), Whole(bits[1]), Whole(sa[0]), Whole(sa[1]), Whole(c[0]), Whole(c[1])); err != nil {
		return false, err
	}
	gemmLanesDispatches++ // two GEMMs in one dispatch
	for range 2 {
		r.Cost(blrGEMMCost(m, k, n, false, false))
	}
	return true, nil
}

// blrGEMMCost is a BLR GEMM stage's arithmetic, 2·m·k·n, and least traffic: A and C in f32
// (C read too when accumulating, written twice with a raw output), the signs at one bit each.
func blrGEMMCost(m, k, n int, accum, raw bool) (flops, bytes float64) {
	cbytes := 4 * float64(m) * float64(n)
	if accum {
		cbytes += 4 * float64(m) * float64(n)
	}
	if raw {
		cbytes += 4 * float64(m) * float64(n)
	}
	return 2 * float64(m) * float64(k) * float64(n), 4*float64(m)*float64(k) + float64(k)*float64(n)/8 + cbytes
}

// blrChunk is blr_forward_lanes.wgsl's Chunk for a lane-blocked BLR GEMM of depth k: with B
// [n, k] (transB) column c's signs start at bit c·k, so where k is a multiple of 4·q
// (q = 8, 4, 2; k % 8 == 0 is required) a lane loads each column's u32 once per q k steps,
// 4·q signs at a time, instead of once per k step (0: B [k, n]). On lavapipe a load is a loop over the lanes;
// the BLR ranks of the tiny model (24, 48, 72, 80) are not multiples of 32, and
// chunks of 8 or 16 signs cut their y GEMMs (K = rank) by 13–29 % (DESIGN §7).
func blrChunk(transB bool, k int) int {
	switch {
	case !transB:
		return 0
	case k%32 == 0:
		return 8
	case k%16 == 0:
		return 4
	}
	return 2
}

// blrLanesParams are blr_forward_lanes.wgsl's template parameters.
type blrLanesParams struct {
	TransB, ScaleC, Accum, Raw bool
	Chunk                      int
	lanesParams
}

// BLRKept is what BLRForward can keep for BLRBackward, one F32 buffer per path in each slice
// (a nil slice: not kept). Keeping both saves the backward two of its four sign-bit GEMMs per
// path for 4·rows·(r + m) bytes per path.
type BLRKept struct {
	// T1 [rows, r] receives t1_p = (x⊙g_p)·V_pᵀ.
	T1 []*Buffer
	// C [rows, m] receives c_p = (t1_p⊙ℓ_p)·U_pᵀ, path p's term of y before ⊙ h_p (the
	// backward's dh_p = Σ_rows dy ⊙ c_p).
	C []*Buffer
}

// checkT1 validates the optional per-path t1 buffers (F32 [rows, r] each).
func checkT1(op string, l *BLRLayer, t1 []*Buffer, rows int) error {
	return checkPerPath(op, "t1", l, t1, rows*l.Rank)
}

// checkKept validates kept's optional per-path buffers: T1 F32 [rows, r], C F32 [rows, m].
func checkKept(op string, l *BLRLayer, kept BLRKept, rows int) error {
	if err := checkT1(op, l, kept.T1, rows); err != nil {
		return err
	}
	return checkPerPath(op, "c", l, kept.C, rows*l.M)
}

// checkPerPath validates bufs, nil or one F32 buffer of n elements per path of l.
func checkPerPath(op, name string, l *BLRLayer, bufs []*Buffer, n int) error {
	if bufs == nil {
		return nil
	}
	if len(bufs) != len(l.Paths) {
		return fmt.Errorf("gpu: %s: %d %s buffers for %d paths", op, len(bufs), name, len(l.Paths))
	}
	for p, b := range bufs {
		if err := need(op, fmt.Sprintf("%s[%d]", name, p), b, n, F32); err != nil {
			return err
		}
	}
	return nil
}

// BLRForward records y = Σ_p h_p ⊙ (U_p·(ℓ_p ⊙ (V_p·(g_p ⊙ x)))) per row for the BLR layer l
// (DESIGN.md §4; W ≈ Σ_p diag(h)·U·diag(ℓ)·V·diag(g), i.e. y = x·Ŵᵀ): x F32 [rows, l.N],
// y F32 [rows, l.M] (overwritten), row-major, all arithmetic in f32. Per path it runs two
// sign-bit GEMMs (blr_forward.wgsl, tiled as the Linear GEMM, gemmTileFor and gemmFast; on
// CPU adapters blr_forward_lanes.wgsl): t1_p = (x ⊙ g_p)·V_pᵀ [rows, r], then
// y (+)= c_p ⊙ h_p with c_p = (t1_p ⊙ ℓ_p)·U_pᵀ. kept.T1 and kept.C, when not nil, receive
// t1_p and c_p for BLRBackward (BLRKept); a nil kept.T1 keeps t1 in a borrowed buffer
// (Recorder.Borrow). On tensor cores a two-path layer's y GEMMs run as one dispatch
// (coopBLRGEMMDual: the bits of the two, y written once), where it applies.
// Host reference: cmf.BLRWeight.Apply. Errors: an invalid layer (checkBLRLayer: sizes,
// dtypes, buffer lengths), rows < 1, x, y or kept buffers of the wrong dtype or length, or
// buffers that alias.
func BLRForward(r *Recorder, l *BLRLayer, x, y *Buffer, kept BLRKept, rows int) error {
	return blrForward(r, "BLRForward", false, l, x, y, kept, rows)
}

// BLRForwardNaive is the simple twin of BLRForward (one invocation per output element, no
// workgroup memory), kept as its test reference. Same arguments, layouts and errors.
func BLRForwardNaive(r *Recorder, l *BLRLayer, x, y *Buffer, kept BLRKept, rows int) error {
	return blrForward(r, "BLRForwardNaive", true, l, x, y, kept, rows)
}

func blrForward(r *Recorder, op string, naive bool, l *BLRLayer, x, y *Buffer, kept BLRKept, rows int) error {
	if err := checkBLRRows(op, l, rows, x, "y", y); err != nil {
		return err
	}
	if err := checkKept(op, l, kept, rows); err != nil {
		return err
	}
	all := map[string]*Buffer{"x": x, "y": y}
	for p := range kept.T1 {
		all[fmt.Sprintf("t1[%d]", p)] = kept.T1[p]
	}
	for p := range kept.C {
		all[fmt.Sprintf("c[%d]", p)] = kept.C[p]
	}
	for p, q := range l.Paths {
		for name, b := range map[string]*Buffer{"h": q.H, "g": q.G, "ℓ": q.L, "U": q.U, "V": q.V} {
			all[fmt.Sprintf("path %d %s", p, name)] = b
		}
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	mark := len(r.ops)
	two := len(l.Paths) == 2 && !naive
	// On tensor cores both paths' t1 operands, x ⊙ g_p, are packed in one pass (into one
	// a16 and one rs buffer), and both paths' t1 GEMMs then run as one dispatch
	// (coopBLRGEMMPair).
	var t1A [2]*coopA
	packsDone := func() {} // gives the twin pack's buffers back, once
	if two {
		var done func()
		var err error
		if t1A, done, err = coopPackPaths(r, op+".t1", x, [2]*Buffer{l.Paths[0].G, l.Paths[1].G}, rows, l.N, l.Rank); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		packsDone = sync.OnceFunc(done)
		defer packsDone()
	}
	// On tensor cores both paths' y GEMMs run as one dispatch (coopBLRGEMMDual) where it
	// applies: it reads both paths' t1 after both t1 GEMMs.
	dualY := false
	if two {
		_, dualY = r.d.coopBLRDualPlan(rows, l.Rank, l.M, kept.C != nil)
	}
	// t1 per path: kept, or borrowed (it dies with this call, so the calls of one submit
	// share it): one buffer for all paths, two where both paths' t1 run as one pass
	// (CPU adapters, blrGEMMPair; tensor cores, coopBLRGEMMPair, where the twin pack ran) or
	// both are live at once (the dual y dispatch).
	var tbs [2]*Buffer
	_, pairT1 := r.d.coopPairGEMMPlan(rows, l.N, l.Rank, false)
	twoT1 := two && !pathPairsOff && (r.d.info.CPU || t1A[0] != nil && pairT1)
	for p := range l.Paths {
		switch {
		case kept.T1 != nil:
			tbs[p] = kept.T1[p]
		case p == 0 || twoT1 || dualY:
			b, done, err := r.Borrow(fmt.Sprintf("%s t1 %d", op, p), F32, rows, l.Rank)
			if err != nil {
				r.ops = r.ops[:mark]
				return err
			}
			defer done()
			tbs[p] = b
		default:
			tbs[p] = tbs[0]
		}
	}
	pairedT1 := false
	if twoT1 {
		vs := [2]*Buffer{l.Paths[0].V, l.Paths[1].V}
		var err error
		if t1A[0] != nil {
			pairedT1, err = coopBLRGEMMPair(r, op+".t1", t1A, vs, tbs, rows, l.N, l.Rank, true)
		} else {
			pairedT1, err = blrGEMMPair(r, op+".t1", x, vs, [2]*Buffer{l.Paths[0].G, l.Paths[1].G}, tbs, rows, l.N, l.Rank, true)
		}
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	for p, q := range l.Paths {
		tb := tbs[p]
		var cb *Buffer
		if kept.C != nil {
			cb = kept.C[p]
		}
		if !pairedT1 {
			if err := blrGEMMPre(r, op+".t1", naive, t1A[p], x, q.V, q.G, nil, tb, nil, rows, l.N, l.Rank, true, false); err != nil {
				r.ops = r.ops[:mark]
				return err
			}
		}
		if dualY {
			continue // after both paths' t1, below
		}
		if err := blrGEMM(r, op+".y", naive, tb, q.U, q.L, q.H, y, cb, rows, l.Rank, l.M, true, p > 0); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	if dualY {
		// Only the t1 GEMMs read the twin pack: the dual's own packs may take its buffers.
		packsDone()
		ps := l.Paths
		var raw [2]*Buffer
		if kept.C != nil {
			raw = [2]*Buffer{kept.C[0], kept.C[1]}
		}
		ok, err := coopBLRGEMMDual(r, op+".y", tbs, [2]*Buffer{ps[0].U, ps[1].U}, [2]*Buffer{ps[0].L, ps[1].L},
			[2]*Buffer{ps[0].H, ps[1].H}, raw, y, rows, l.Rank, l.M)
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		if !ok { // declined: the two single GEMMs
			for p, q := range ps {
				if err := blrGEMM(r, op+".y", naive, tbs[p], q.U, q.L, q.H, y, raw[p], rows, l.Rank, l.M, true, p > 0); err != nil {
					r.ops = r.ops[:mark]
					return err
				}
			}
		}
	}
	return nil
}
