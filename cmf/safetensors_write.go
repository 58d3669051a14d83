package cmf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/nvg-project/nvg/internal/atomicfile"
)

// WriteSafetensors writes ts (plain dtypes only, in the given order) as a plain safetensors
// file with the given __metadata__ (may be nil), atomically (see WriteCMF). It is for
// outputs that are not models, such as `nvg trace`; models are written with WriteCMF.
// Errors: EncodeSafetensors's, and I/O errors, each naming path.
func WriteSafetensors(path string, ts []*Tensor, meta map[string]string) error {
	return atomicfile.Write(path, func(w io.Writer) error { return EncodeSafetensors(w, ts, meta) })
}

// EncodeSafetensors writes ts (plain dtypes only, in the given order, contiguous) as a plain
// safetensors stream to w: the u64 little-endian header length, the JSON header (the
// entries and, when meta is not empty, __metadata__) padded with spaces to a multiple of 8
// bytes, then the tensors' bytes. Everything is checked before the first byte is written.
// Errors: a BLR or unknown dtype, a size that disagrees with shape × dtype, duplicate or
// reserved names (naming the tensor), and w's errors.
func EncodeSafetensors(w io.Writer, ts []*Tensor, meta map[string]string) error {
	entries := map[string]any{}
	var off int64
	for _, t := range ts {
		if t.DType == BLR || t.DType.Size() == 0 {
			return fmt.Errorf("tensor %s: dtype %s cannot go in a plain safetensors file", t.Name, t.DType)
		}
		n, err := numElements(t.Shape)
		if err != nil || n*int64(t.DType.Size()) != t.size {
			return fmt.Errorf("tensor %s: %d bytes for shape %v of dtype %s", t.Name, t.size, t.Shape, t.DType)
		}
		if _, dup := entries[t.Name]; dup || t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("tensor %q: duplicate or reserved name", t.Name)
		}
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		entries[t.Name] = headerEntry{DType: string(t.DType), Shape: shape, DataOffsets: []int64{off, off + t.size}}
		off += t.size
	}
	if len(meta) > 0 {
		entries["__metadata__"] = meta
	}
	h, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return writeHeaderAndTensors(w, padHeader(h), ts)
}

// padHeader pads a JSON header with spaces to a multiple of 8 bytes (so that the data
// section starts 8-byte aligned).
func padHeader(h []byte) []byte {
	if pad := (8 - len(h)%8) % 8; pad > 0 {
		h = append(h, strings.Repeat(" ", pad)...)
	}
	return h
}

// writeHeader writes a safetensors header: its u64 little-endian length, then h.
func writeHeader(w io.Writer, h []byte) error {
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(h)))
	if _, err := w.Write(lenb[:]); err != nil {
		return err
	}
	_, err := w.Write(h)
	return err
}

// writeHeaderAndTensors writes the header h (writeHeader), then the stored bytes of ts in
// order.
func writeHeaderAndTensors(w io.Writer, h []byte, ts []*Tensor) error {
	if err := writeHeader(w, h); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := t.WriteTo(w); err != nil {
			return err
		}
	}
	return nil
}

// NewInt64Tensor returns an in-memory I64 tensor holding v (len(v) must equal prod(shape)).
func NewInt64Tensor(name string, shape []int, v []int) (*Tensor, error) {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(int64(x)))
	}
	return NewTensor(name, I64, shape, raw)
}
