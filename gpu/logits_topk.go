package gpu

import "fmt"

const (
	logitsTopKWG = 128
	// logitsTopKPool is the merge kernel's workgroup pool of candidate logits (8 KiB).
	logitsTopKPool = 1024
	// logitsTopKRankPer: the rank form of the merge takes up to this many candidates (old
	// list and pool) per thread, logitsTopKWG·logitsTopKRankPer in all; more take the rounds.
	logitsTopKRankPer = 2
	// MaxTopK is the largest k LogitsTopK supports.
	MaxTopK = 64
	// logitsSliceAlign: slice sizes are multiples of 128 vocabulary rows, so each slice's
	// byte offset in an f16 E (128·hidden·2 bytes) is a multiple of 256, the strictest
	// minStorageBufferOffsetAlignment WebGPU allows.
	logitsSliceAlign = 128
	// logitsScratchMax caps the per-slice logits scratch [rows, slice] f32.
	logitsScratchMax = 64 << 20
)

// logitsTopKParams are logits_topk.wgsl's template parameters: the workgroup form (WG,
// Pool; the rank merge with Per candidates per thread where they fit, else K rounds; Per 0:
// always the rounds, the simple twin) or the lane-blocked form of CPU adapters (Lanes, S:
// one subgroup per row, lane-local top-K lists in registers; same results but the last bits
// of the log-sum-exp), all for K.
type logitsTopKParams struct {
	WG, K, Pool, S, Per int
	Lanes               bool
}

// topkLanesForce forces LogitsTopK's merge form in tests and benchmarks: 1 the lane-blocked
// one (where the device has a probed subgroup size: topkLanesSize, GPUs included), −1 the
// workgroup one, 0 the automatic choice (lanes on CPU adapters).
var topkLanesForce int

// topkLanesSize is the subgroup size the lane-blocked merge would run on: a CPU adapter's
// probed one, or a GPU's (gpuSubgroup: only when forced); 0 where there is none.
func (d *Device) topkLanesSize() int {
	if d.info.CPU {
		return d.info.SubgroupSize
	}
	return d.gpuSubgroup
}

// topkRounds makes the workgroup form of LogitsTopK's merge always take the K rounds (tests
// and benchmarks: the rank merge's twin).
var topkRounds bool

// LogitsTopK records the LM head over the vocabulary without materialising the logits:
// (sizes: dims) for each of rows rows of h (F32 [rows, hidden]) and the head/embedding matrix E (F16 or
// F32 [vocab, hidden]), logits = h·Eᵀ are computed one vocabulary slice at a time (a
// Linear into a scratch [rows, slice], no binding larger than maxStorageBufferBindingSize)
// and folded into a running max/sum and a running top-k. Outputs:
//   - lse  F32 [rows]: log Σ_v exp(logit_v);
//   - ids  U32 [rows, k]: the k largest logits' ids, descending, ties by lower id;
//   - logp F32 [rows, k]: their log-probabilities logit − lse.
//
// dims.SliceRows is the vocabulary slice (LogitsDims). 1 ≤ k ≤ min(MaxTopK, vocab).
// The merge runs one workgroup per row: when the old list and the slice's candidates fit
// the workgroup (logitsTopKRankPer per thread), each candidate's rank is counted and it is
// written to that slot; otherwise k rounds of a workgroup arg-max (same results, same bits).
// On CPU adapters it runs one subgroup per row with lane-local top-k lists (logits_topk.wgsl).
// Errors: sizes or dtypes that disagree, k out of range, a bad sliceRows, or rows so many
// that no 128-row slice of scratch fits a binding (split the rows).
func LogitsTopK(r *Recorder, h, e *Buffer, dims LogitsDims, lse, ids, logp *Buffer) error {
	return logitsTopK(r, "LogitsTopK", h, e, dims, LogitsPart{Rows: dims.Vocab}, lse, ids, logp)
}

// LogitsPart is the part of the vocabulary that one LogitsTopKPart call folds in: the head's
// rows [V0, V0+Rows), and the running log-sum-exp state that carries over from part to part.
type LogitsPart struct {
	// V0 is the vocabulary id of the part's first row, a multiple of the slice rows
	// (Device.LogitsSliceRows); Rows the part's rows, a multiple of the slice rows unless the
	// part ends the vocabulary (V0 + Rows = dims.Vocab).
	V0, Rows int
	// State is F32 [dims.Rows, 2]: each row's running max and Σ exp. The part with V0 = 0
	// overwrites it; later parts read and update it. It must outlive the parts' submits.
	State *Buffer
}

// LogitsTopKPart is LogitsTopK over a vocabulary that comes in parts, for a head streamed to
// the GPU a block of rows at a time: E (F16 or F32 [part.Rows, hidden]) holds the head's rows
// [part.V0, part.V0+part.Rows); dims is the whole head's (Vocab the full vocabulary). Parts
// are recorded in order, from V0 = 0 to the one that ends the vocabulary, each in the same or
// a later submit; ids and logp hold the running top-k between parts, and lse, ids and logp
// are final after the last part. Each part runs exactly the slices LogitsTopK runs over those
// rows (hence the alignment of V0 and Rows to the slice rows), so the outputs are
// bit-identical to one LogitsTopK over the whole head. Errors: LogitsTopK's, a part out of
// the vocabulary or not aligned to the slice rows, a State of the wrong dtype or size.
func LogitsTopKPart(r *Recorder, h, e *Buffer, dims LogitsDims, part LogitsPart, lse, ids, logp *Buffer) error {
	if part.State == nil {
		return fmt.Errorf("gpu: LogitsTopKPart: nil state")
	}
	return logitsTopK(r, "LogitsTopKPart", h, e, dims, part, lse, ids, logp)
}

