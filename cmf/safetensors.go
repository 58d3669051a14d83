package cmf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"unicode/utf8"

	"github.com/nvg-project/nvg/internal/jsondup"
)

// MaxHeaderBytes bounds the JSON header of a safetensors/CMF file (100 MiB, as the
// reference safetensors implementation does); a larger declared length is rejected before
// anything is allocated.
const MaxHeaderBytes = 100 << 20

// ErrNotSafetensors is wrapped by ParseSafetensorsHeader's error (and so Open's) for a file
// whose first 8 bytes cannot be a safetensors header length: they exceed MaxHeaderBytes, as
// the bytes of any text file (a README, a JSON file) do.
var ErrNotSafetensors = errors.New("not a safetensors or .cmf file")

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

	// Quant, when not nil, makes the tensor an 8-bit quantized weight [out, in] (dtype
	// F8E4M3 or I8) and holds its scales (quant.go). Readers attach it; NewQuantTensor and
	// the quantizers make such tensors.
	Quant *Quant
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

// NumElements is the product of the shape (1 for a scalar). For BLR it is m·n, the
// number of weights the payload stands for.
func (t *Tensor) NumElements() int {
	n, _ := numElements(t.Shape)
	return int(n)
}

// NumBytes is the stored size in bytes (for BLR, the payload length).
func (t *Tensor) NumBytes() int64 { return t.size }

// File is the path of the file a file-backed tensor reads from, "" for in-memory tensors.
func (t *Tensor) File() string { return t.file }

// Where is the prefix of errors about t: "FILE: tensor NAME", or "tensor NAME" for an
// in-memory tensor.
func (t *Tensor) Where() string {
	if t.file == "" {
		return "tensor " + t.Name
	}
	return t.file + ": tensor " + t.Name
}

// Bytes returns the stored bytes (a fresh copy read from the file for file-backed tensors;
// the held slice for in-memory ones — do not modify it). Errors name the file and tensor.
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

// WriteTo streams the stored bytes to w without holding a file-backed tensor in memory
// (it implements io.WriterTo). It fails, naming the file and tensor, when fewer than
// NumBytes bytes could be read or written.
func (t *Tensor) WriteTo(w io.Writer) (int64, error) {
	var n int64
	var err error
	if t.src == nil {
		var k int
		k, err = w.Write(t.data)
		n = int64(k)
	} else {
		n, err = io.Copy(w, io.NewSectionReader(t.src, t.off, t.size))
	}
	if err == nil && n != t.size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		src := t.file
		if src == "" {
			src = "memory"
		}
		return n, fmt.Errorf("%s: tensor %s: copied %d of %d bytes: %w", src, t.Name, n, t.size, err)
	}
	return n, nil
}

