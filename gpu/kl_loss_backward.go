package gpu

import (
	"fmt"
	"math"
)

const klWG = 128

// DefaultLogitsStore is KLLossBackward's logits store on a GPU adapter (KLOptions): 4 GiB,
// enough for 8 windows × 512 tokens × a 248,320-token vocabulary in f32.
const DefaultLogitsStore = 4 << 30

// DefaultLogitsStoreCPU is KLLossBackward's logits store on a CPU adapter, where the buffers
// are host memory: 512 MiB, the logits of up to ~540 rows of a 248,320-token vocabulary (the
// embedded tiny model's 4 windows of 64 tokens take 8 MiB). Keeping them saves one of the
// head's three vocabulary GEMMs, ~3 % of a lavapipe step of that model.
const DefaultLogitsStoreCPU = 512 << 20

// LogitsDims are the sizes of an LM head over the vocabulary (LogitsTopK, KLLossBackward):
// logits = h·Eᵀ, never materialised whole.
type LogitsDims struct {
	// Rows is the number of token rows: h [Rows, Hidden].
	Rows int
	// Hidden is the hidden size, the logits' inner dimension: E [Vocab, Hidden].
	Hidden int
	// Vocab is the vocabulary size, the logits' columns.
	Vocab int
	// K is the number of ids per row: LogitsTopK's top-k outputs [Rows, K], or
	// KLLossBackward's teacher top-k ids and probabilities [Rows, K].
	K int
	// SliceRows is the vocabulary slice computed at a time (a multiple of 128); 0 picks the
	// largest that keeps E's slice and the [Rows, slice] scratch within one binding and
	// 64 MiB.
	SliceRows int
}

// KLOptions are KLLossBackward's tuning options; the zero value is the default.
type KLOptions struct {
	// LogitsStore is how many bytes of scratch KLLossBackward may use to keep the logits of
	// its first pass (Rows × Vocab × 4 bytes) for its second, which then skips one of its
	// three vocabulary GEMMs (a third of the head's arithmetic); above the limit it
	// recomputes them slice by slice. 0 selects the default: DefaultLogitsStore on GPU
	// adapters, DefaultLogitsStoreCPU on CPU adapters (where memory is the host's); a
	// negative value turns the store off. The result is bit-identical either way.
	LogitsStore int64
}

// slice returns the vocabulary slice for E of dtype et on d, and et's element size in
// bytes: SliceRows, or the largest
// multiple of 128 rows within one binding and logitsScratchMax when it is 0, capped at
// Vocab. Errors: a SliceRows not a positive multiple of 128, or a slice (of E or of the
// [Rows, slice] scratch) beyond maxStorageBufferBindingSize.
func (dims LogitsDims) slice(op string, d *Device, et DType) (int, uint64, error) {
	rows, hidden, sliceRows := dims.Rows, dims.Hidden, dims.SliceRows
	maxBind := d.info.MaxStorageBindingSize
	esz := uint64(et.Size())
	if sliceRows == 0 {
		s := min(maxBind/(uint64(hidden)*esz), min(maxBind, logitsScratchMax)/(uint64(rows)*4))
		s = s / logitsSliceAlign * logitsSliceAlign
		if s == 0 {
			return 0, 0, fmt.Errorf("gpu: %s: %d rows × %d hidden leave no room for a %d-row vocabulary slice in one binding; split the rows",
				op, rows, hidden, logitsSliceAlign)
		}
		sliceRows = int(s)
	}
	if sliceRows <= 0 || sliceRows%logitsSliceAlign != 0 {
		return 0, 0, fmt.Errorf("gpu: %s: sliceRows = %d must be a positive multiple of %d", op, sliceRows, logitsSliceAlign)
	}
	sliceRows = min(sliceRows, dims.Vocab)
	if uint64(sliceRows)*uint64(hidden)*esz > maxBind || uint64(rows)*uint64(sliceRows)*4 > maxBind {
		return 0, 0, fmt.Errorf("gpu: %s: slice of %d rows exceeds maxStorageBufferBindingSize %d", op, sliceRows, maxBind)
	}
	return sliceRows, esz, nil
}

// logitsStore is the store limit in bytes that opt gives on d.
func (opt KLOptions) logitsStore(d *Device) uint64 {
	switch {
	case opt.LogitsStore < 0:
		return 0
	case opt.LogitsStore > 0:
		return uint64(opt.LogitsStore)
	case d.info.CPU:
		return DefaultLogitsStoreCPU
	}
	return DefaultLogitsStore
}

