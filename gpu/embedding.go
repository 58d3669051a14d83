package gpu

import "fmt"

const embeddingWG = 256

// Embedding records out[r, :] = table[ids[r], :] for r < len(ids).
// table is F32 or F16 [vocab, hidden] row-major (its whole size must fit one storage
// binding); out is F32 [len(ids), hidden]. ids are validated here (0 ≤ id < vocab) and
// uploaded into a temporary buffer of the recorder. Errors name the first bad id, or the
// buffer whose dtype or size is wrong.
func Embedding(r *Recorder, table *Buffer, ids []int, out *Buffer) error {
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
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3,
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
	return r.Dispatch(k, g, []uint32{uint32(len(ids)), uint32(hidden), uint32(vocab)}, Whole(table), Whole(idb), Whole(out))
}
