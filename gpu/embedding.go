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
	if err := need(op, "table", table, -1, F32, F16); err != nil {
		return err
	}
	if len(table.shape) != 2 {
		return fmt.Errorf("gpu: %s: table %s must be 2-D [vocab, hidden]", op, table)
	}
	vocab, hidden := table.shape[0], table.shape[1]
	if len(ids) == 0 {
		return fmt.Errorf("gpu: %s: no ids", op)
	}
	if err := need(op, "out", out, len(ids)*hidden, F32); err != nil {
		return err
	}
	if len(ids)*hidden > maxU32Elems {
		return fmt.Errorf("gpu: %s: %d×%d outputs exceed the 2³¹ index range", op, len(ids), hidden)
	}
	u := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("gpu: %s: ids[%d] = %d outside the vocabulary [0, %d)", op, i, id, vocab)
		}
		u[i] = uint32(id)
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
	// Slice rows: a multiple of 128 (so every slice offset, 128·hidden·2 bytes at least, is
	// a multiple of 256) that keeps a slice within one binding.
	esz := uint64(table.dtype.Size())
	slice := vocab
	if uint64(vocab)*uint64(hidden)*esz > r.d.info.MaxStorageBindingSize || embeddingSliceRows > 0 {
		slice = int(r.d.info.MaxStorageBindingSize / (uint64(hidden) * esz) / 128 * 128)
		if embeddingSliceRows > 0 {
			slice = embeddingSliceRows
		}
		if slice < 128 {
			return fmt.Errorf("gpu: %s: 128 rows of %d values exceed one storage binding", op, hidden)
		}
	}
	idb, err := r.TempUint32("Embedding ids", u, len(u))
	if err != nil {
		return err
	}
	mark := len(r.ops)
	for v0 := 0; v0 < vocab; v0 += slice {
		count := min(slice, vocab-v0)
		tb := Binding{Buf: table, Offset: uint64(v0) * uint64(hidden) * esz,
			Size: (uint64(count)*uint64(hidden)*esz + 3) &^ 3}
		err := r.Dispatch(k, g, []uint32{uint32(len(ids)), uint32(hidden), uint32(v0), uint32(count)}, tb, Whole(idb), Whole(out))
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		// The gathered rows (table read, out written) in this slice's share of the vocabulary.
		r.Cost(0, float64(len(ids))*float64(hidden)*(4+float64(esz))*float64(count)/float64(vocab))
	}
	return nil
}
