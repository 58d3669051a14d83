package gpu

import "fmt"

// vocabTable is an F32 or F16 [vocab, hidden] row-major table (an embedding or the LM head)
// that a kernel reads in vocabulary slices, one dispatch each: slice rows at a time (all
// vocab rows when the table fits one storage binding, else a multiple of 128 rows, so every
// slice offset — 128·hidden·2 bytes at least — is a multiple of 256 bytes).
type vocabTable struct {
	buf                  *Buffer
	vocab, hidden, slice int
	esz                  uint64 // bytes per element
}

// vocabTableOf checks t, named name in op's errors (F32 or F16, 2-D), and picks its slice
// rows on r's device; force > 0 overrides them (tests). Errors: a dtype or rank mismatch,
// or 128 rows larger than one storage binding.
func vocabTableOf(r *Recorder, op, name string, t *Buffer, force int) (vocabTable, error) {
	if err := need(op, name, t, -1, F32, F16); err != nil {
		return vocabTable{}, err
	}
	if len(t.shape) != 2 {
		return vocabTable{}, fmt.Errorf("gpu: %s: %s %s must be 2-D [vocab, hidden]", op, name, t)
	}
	v := vocabTable{buf: t, vocab: t.shape[0], hidden: t.shape[1], slice: t.shape[0], esz: uint64(t.dtype.Size())}
	binding := r.d.info.MaxStorageBindingSize
	if uint64(v.vocab)*uint64(v.hidden)*v.esz > binding || force > 0 {
		v.slice = int(binding / (uint64(v.hidden) * v.esz) / 128 * 128)
		if force > 0 {
			v.slice = force
		}
		if v.slice < 128 {
			return vocabTable{}, fmt.Errorf("gpu: %s: 128 rows of %d values exceed one storage binding", op, v.hidden)
		}
	}
	return v, nil
}

// ids checks ids for op (at least one; each in [0, vocab), the first bad one named by its
// index) and returns them as u32 words for upload.
func (v vocabTable) ids(op string, ids []int) ([]uint32, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("gpu: %s: no ids", op)
	}
	u := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= v.vocab {
			return nil, fmt.Errorf("gpu: %s: ids[%d] = %d outside the vocabulary [0, %d)", op, i, id, v.vocab)
		}
		u[i] = uint32(id)
	}
	return u, nil
}

// eachSlice calls dispatch for every slice in vocabulary order with its first row v0, its
// row count and the binding of its rows (a whole number of u32 words); on an error it drops
// what the calls recorded from r and returns the error.
func (v vocabTable) eachSlice(r *Recorder, dispatch func(v0, count int, rows Binding) error) error {
	mark := len(r.ops)
	for v0 := 0; v0 < v.vocab; v0 += v.slice {
		count := min(v.slice, v.vocab-v0)
		rows := Binding{Buf: v.buf, Offset: uint64(v0) * uint64(v.hidden) * v.esz,
			Size: (uint64(count)*uint64(v.hidden)*v.esz + 3) &^ 3}
		if err := dispatch(v0, count, rows); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	return nil
}