// LogitsSliceRows is the vocabulary slice (rows of E computed at a time) that LogitsTopK and
// LogitsTopKPart use for dims on d with E of dtype et: dims.SliceRows when set, else the
// largest multiple of 128 within one binding and 64 MiB of [dims.Rows, slice] f32 scratch,
// capped at dims.Vocab. Errors: as LogitsDims' slice rules (a SliceRows not a positive
// multiple of 128, a slice beyond maxStorageBufferBindingSize).
func (d *Device) LogitsSliceRows(dims LogitsDims, et DType) (int, error) {
	if d == nil {
		return 0, errNilDevice
	}
	if err := positive("LogitsSliceRows", "rows, hidden, vocab", dims.Rows, dims.Hidden, dims.Vocab); err != nil {
		return 0, err
	}
	s, _, err := dims.slice("LogitsSliceRows", d, et)
	return s, err
}

// logitsTopK records LogitsTopK's slices over part's rows of the vocabulary (E holds exactly
// them), with part.State as the running state or, when nil, a temporary (the whole head).
func logitsTopK(r *Recorder, op string, h, e *Buffer, dims LogitsDims, part LogitsPart, lse, ids, logp *Buffer) error {
	if err := r.usable(); err != nil {
		return err
	}
	rows, hidden, vocab, k := dims.Rows, dims.Hidden, dims.Vocab, dims.K
	if err := positive(op, "rows, hidden, vocab, k", rows, hidden, vocab, k); err != nil {
		return err
	}
	if k > MaxTopK || k > vocab {
		return fmt.Errorf("gpu: %s: k = %d must be ≤ %d and ≤ vocab %d", op, k, MaxTopK, vocab)
	}
	if rows*hidden > maxU32Elems || vocab*hidden > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes exceed the 2³¹ index range", op)
	}
	if part.V0 < 0 || part.Rows < 1 || part.V0+part.Rows > vocab {
		return fmt.Errorf("gpu: %s: part of rows [%d, %d) outside the vocabulary [0, %d)", op, part.V0, part.V0+part.Rows, vocab)
	}
	if err := need(op, "h", h, rows*hidden, F32); err != nil {
		return err
	}
	if err := need(op, "E", e, part.Rows*hidden, F16, F32); err != nil {
		return err
	}
	if err := need(op, "lse", lse, rows, F32); err != nil {
		return err
	}
	if err := need(op, "ids", ids, rows*k, U32); err != nil {
		return err
	}
	if err := need(op, "logp", logp, rows*k, F32); err != nil {
		return err
	}
	bufs := map[string]*Buffer{"h": h, "E": e, "lse": lse, "ids": ids, "logp": logp}
	if part.State != nil {
		if err := need(op, "state", part.State, 2*rows, F32); err != nil {
			return err
		}
		bufs["state"] = part.State
	}
	if err := distinct(op, bufs); err != nil {
		return err
	}
	d := r.d
	sliceRows, esz, err := dims.slice(op, d, e.dtype)
	if err != nil {
		return err
	}
	if ((vocab+sliceRows-1)/sliceRows)*2 > 1<<16 {
		return fmt.Errorf("gpu: %s: %d slices of %d rows: use larger slices", op, (vocab+sliceRows-1)/sliceRows, sliceRows)
	}
	if part.V0%sliceRows != 0 || part.Rows%sliceRows != 0 && part.V0+part.Rows != vocab {
		return fmt.Errorf("gpu: %s: part of rows [%d, %d) not aligned to the %d-row slices (its start, and its end unless it ends the vocabulary of %d, must be multiples)",
			op, part.V0, part.V0+part.Rows, sliceRows, vocab)
	}
	mp := logitsTopKParams{WG: logitsTopKWG, K: k, Pool: logitsTopKPool, Per: logitsTopKRankPer}
	if topkRounds {
		mp.Per = 0
	}
	if s := d.topkLanesSize(); s > 0 && topkLanesForce >= 0 && (d.info.CPU || topkLanesForce > 0) {
		mp = logitsTopKParams{K: k, Lanes: true, S: s}
	}
	merge, err := d.Kernel(KernelSpec{
		Name: "LogitsTopK.merge", File: "logits_topk.wgsl", Params: mp,
		Bindings: []Access{Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(rows)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	scratch, err := r.Temp("LogitsTopK logits slice", F32, rows, sliceRows)
	if err != nil {
		return err
	}
	state := part.State
	if state == nil {
		if state, err = r.Temp("LogitsTopK state", F32, rows, 2); err != nil {
			return err
		}
	}
	// All or nothing: if a dispatch fails, drop this launcher's earlier slices.
	mark := len(r.ops)
	for v0 := part.V0; v0 < part.V0+part.Rows; v0 += sliceRows {
		cols := min(sliceRows, vocab-v0)
		off := uint64(v0-part.V0) * uint64(hidden) * esz
		size := (uint64(cols)*uint64(hidden)*esz + 3) &^ 3
		eb := Binding{Buf: e, Offset: off, Size: size}
		sb := Binding{Buf: scratch, Size: uint64(rows) * uint64(cols) * 4}
		if err := gemm(r, "LogitsTopK.logits", false, Whole(h), eb, sb, e.dtype == F16, rows, hidden, cols, true); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		first, last := uint32(0), uint32(0)
		if v0 == 0 {
			first = 1
		}
		if v0+cols >= vocab {
			last = 1
		}
		err := r.Dispatch(merge, grid, []uint32{uint32(rows), uint32(cols), uint32(v0), first, last},
			sb, Whole(state), Whole(ids), Whole(logp), Whole(lse))
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		r.Cost(0, 4*float64(rows)*float64(cols)) // the slice's logits, read once
	}
	return nil
}
