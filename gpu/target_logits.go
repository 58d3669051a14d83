package gpu

import "fmt"

const targetLogitsWG = 64

// targetLogitsSliceRows, when > 0, overrides the vocabulary slice size (tests).
var targetLogitsSliceRows = 0

// TargetLogits records out[r] = h[r, :] · E[ids[r], :] for r < len(ids): the logit of one
// chosen vocabulary entry per token (the target's, for the negative log-likelihood
// lse − logit[target] next to LogitsTopK's lse), without computing the other logits.
// Products in f32, summed in f32 (64 strided partial sums, then a tree).
//
// h is F32 [rows, hidden], E is F16 or F32 [vocab, hidden] (the head or tied embedding; one
// larger than a storage binding is read in 128-row-aligned vocabulary slices, one dispatch
// each), out is F32 [rows], rows = len(ids). ids are
// validated here (0 ≤ id < vocab) and uploaded into a temporary buffer of the recorder.
// Errors: no ids, an id out of range (named with its index), dtype or size mismatches,
// aliasing, or any Dispatch error.
func TargetLogits(r *Recorder, h, e *Buffer, ids []int, out *Buffer) error {
	const op = "TargetLogits"
	if err := need(op, "E", e, -1, F32, F16); err != nil {
		return err
	}
	if len(e.shape) != 2 {
		return fmt.Errorf("gpu: %s: E %s must be 2-D [vocab, hidden]", op, e)
	}
	vocab, hidden := e.shape[0], e.shape[1]
	rows := len(ids)
	if rows == 0 {
		return fmt.Errorf("gpu: %s: no ids", op)
	}
	if rows*hidden > maxU32Elems || vocab*hidden > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes exceed the 2³¹ index range", op)
	}
	if err := need(op, "h", h, rows*hidden, F32); err != nil {
		return err
	}
	if err := need(op, "out", out, rows, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"h": h, "E": e, "out": out}); err != nil {
		return err
	}
	u := make([]uint32, rows)
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("gpu: %s: ids[%d] = %d outside the vocabulary [0, %d)", op, i, id, vocab)
		}
		u[i] = uint32(id)
	}
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "target_logits.wgsl",
		Params: struct {
			WG  int
			F16 bool
		}{targetLogitsWG, e.dtype == F16},
		Bindings: []Access{Read, Read, Read, ReadWrite}, Uniforms: 4,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D(rows)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	esz := uint64(e.dtype.Size())
	slice := vocab
	if uint64(vocab)*uint64(hidden)*esz > r.d.info.MaxStorageBindingSize || targetLogitsSliceRows > 0 {
		// A multiple of 128 rows keeps every slice offset a multiple of 256 bytes.
		slice = int(r.d.info.MaxStorageBindingSize / (uint64(hidden) * esz) / 128 * 128)
		if targetLogitsSliceRows > 0 {
			slice = targetLogitsSliceRows
		}
		if slice < 128 {
			return fmt.Errorf("gpu: %s: 128 rows of %d values exceed one storage binding", op, hidden)
		}
	}
	idb, err := r.TempUint32("TargetLogits ids", u, rows)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	for v0 := 0; v0 < vocab; v0 += slice {
		count := min(slice, vocab-v0)
		eb := Binding{Buf: e, Offset: uint64(v0) * uint64(hidden) * esz, Size: (uint64(count)*uint64(hidden)*esz + 3) &^ 3}
		err := r.Dispatch(k, g, []uint32{uint32(rows), uint32(hidden), uint32(v0), uint32(count)}, Whole(h), eb, Whole(idb), Whole(out))
		if err == nil { // one dot of hidden per row, in this slice's share of the vocabulary
			share := float64(count) / float64(vocab)
			r.Cost(2*float64(rows)*float64(hidden)*share, float64(rows)*float64(hidden)*(4+float64(esz))*share)
		}
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	return nil
}
