package cmf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// MaxHeaderBytes bounds the JSON header of a safetensors/CMF file (100 MiB, as the
// reference safetensors implementation does); a larger declared length is rejected before
// anything is allocated.
const MaxHeaderBytes = 100 << 20

// Tensor is one named tensor: its dtype, shape and bytes, either held in memory or read
// lazily from an open file. For dtype BLR the shape is the logical [m, n] of the weight and
// the bytes are the BLR payload (DESIGN.md §4).
type Tensor struct {
	Name  string
	DType DType
	Shape []int

	data []byte      // in-memory bytes, or nil when backed by a file
	src  io.ReaderAt // backing file
	off  int64       // absolute byte offset in src
	size int64       // bytes
	file string      // path of the backing file, for errors
}

// NewTensor returns an in-memory tensor holding data (not copied). For plain dtypes
// len(data) must equal prod(shape)·dtype size; for BLR, shape is the logical [m, n] of the
// weight (both positive) and data is the payload (DESIGN.md §4, not checked here).
func NewTensor(name string, dtype DType, shape []int, data []byte) (*Tensor, error) {
	if dtype == BLR {
		if len(shape) != 2 || shape[0] <= 0 || shape[1] <= 0 {
			return nil, fmt.Errorf("tensor %s: a blr tensor needs a logical shape [m, n] of positive sizes, got %v", name, shape)
		}
	} else {
		n, err := numElements(shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		if dtype.Size() == 0 {
			return nil, fmt.Errorf("tensor %s: unknown dtype %q", name, dtype)
		}
		if int64(len(data)) != n*int64(dtype.Size()) {
			return nil, fmt.Errorf("tensor %s: %d bytes for shape %v of %s (want %d)", name, len(data), shape, dtype, n*int64(dtype.Size()))
		}
	}
	return &Tensor{Name: name, DType: dtype, Shape: append([]int(nil), shape...), data: data, size: int64(len(data))}, nil
}

// NewFloatTensor returns an in-memory tensor of dtype d (F32, F16, BF16 or F64) holding v
// rounded to d. len(v) must equal prod(shape).
func NewFloatTensor(name string, d DType, shape []int, v []float64) (*Tensor, error) {
	raw, err := EncodeFloat64(d, v)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return NewTensor(name, d, shape, raw)
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n, _ := numElements(t.Shape)
	return int(n)
}

// NumBytes is the stored size in bytes.
func (t *Tensor) NumBytes() int64 { return t.size }

// Bytes returns the stored bytes (a fresh copy read from the file for file-backed tensors;
// the held slice for in-memory ones — do not modify it).
func (t *Tensor) Bytes() ([]byte, error) {
	if t.src == nil {
		return t.data, nil
	}
	b := make([]byte, t.size)
	if _, err := t.src.ReadAt(b, t.off); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: reading %d bytes at offset %d: %w", t.file, t.Name, t.size, t.off, err)
	}
	return b, nil
}

// Float64 returns the elements converted to float64, row-major in Shape order.
func (t *Tensor) Float64() ([]float64, error) {
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	v, err := DecodeFloat64(t.DType, b)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return v, nil
}

// Float32 returns the elements converted to float32, row-major in Shape order.
func (t *Tensor) Float32() ([]float32, error) {
	v, err := t.Float64()
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out, nil
}

// SafetensorsFile is an open safetensors (or single-file CMF) file: its metadata and its
// tensors, whose data are read lazily.
type SafetensorsFile struct {
	Path     string
	Metadata map[string]string
	Tensors  []*Tensor // in header order of data offsets
	f        *os.File
}

// Close closes the underlying file; tensors read from it afterwards fail.
func (s *SafetensorsFile) Close() error { return s.f.Close() }