// Float64 returns the elements converted to float64, row-major in Shape order; a quantized
// tensor's are its dequantized values (code × scale, exact in float64: DequantizeFloat64).
// It fails, naming the tensor, for BLR and U8 (see DecodeFloat64).
func (t *Tensor) Float64() ([]float64, error) {
	if t.Quant != nil {
		return t.dequantizeFloat64()
	}
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

// OpenSafetensors opens a safetensors file and validates its header against the file
// (see ParseSafetensorsHeader). Tensor data are read lazily; Close the file when done.
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

// maxDim bounds one dimension of a shape read from a file.
const maxDim = 1 << 40

// ParseSafetensorsHeader reads and validates the header of a safetensors stream of
// fileSize bytes from r; name (the file path) is used in every error. Checks, as the
// reference implementation makes them: the u64 little-endian header length is within the
// file and MaxHeaderBytes; the header is one JSON object without duplicate keys; the
// optional "__metadata__" is a map of strings; every other key is a non-empty tensor name
// whose entry has a known dtype (F64, F32, F16, BF16, I64, I32, U8, F8_E4M3, I8), a shape of
// non-negative dims and data_offsets [begin, end] relative to the data section with
// end−begin == prod(shape)·dtype size; the entries, sorted by offset, tile the data section
// exactly (no overlap, no gap, nothing after the last). Errors name the file and, where
// there is one, the tensor. Nothing larger than the file is allocated. The returned
// tensors (sorted by data offset) read their data lazily from r.
func ParseSafetensorsHeader(r io.ReaderAt, fileSize int64, name string) (map[string]string, []*Tensor, error) {
	if fileSize < 8 {
		return nil, nil, fmt.Errorf("%s: %d bytes is too short for a safetensors header", name, fileSize)
	}
	var lenb [8]byte
	if _, err := r.ReadAt(lenb[:], 0); err != nil {
		return nil, nil, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	hlen := binary.LittleEndian.Uint64(lenb[:])
	if hlen > MaxHeaderBytes {
		return nil, nil, fmt.Errorf("%s: %w: its first 8 bytes, read as the little-endian header length a safetensors file starts with, say %d bytes, beyond the %d-byte limit (%s)",
			name, ErrNotSafetensors, hlen, MaxHeaderBytes, describeStart(r, fileSize))
	}
	if hlen > uint64(fileSize-8) {
		return nil, nil, fmt.Errorf("%s: header length %d exceeds the file (%d bytes): the file is truncated", name, hlen, fileSize)
	}
	if hlen < 2 {
		return nil, nil, fmt.Errorf("%s: header length %d is too short for a JSON object", name, hlen)
	}
	hb := make([]byte, hlen)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, nil, fmt.Errorf("%s: reading header: %w", name, err)
	}
	keys, raw, err := decodeObject(hb)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", name, err)
	}
	dataStart := int64(8 + hlen)
	dataLen := fileSize - dataStart
	meta := map[string]string{}
	tensors := make([]*Tensor, 0, len(keys))
	for _, key := range keys {
		msg := raw[key]
		if key == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: __metadata__ is not a map of strings: %w", name, err)
			}
			if meta == nil {
				meta = map[string]string{}
			}
			continue
		}
		if key == "" {
			return nil, nil, fmt.Errorf("%s: header has a tensor with an empty name", name)
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: bad header entry: %w", name, key, err)
		}
		dt := DType(e.DType)
		if dt.Size() == 0 {
			return nil, nil, fmt.Errorf("%s: tensor %s: unsupported dtype %q", name, key, e.DType)
		}
		if e.Shape == nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: no shape", name, key)
		}
		if len(e.DataOffsets) != 2 {
			return nil, nil, fmt.Errorf("%s: tensor %s: data_offsets must be [begin, end], got %v", name, key, e.DataOffsets)
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b || en > dataLen {
			return nil, nil, fmt.Errorf("%s: tensor %s: data_offsets [%d, %d] outside the %d-byte data section (file truncated or header corrupt)", name, key, b, en, dataLen)
		}
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || d > maxDim {
				return nil, nil, fmt.Errorf("%s: tensor %s: shape %v has an invalid dimension", name, key, e.Shape)
			}
			shape[i] = int(d)
		}
		n, err := numElements(shape)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: %w", name, key, err)
		}
		if n*int64(dt.Size()) != en-b {
			return nil, nil, fmt.Errorf("%s: tensor %s: shape %v of %s needs %d bytes but data_offsets [%d, %d] give %d", name, key, shape, dt, n*int64(dt.Size()), b, en, en-b)
		}
		tensors = append(tensors, &Tensor{Name: key, DType: dt, Shape: shape, src: r, off: dataStart + b, size: en - b, file: name})
	}
	sort.Slice(tensors, func(i, j int) bool {
		if tensors[i].off != tensors[j].off {
			return tensors[i].off < tensors[j].off
		}
		return tensors[i].size < tensors[j].size
	})
	end := dataStart
	prev := ""
	for _, t := range tensors {
		switch {
		case t.off < end:
			return nil, nil, fmt.Errorf("%s: tensor %s: data [%d, %d] overlaps tensor %s", name, t.Name, t.off-dataStart, t.off-dataStart+t.size, prev)
		case t.off > end && prev == "":
			return nil, nil, fmt.Errorf("%s: tensor %s: data begins at %d, leaving %d unused bytes at the start of the data section", name, t.Name, t.off-dataStart, t.off-dataStart)
		case t.off > end:
			return nil, nil, fmt.Errorf("%s: tensor %s: data begins at %d but tensor %s ends at %d (gap)", name, t.Name, t.off-dataStart, prev, end-dataStart)
		}
		end = t.off + t.size
		prev = t.Name
	}
	if end != fileSize {
		if prev == "" {
			return nil, nil, fmt.Errorf("%s: %d bytes of data but no tensors", name, fileSize-end)
		}
		return nil, nil, fmt.Errorf("%s: %d bytes after the last tensor %s (file has trailing data or a tensor is missing from the header)", name, fileSize-end, prev)
	}
	return meta, tensors, nil
}

// decodeObject decodes a JSON object into its keys (in file order) and raw values,
// rejecting a key named twice in any object of it (jsondup: a tensor entry's "dtype" given
// twice too) and trailing data.
func decodeObject(b []byte) ([]string, map[string]json.RawMessage, error) {
	if err := jsondup.Check(b); err != nil {
		var syn *json.SyntaxError
		if !errors.As(err, &syn) {
			return nil, nil, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("not a JSON object: %w", err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("not a JSON object: key %v", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("value of %q: %w", k, err)
		}
		vals[k] = v
		keys = append(keys, k)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("trailing data after the JSON object")
	}
	return keys, vals, nil
}

// describeStart says what a file that is not a safetensors file starts with: a quote of its
// first characters when they are text, else its first bytes in hex.
func describeStart(r io.ReaderAt, size int64) string {
	raw := make([]byte, min(size, 48))
	n, _ := r.ReadAt(raw, 0)
	raw = raw[:n]
	// A quote ends at a rune boundary, so a cut multi-byte character is not shown as bad text.
	b := raw
	for len(b) > len(raw)-utf8.UTFMax && len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	text := len(b) >= 8 && utf8.Valid(b)
	for _, c := range string(b) {
		if c == utf8.RuneError || c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			text = false
		}
	}
	if text {
		more := ""
		if int64(len(b)) < size {
			more = "…"
		}
		return fmt.Sprintf("it starts with text: %q%s", string(b), more)
	}
	return fmt.Sprintf("it starts with the bytes % x, or its first 8 bytes are damaged", raw[:min(len(raw), 8)])
}

func numElements(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d != 0 && n > (1<<50)/int64(d) {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n *= int64(d)
	}
	return n, nil
}