// KLLossBackward records the distillation loss of the LM head and its gradient with respect
// to the final hidden states (DESIGN.md §6; host.KLLoss), never materialising the rows ×
// vocab logits. logits = h·Eᵀ (sizes: dims) with h F32 [rows, hidden] and E F16 (or F32) [vocab, hidden]
// (frozen), computed one vocabulary slice at a time through the Linear GEMM (no binding
// larger than maxStorageBufferBindingSize, as LogitsTopK). With the teacher's top-k ids
// U32 [rows, k] and probabilities pT F32 [rows, k] (renormalised here per row: q = pT/Σ pT;
// raw or normalised probabilities give the same result):
//
//   - pass 1 over the slices: the student's lse per row by a running max/sum, and its logits
//     at the teacher's ids;
//   - kl F32 [rows] (overwritten): KL_r = Σ_k q_k·(log q_k − (logit[id_k] − lse)), 0·log 0 = 0;
//     loss F32 [1] (overwritten): (1/rows)·Σ_r KL_r;
//   - pass 2 over the slices: dlogits = scale·(p_S − q at the ids) in the slice, then
//     dh += dlogits·E_slice (dh F32 [rows, hidden], accumulated). When rows·vocab·4 bytes
//     fit the logits store (opt.LogitsStore), pass 1 keeps every slice's
//     logits and pass 2 reuses them instead of recomputing (bit-identical results).
//
// scale is the gradient's factor: 1/rows gives the gradient of this call's mean loss
// (host.KLLoss's dlogits); pass 1/(total rows) when a batch's head runs in row blocks.
// dims.SliceRows is the vocabulary slice (LogitsDims). The ids must be distinct per row and < vocab (not checked
// on the GPU: an id outside the vocabulary makes that row's KL NaN and gets no gradient).
// Errors: sizes or dtypes that disagree, k > vocab, a bad sliceRows or scale, aliasing,
// or rows so many that no 128-row slice of scratch fits a binding (split the rows).
func KLLossBackward(r *Recorder, h, e, ids, pT *Buffer, dims LogitsDims, scale float64, opt KLOptions, dh, kl, loss *Buffer) error {
	const op = "KLLossBackward"
	if err := r.usable(); err != nil {
		return err
	}
	rows, hidden, vocab, k := dims.Rows, dims.Hidden, dims.Vocab, dims.K
	if err := positive(op, "rows, hidden, vocab, k", rows, hidden, vocab, k); err != nil {
		return err
	}
	if k > vocab {
		return fmt.Errorf("gpu: %s: k = %d exceeds the vocabulary %d", op, k, vocab)
	}
	if rows*hidden > maxU32Elems || vocab*hidden > maxU32Elems || rows*k > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes exceed the 2³¹ index range", op)
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) || math.Abs(scale) > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: scale = %g must be finite in f32", op, scale)
	}
	for _, c := range []struct {
		name string
		b    *Buffer
		n    int
		ts   []DType
	}{{"h", h, rows * hidden, []DType{F32}}, {"E", e, vocab * hidden, []DType{F16, F32}},
		{"ids", ids, rows * k, []DType{U32}}, {"pT", pT, rows * k, []DType{F32}},
		{"dh", dh, rows * hidden, []DType{F32}}, {"kl", kl, rows, []DType{F32}}, {"loss", loss, 1, []DType{F32}}} {
		if err := need(op, c.name, c.b, c.n, c.ts...); err != nil {
			return err
		}
	}
	if err := distinct(op, map[string]*Buffer{"h": h, "E": e, "ids": ids, "pT": pT, "dh": dh, "kl": kl, "loss": loss}); err != nil {
		return err
	}
	d := r.d
	sliceRows, esz, err := dims.slice(op, d, e.dtype)
	if err != nil {
		return err
	}
	nslices := (vocab + sliceRows - 1) / sliceRows
	if nslices*4 > 1<<16 {
		return fmt.Errorf("gpu: %s: %d slices of %d rows: use larger slices", op, nslices, sliceRows)
	}
	stage := func(name string, binds []Access) (*Kernel, error) {
		return d.Kernel(KernelSpec{Name: op + "." + name, File: "kl_loss_backward.wgsl",
			Params: struct {
				Stage string
				WG    int
			}{name, klWG},
			Bindings: binds, Uniforms: 6})
	}
	stats, err := stage("stats", []Access{Read, Read, ReadWrite, ReadWrite})
	if err != nil {
		return err
	}
	finish, err := stage("finish", []Access{Read, Read, Read, ReadWrite, ReadWrite})
	if err != nil {
		return err
	}
	mean, err := d.Kernel(KernelSpec{Name: op + ".mean", File: "kl_loss_backward.wgsl",
		Params: struct {
			Stage string
			WG    int
		}{"mean", klWG},
		Bindings: []Access{Read, ReadWrite}, Uniforms: 6})
	if err != nil {
		return err
	}
	grad, err := stage("grad", []Access{ReadWrite, Read, Read, Read})
	if err != nil {
		return err
	}
	rowGrid, err := Grid1D(rows)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	thrGrid, err := Grid1D((rows + klWG - 1) / klWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	store := uint64(rows)*uint64(vocab)*4 <= opt.logitsStore(d)
	// Pass 1's logits: one scratch slice reused (recompute in pass 2), or one per slice
	// kept for pass 2 (store).
	var kept []*Buffer
	var scratch *Buffer
	if !store {
		if scratch, err = r.Temp(op+" logits slice", F32, rows, sliceRows); err != nil {
			return err
		}
	}
	state, err := r.Temp(op+" state", F32, rows, 2)
	if err != nil {
		return err
	}
	tl, err := r.Temp(op+" teacher-id logits", F32, rows, k)
	if err != nil {
		return err
	}
	rowstat, err := r.Temp(op+" lse", F32, rows, 2)
	if err != nil {
		return err
	}
	dtmp, err := r.Temp(op+" dh slice", F32, rows, hidden)
	if err != nil {
		return err
	}
	sbits := math.Float32bits(float32(scale))
	fail := r.rollback()
	bf16 := e.dtype == F16
	slice := func(v0 int) (cols int, eb, sb Binding) {
		cols = min(sliceRows, vocab-v0)
		off := uint64(v0) * uint64(hidden) * esz
		size := (uint64(cols)*uint64(hidden)*esz + 3) &^ 3
		return cols, Binding{Buf: e, Offset: off, Size: size}, Binding{Buf: scratch, Size: uint64(rows) * uint64(cols) * 4}
	}
	for v0 := 0; v0 < vocab; v0 += sliceRows {
		cols, eb, sb := slice(v0)
		if store {
			b, err := r.Temp(op+" stored logits", F32, rows, cols)
			if err != nil {
				return fail(err)
			}
			kept = append(kept, b)
			sb = Whole(b)
		}
		if err := gemm(r, op+".logits", false, Whole(h), eb, sb, bf16, rows, hidden, cols, true); err != nil {
			return fail(err)
		}
		first := uint32(0)
		if v0 == 0 {
			first = 1
		}
		if err := r.Dispatch(stats, rowGrid, []uint32{uint32(rows), uint32(cols), uint32(v0), uint32(k), first, sbits},
			sb, Whole(ids), Whole(state), Whole(tl)); err != nil {
			return fail(err)
		}
		r.Cost(0, 4*float64(rows)*float64(cols)) // the slice's logits, read once
	}
	uni := []uint32{uint32(rows), 0, 0, uint32(k), 0, sbits}
	if err := r.Dispatch(finish, thrGrid, uni, Whole(state), Whole(tl), Whole(pT), Whole(kl), Whole(rowstat)); err != nil {
		return fail(err)
	}
	if err := r.Dispatch(mean, [3]int{1, 1, 1}, uni, Whole(kl), Whole(loss)); err != nil {
		return fail(err)
	}
	for i, v0 := 0, 0; v0 < vocab; i, v0 = i+1, v0+sliceRows {
		cols, eb, sb := slice(v0)
		if store {
			sb = Whole(kept[i])
		} else if err := gemm(r, op+".logits", false, Whole(h), eb, sb, bf16, rows, hidden, cols, true); err != nil {
			return fail(err)
		}
		if err := r.Dispatch(grad, rowGrid, []uint32{uint32(rows), uint32(cols), uint32(v0), uint32(k), 0, sbits},
			sb, Whole(ids), Whole(pT), Whole(rowstat)); err != nil {
			return fail(err)
		}
		r.Cost(0, 8*float64(rows)*float64(cols)) // logits read, dlogits written in place
		if err := gemm(r, op+".dh", false, sb, eb, Whole(dtmp), bf16, rows, cols, hidden, false); err != nil {
			return fail(err)
		}
		if err := ResidualAdd(r, dh, dtmp); err != nil {
			return fail(err)
		}
	}
	return nil
}