// Tensor returns the tensor of that name, or nil.
func (s *SafetensorsFile) Tensor(name string) *Tensor {
	for _, t := range s.Tensors {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// OpenSafetensors opens a safetensors file and validates its header against the file:
// header length within the file and MaxHeaderBytes, a JSON object of entries with a known
// dtype, a shape of non-negative dims, data_offsets [begin, end] inside the data section,
// end−begin == prod(shape)·dtype size, and no two entries overlapping. Every error names the
// file and, where there is one, the tensor. Nothing larger than the file is allocated.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	meta, tensors, err := ParseSafetensorsHeader(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &SafetensorsFile{Path: path, Metadata: meta, Tensors: tensors, f: f}, nil
}

type headerEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseSafetensorsHeader reads and validates the header of a safetensors stream of
// fileSize bytes from r (see OpenSafetensors for the checks). name is used in errors.
// The returned tensors read their data lazily from r.
func ParseSafetensorsHeader(r io.ReaderAt, fileSize int64, name string) (map[string]string, []*Tensor, error) {
	if fileSize < 8 {
		return nil, nil, fmt.Errorf("%s: %d bytes is too short for a safetensors header", name, fileSize)
	}
	var lenb [8]byte
	if _, err := r.ReadAt(lenb[:], 0); err != nil {
		return nil, nil, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	hlen := binary.LittleEndian.Uint64(lenb[:])
	if hlen > MaxHeaderBytes || hlen > uint64(fileSize-8) {
		return nil, nil, fmt.Errorf("%s: header length %d exceeds the file (%d bytes) or the %d-byte limit", name, hlen, fileSize, MaxHeaderBytes)
	}
	hb := make([]byte, hlen)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, nil, fmt.Errorf("%s: reading header: %w", name, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, nil, fmt.Errorf("%s: header is not a JSON object: %w", name, err)
	}
	dataStart := int64(8 + hlen)
	dataLen := fileSize - dataStart
	meta := map[string]string{}
	var tensors []*Tensor
	for key, msg := range raw {
		if key == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: __metadata__ is not a string map: %w", name, err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: bad header entry: %w", name, key, err)
		}
		dt := DType(e.DType)
		if dt.Size() == 0 {
			return nil, nil, fmt.Errorf("%s: tensor %s: unsupported dtype %q", name, key, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, nil, fmt.Errorf("%s: tensor %s: data_offsets must be [begin, end]", name, key)
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b || en > dataLen {
			return nil, nil, fmt.Errorf("%s: tensor %s: data_offsets [%d, %d] outside the %d-byte data section", name, key, b, en, dataLen)
		}
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || d > 1<<40 {
				return nil, nil, fmt.Errorf("%s: tensor %s: shape %v has an invalid dimension", name, key, e.Shape)
			}
			shape[i] = int(d)
		}
		n, err := numElements(shape)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: %w", name, key, err)
		}
		if n > (en-b)/int64(dt.Size())+1 || n*int64(dt.Size()) != en-b {
			return nil, nil, fmt.Errorf("%s: tensor %s: shape %v of %s needs %d bytes but data_offsets give %d", name, key, shape, dt, n*int64(dt.Size()), en-b)
		}
		tensors = append(tensors, &Tensor{Name: key, DType: dt, Shape: shape, src: r, off: dataStart + b, size: en - b, file: name})
	}
	sort.Slice(tensors, func(i, j int) bool {
		if tensors[i].off != tensors[j].off {
			return tensors[i].off < tensors[j].off
		}
		return tensors[i].Name < tensors[j].Name
	})
	for i := 1; i < len(tensors); i++ {
		p, t := tensors[i-1], tensors[i]
		if t.off < p.off+p.size {
			return nil, nil, fmt.Errorf("%s: tensor %s: data overlaps tensor %s", name, t.Name, p.Name)
		}
	}
	return meta, tensors, nil
}

var errTooLarge = errors.New("shape has too many elements")

func numElements(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d != 0 && n > (1<<50)/int64(d) {
			return 0, errTooLarge
		}
		n *= int64(d)
	}
	return n, nil
}
