package gpu

import "fmt"

const embeddingWG = 256

// embeddingSliceRows, when > 0, overrides the table slice size (tests).
var embeddingSliceRows = 0

// Embedding records out[r, :] = table[ids[r], :] for r < len(ids).
// table is F32 or F16 [vocab, hidden] row-major; a table larger than one storage binding
// (maxStorageBufferBindingSize) is gathered in vocabulary slices, one dispatch each.
// out is F32 [len(ids), hidden]. ids are validated here (0 ≤ id < vocab) and
// uploaded into a temporary buffer of the recorder. Errors name the first bad id, or the
// buffer whose dtype or size is wrong.
func Embedding(r *Recorder, table *Buffer, ids []int, out *Buffer) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "Embedding"
	tab, err := vocabTableOf(r, op, "table", table, embeddingSliceRows)
	if err != nil {
		return err
	}
	hidden := tab.hidden
	u, err := tab.ids(op, ids)
	if err != nil {
		return err
	}
	if err := need(op, "out", out, len(ids)*hidden, F32); err != nil {
		return err
	}
	if len(ids)*hidden > maxU32Elems {
		return fmt.Errorf("gpu: %s: %d×%d outputs exceed the 2³¹ index range", op, len(ids), hidden)
	}
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "embedding.wgsl",
		Params: struct {
			WG  int
			F16 bool
		}{embeddingWG, table.dtype == F16},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 4,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D((len(ids)*hidden + embeddingWG - 1) / embeddingWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	idb, err := r.TempUint32("Embedding ids", u, len(u))
	if err != nil {
		return err
	}
	return tab.eachSlice(r, func(v0, count int, rows Binding) error {
		err := r.Dispatch(k, g, []uint32{uint32(len(ids)), uint32(hidden), uint32(v0), uint32(count)}, rows, Whole(idb), Whole(out))
		if err == nil { // the gathered rows (table read, out written) in this slice's share of the vocabulary
			r.Cost(0, float64(len(ids))*float64(hidden)*(4+float64(tab.esz))*float64(count)/float64(tab.vocab))
		}
		return err
	})
}
