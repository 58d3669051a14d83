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
	tab, err := vocabTableOf(r, op, "E", e, targetLogitsSliceRows)
	if err != nil {
		return err
	}
	vocab, hidden := tab.vocab, tab.hidden
	u, err := tab.ids(op, ids)
	if err != nil {
		return err
	}
	rows := len(ids)
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
	idb, err := r.TempUint32("TargetLogits ids", u, rows)
	if err != nil {
		return err
	}
	return tab.eachSlice(r, func(v0, count int, eb Binding) error {
		err := r.Dispatch(k, g, []uint32{uint32(rows), uint32(hidden), uint32(v0), uint32(count)}, Whole(h), eb, Whole(idb), Whole(out))
		if err == nil { // one dot of hidden per row, in this slice's share of the vocabulary
			share := float64(count) / float64(vocab)
			r.Cost(2*float64(rows)*float64(hidden)*share, float64(rows)*float64(hidden)*(4+float64(tab.esz))*share)
		}
		return err
	})
}
