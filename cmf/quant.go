package cmf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
)

// QuantScheme names how an 8-bit weight matrix W [out, in] is stored (DESIGN.md §4,
// "Quantized weights"): its codes, one byte per weight in W's row-major order, and one
// scale per block of Quant.Block[0] rows × Quant.Block[1] columns, W ≈ code value × scale.
type QuantScheme string

const (
	// QuantFP8 is HF's block-wise FP8 (transformers' FineGrainedFP8, quant_method "fp8"):
	// float8_e4m3fn codes (dtype F8E4M3; FP8E4M3Value) and a weight_scale_inv per block of
	// weight_block_size (Qwen's checkpoints: [128, 128]) in F32, BF16 or F16, as the
	// checkpoint stores it. W[i, j] = FP8E4M3Value(code) · weight_scale_inv[i/br, j/bc].
	QuantFP8 QuantScheme = "fp8"
	// QuantQ8 is nvg's int8 form (QuantizeQ8): int8 codes in [−127, 127] (dtype I8) and an
	// f16 scale per row and group of QuantQ8Group consecutive inputs (block [1, 128]),
	// symmetric: W[i, j] = code · scale[i, j/128], exact in float32.
	QuantQ8 QuantScheme = "q8"
)

// QuantQ8Group is the q8 group: the inputs of one output row that share a scale. 128 keeps
// a scale's reach to one FP8 block's width (so the GPU GEMM loads both forms alike), costs
// 16 bits per 128 weights (8.125 bits per weight in all) and, unlike a scale per row, lets
// an outlier input column coarsen only its own group (DESIGN.md §4).
const QuantQ8Group = 128

// DefaultFP8Block is the weight_block_size of the public FP8 checkpoints (Qwen, DeepSeek),
// which QuantizeModel uses for QuantFP8.
var DefaultFP8Block = [2]int{128, 128}

// Quant describes a quantized weight: its scheme, the block of weights one scale covers
// ([rows, columns]: QuantFP8 the checkpoint's weight_block_size, QuantQ8 [1, QuantQ8Group]),
// and the scales, a tensor of shape [ceil(out/Block[0]), ceil(in/Block[1])] named
// ScaleName(Scheme, weight name) whose last row and column of blocks are ragged when a
// dimension is not a multiple of the block.
type Quant struct {
	Scheme QuantScheme
	Block  [2]int
	Scale  *Tensor

	scaleName string // the CMF reader's "scale" entry, until attachScales resolves it
}

// CodeDType is the dtype of the scheme's codes: F8E4M3 for QuantFP8, I8 for QuantQ8, ""
// for an unknown scheme.
func (s QuantScheme) CodeDType() DType {
	switch s {
	case QuantFP8:
		return F8E4M3
	case QuantQ8:
		return I8
	}
	return ""
}

// ScaleName is the name under which a weight's scales are stored: HF's
// "<weight>_scale_inv" for QuantFP8 (model.layers.0.mlp.down_proj.weight_scale_inv), and
// "<weight>_scale" for QuantQ8.
func ScaleName(s QuantScheme, weight string) string {
	if s == QuantFP8 {
		return weight + "_scale_inv"
	}
	return weight + "_scale"
}

// ScaleShape is the scale grid of an [out, in] weight with block [br, bc]:
// [ceil(out/br), ceil(in/bc)].
func ScaleShape(out, in int, block [2]int) []int {
	return []int{(out + block[0] - 1) / block[0], (in + block[1] - 1) / block[1]}
}

// scaleDTypes are the scale dtypes each scheme allows: FP8 checkpoints store
// weight_scale_inv in F32 (DeepSeek, transformers' quantizer) or BF16 and F16 (Qwen's).
var scaleDTypes = map[QuantScheme][]DType{QuantFP8: {F32, BF16, F16}, QuantQ8: {F16}}

// NewQuantTensor returns an in-memory quantized weight: name, scheme, shape [out, in], the
// out·in codes row-major (not copied) and the scales (not copied; its name must be
// ScaleName(scheme, name)). Errors: every inconsistency checkQuant finds, naming the tensor.
func NewQuantTensor(name string, scheme QuantScheme, shape []int, codes []byte, block [2]int, scale *Tensor) (*Tensor, error) {
	t, err := NewTensor(name, scheme.CodeDType(), shape, codes)
	if scheme.CodeDType() == "" {
		err = fmt.Errorf("tensor %s: unknown quantization scheme %q (nvg knows %q and %q)", name, scheme, QuantFP8, QuantQ8)
	}
	if err != nil {
		return nil, err
	}
	t.Quant = &Quant{Scheme: scheme, Block: block, Scale: scale}
	if err := checkQuant(t); err != nil {
		return nil, err
	}
	return t, nil
}

// checkQuant checks a quantized tensor against its description: a known scheme, shape
// [out, in] of positive sizes, the scheme's code dtype and out·in bytes, a positive block,
// and a scale tensor named ScaleName, of an allowed dtype and of shape ScaleShape. Errors
// name the file and tensor.
func checkQuant(t *Tensor) error { return checkQuantAt(t, t.Where()) }

// checkQuantAt is checkQuant with the weight named by where in errors.
func checkQuantAt(t *Tensor, where string) error {
	q := t.Quant
	want := q.Scheme.CodeDType()
	switch {
	case want == "":
		return fmt.Errorf("%s: unknown quantization scheme %q (nvg knows %q and %q)", where, q.Scheme, QuantFP8, QuantQ8)
	case len(t.Shape) != 2 || t.Shape[0] <= 0 || t.Shape[1] <= 0:
		return fmt.Errorf("%s: a %s weight needs a shape [out, in] of positive sizes, got %v", where, q.Scheme, t.Shape)
	case t.DType != want:
		return fmt.Errorf("%s: a %s weight stores %s codes, found %s", where, q.Scheme, want, t.DType)
	case t.size != int64(t.Shape[0])*int64(t.Shape[1]):
		return fmt.Errorf("%s: %d bytes of codes for shape %v", where, t.size, t.Shape)
	case q.Block[0] <= 0 || q.Block[1] <= 0:
		return fmt.Errorf("%s: %s block %v must be positive", where, q.Scheme, q.Block)
	case q.Scheme == QuantQ8 && q.Block[0] != 1:
		return fmt.Errorf("%s: a q8 block covers one row, got %v", where, q.Block)
	case q.Scale == nil:
		return fmt.Errorf("%s: %s weight without its scales %s", where, q.Scheme, ScaleName(q.Scheme, t.Name))
	}
	s := q.Scale
	if s.Name != ScaleName(q.Scheme, t.Name) {
		return fmt.Errorf("%s: its %s scales are named %s, want %s", where, q.Scheme, s.Name, ScaleName(q.Scheme, t.Name))
	}
	ok := false
	for _, d := range scaleDTypes[q.Scheme] {
		ok = ok || s.DType == d
	}
	if !ok {
		return fmt.Errorf("%s: %s scales of dtype %s, want one of %v", s.Where(), q.Scheme, s.DType, scaleDTypes[q.Scheme])
	}
	if ws := ScaleShape(t.Shape[0], t.Shape[1], q.Block); len(s.Shape) != 2 || s.Shape[0] != ws[0] || s.Shape[1] != ws[1] {
		return fmt.Errorf("%s: scales of shape %v, but weight %s %v in blocks of %v needs %v", s.Where(), s.Shape, t.Name, t.Shape, q.Block, ws)
	}
	return nil
}

// QuantBytes is the stored size of t with its scales: NumBytes plus, for a quantized
// tensor, its scale tensor's bytes.
func (t *Tensor) QuantBytes() int64 {
	if t.Quant == nil || t.Quant.Scale == nil {
		return t.size
	}
	return t.size + t.Quant.Scale.size
}

// readAt fills p with the stored bytes of t from byte offset off (in-memory or file-backed).
func (t *Tensor) readAt(p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > t.size {
		return fmt.Errorf("%s: bytes [%d, %d) outside its %d bytes", t.Where(), off, off+int64(len(p)), t.size)
	}
	if t.src == nil {
		copy(p, t.data[off:])
		return nil
	}
	if _, err := t.src.ReadAt(p, t.off+off); err != nil {
		return fmt.Errorf("%s: reading %d bytes at offset %d: %w", t.Where(), len(p), t.off+off, err)
	}
	return nil
}

// quantRows reads rows [r0, r1) of the quantized tensor t: their codes, and the scales of
// the block rows that hold them as float32 (exact from F32, BF16 or F16) with the first
// block row's index. Errors name the tensor: a read failure, a scale that is not finite.
func (t *Tensor) quantRows(r0, r1 int) (codes []byte, scales []float32, b0 int, err error) {
	in := t.Shape[1]
	q := t.Quant
	codes = make([]byte, (r1-r0)*in)
	if err := t.readAt(codes, int64(r0)*int64(in)); err != nil {
		return nil, nil, 0, err
	}
	b0, b1 := r0/q.Block[0], (r1-1)/q.Block[0]+1
	sc, esz := q.Scale.Shape[1], int64(q.Scale.DType.Size())
	raw := make([]byte, int64((b1-b0)*sc)*esz)
	if err := q.Scale.readAt(raw, int64(b0*sc)*esz); err != nil {
		return nil, nil, 0, err
	}
	if scales, err = q.scaleValues(raw, b0); err != nil {
		return nil, nil, 0, err
	}
	return codes, scales, b0, nil
}

// codeValue returns the value of code c of scheme s (before scaling): FP8E4M3Value, or the
// int8 as float32.
func codeValue(s QuantScheme, c byte) float32 {
	if s == QuantFP8 {
		return FP8E4M3Value(c)
	}
	return float32(int8(c))
}

// dequantRows calls f(i, j, code value, scale) for every weight of rows [r0, r1) of the
// quantized tensor t, row by row. Errors: quantRows's, and an FP8 NaN code (0x7F, 0xFF),
// naming the tensor and the element.
func (t *Tensor) dequantRows(r0, r1 int, f func(i, j int, v, s float32)) error {
	codes, scales, b0, err := t.quantRows(r0, r1)
	if err != nil {
		return err
	}
	q, in := t.Quant, t.Shape[1]
	sc := q.Scale.Shape[1]
	for i := r0; i < r1; i++ {
		srow := scales[(i/q.Block[0]-b0)*sc:]
		for j, c := range codes[(i-r0)*in : (i-r0+1)*in] {
			if q.Scheme == QuantFP8 && c&0x7F == 0x7F {
				return fmt.Errorf("%s: element [%d, %d] holds the FP8 NaN code %#02x", t.Where(), i, j, c)
			}
			f(i, j, codeValue(q.Scheme, c), srow[j/q.Block[1]])
		}
	}
	return nil
}

// dequantizeFloat64 is Float64 of a quantized tensor: code value × scale in float64 (exact:
// both factors are exact in float32).
func (t *Tensor) dequantizeFloat64() ([]float64, error) {
	if err := checkQuant(t); err != nil {
		return nil, err
	}
	out, in := t.Shape[0], t.Shape[1]
	v := make([]float64, out*in)
	err := t.dequantRows(0, out, func(i, j int, c, s float32) { v[i*in+j] = float64(c) * float64(s) })
	if err != nil {
		return nil, err
	}
	return v, nil
}

// checkQuantized checks that t is a consistent quantized tensor (checkQuant).
func (t *Tensor) checkQuantized() error {
	if t.Quant == nil {
		return fmt.Errorf("%s: dtype %s is not quantized", t.Where(), t.DType)
	}
	return checkQuant(t)
}

// QuantCodes returns the codes of a quantized tensor, [out·in] row-major, the bytes a GPU
// GEMM on 8-bit weights reads (gpu.LinearQuant: four per u32 word, little-endian). Errors,
// naming the tensor: t is not quantized or inconsistent (checkQuant), a read failure, an FP8
// NaN code (0x7F, 0xFF; its element).
func (t *Tensor) QuantCodes() ([]byte, error) {
	if err := t.checkQuantized(); err != nil {
		return nil, err
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	if t.Quant.Scheme == QuantFP8 {
		for e, c := range b {
			if c&0x7F == 0x7F {
				return nil, fmt.Errorf("%s: element [%d, %d] holds the FP8 NaN code %#02x", t.Where(), e/t.Shape[1], e%t.Shape[1], c)
			}
		}
	}
	return b, nil
}

// QuantScales returns the scales of a quantized tensor as float32 (exact from the stored F32,
// BF16 or F16), [ceil(out/br), ceil(in/bc)] row-major. Errors: as QuantCodes, and a scale
// that is not finite.
func (t *Tensor) QuantScales() ([]float32, error) {
	if err := t.checkQuantized(); err != nil {
		return nil, err
	}
	raw, err := t.Quant.Scale.Bytes()
	if err != nil {
		return nil, err
	}
	return t.Quant.scaleValues(raw, 0)
}

// scaleValues decodes raw scales (whole block rows from block row b0) to float32, exact
// from F32, BF16 or F16. Errors name the scale tensor: a scale that is not finite.
func (q *Quant) scaleValues(raw []byte, b0 int) ([]float32, error) {
	v, err := DecodeFloat64(q.Scale.DType, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.Scale.Where(), err)
	}
	sc := q.Scale.Shape[1]
	s := make([]float32, len(v))
	for i, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%s: scale [%d, %d] is %g (not finite)", q.Scale.Where(), b0+i/sc, i%sc, x)
		}
		s[i] = float32(x)
	}
	return s, nil
}

// Dequantized returns a dense view of t: t itself when it is not quantized, else a tensor of
// the same name and shape and dtype F32 whose elements are code value × scale rounded to
// float32 (one rounding, as transformers' Fp8Dequantize; exact for q8), computed when read
// (Bytes, WriteTo, Float64, Float32) a block of rows at a time from t's codes and scales, so
// the compressor, the host model and the dense GPU loaders read a quantized teacher as if it
// were dense. It reads t's file, which must stay open. Reading it fails, naming the tensor,
// where QuantCodes or QuantScales would (an FP8 NaN code, a non-finite scale, a read error).
func (t *Tensor) Dequantized() *Tensor {
	if t.Quant == nil {
		return t
	}
	out, in := t.Shape[0], t.Shape[1]
	return computedTensor(t.Name, F32, []int{out, in}, 4*int64(in), out, 1, t.file, func(r0, r1 int) ([]byte, error) {
		if err := checkQuant(t); err != nil {
			return nil, err
		}
		b := make([]byte, (r1-r0)*in*4)
		err := t.dequantRows(r0, r1, func(i, j int, c, s float32) {
			binary.LittleEndian.PutUint32(b[((i-r0)*in+j)*4:], math.Float32bits(c*s))
		})
		return b, err
	})
}

// Dequantized returns a view of m in which every quantized tensor is replaced by its dense
// F32 view (Tensor.Dequantized) and every other tensor is shared: what the compressor, the
// host model, `nvg eval` and `nvg trace` read. The view owns no files: keep m open while it
// is used, and close m, not the view.
func (m *Model) Dequantized() *Model {
	v := &Model{Config: m.Config, Tensors: make(map[string]*Tensor, len(m.Tensors)), Source: m.Source}
	for n, t := range m.Tensors {
		v.Tensors[n] = t.Dequantized()
	}
	return v
}

// QuantSummary describes the quantized tensors of a model that share a scheme, block and
// scale dtype (what `nvg info` prints).
type QuantSummary struct {
	Scheme     QuantScheme
	CodeDType  DType  // F8E4M3 or I8
	Block      [2]int // [rows, columns] of weights per scale
	ScaleDType DType
	Tensors    int   // how many weight matrices
	Params     int64 // their weights (Σ out·in)
	CodeBytes  int64 // one byte per weight
	ScaleBytes int64
}

// BitsPerWeight is the stored bits per weight, scales included: 8·(CodeBytes + ScaleBytes) /
// Params (8.125 for q8's f16 scale per 128 weights; 8 + 32/16384 for FP8 with f32 scales per
// 128×128 block).
func (s QuantSummary) BitsPerWeight() float64 {
	return 8 * float64(s.CodeBytes+s.ScaleBytes) / float64(s.Params)
}

// Quantization summarises m's quantized tensors, one QuantSummary per scheme, block and
// scale dtype, sorted by scheme then block; nil when none is quantized. It reads no data.
func (m *Model) Quantization() []QuantSummary {
	type key struct {
		s     QuantScheme
		block [2]int
		d     DType
	}
	by := map[key]*QuantSummary{}
	for _, t := range m.Tensors {
		q := t.Quant
		if q == nil || q.Scale == nil {
			continue
		}
		k := key{q.Scheme, q.Block, q.Scale.DType}
		s := by[k]
		if s == nil {
			s = &QuantSummary{Scheme: q.Scheme, CodeDType: t.DType, Block: q.Block, ScaleDType: q.Scale.DType}
			by[k] = s
		}
		s.Tensors++
		s.Params += int64(t.NumElements())
		s.CodeBytes += t.size
		s.ScaleBytes += q.Scale.size
	}
	out := make([]QuantSummary, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Scheme != b.Scheme {
			return a.Scheme < b.Scheme
		}
		if a.Block != b.Block {
			return a.Block[0] < b.Block[0] || a.Block[0] == b.Block[0] && a.Block[1] < b.Block[1]
		}
		return a.ScaleDType < b.ScaleDType
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// withScales returns ts with each quantized tensor's scales right after it (what a file
// stores).
func withScales(ts []*Tensor) []*Tensor {
	out := make([]*Tensor, 0, len(ts))
	for _, t := range ts {
		out = append(out, t)
		if t.Quant != nil && t.Quant.Scale != nil {
			out = append(out, t.Quant.Scale)
		}
	}
	return out
}

// quantMeta is the "cmf.tensors" entry of a quantized tensor (its safetensors entry is the
// plain F8_E4M3 or I8 [out, in] codes; the scales are a plain entry named in Scale).
func quantMeta(t *Tensor) cmfTensorMeta {
	q := t.Quant
	return cmfTensorMeta{DType: string(q.Scheme), Shape: []int64{int64(t.Shape[0]), int64(t.Shape[1])},
		Block: []int64{int64(q.Block[0]), int64(q.Block[1])}, Scale: q.Scale.Name}
}

// applyQuantMeta marks t as the quantized tensor a "cmf.tensors" entry e describes (its
// scales are attached later by attachScales, since a sharded model may store them in
// another shard). Errors name the file and tensor.
func applyQuantMeta(file string, t *Tensor, e cmfTensorMeta) error {
	s := QuantScheme(e.DType)
	if len(e.Shape) != 2 || len(t.Shape) != 2 || int64(t.Shape[0]) != e.Shape[0] || int64(t.Shape[1]) != e.Shape[1] {
		return fmt.Errorf("%s: tensor %s: %s shape %v disagrees with its stored shape %v", file, t.Name, MetaCMFTensors, e.Shape, t.Shape)
	}
	if len(e.Block) != 2 || e.Block[0] <= 0 || e.Block[1] <= 0 || e.Block[0] > maxDim || e.Block[1] > maxDim {
		return fmt.Errorf("%s: tensor %s: %s block %v, want [rows, columns] of positive sizes", file, t.Name, MetaCMFTensors, e.Block)
	}
	if e.Scale == "" {
		return fmt.Errorf("%s: tensor %s: %s entry names no scale tensor", file, t.Name, MetaCMFTensors)
	}
	t.Quant = &Quant{Scheme: s, Block: [2]int{int(e.Block[0]), int(e.Block[1])}, scaleName: e.Scale}
	return nil
}

// attachScales gives every quantized tensor of ts that a CMF file described its scale
// tensor, checks it (checkQuant), and returns ts without the scale tensors. Errors name the
// file and tensor: a scale tensor missing, quantized itself, or claimed by two weights.
func attachScales(file string, ts []*Tensor) ([]*Tensor, error) {
	byName := make(map[string]*Tensor, len(ts))
	for _, t := range ts {
		byName[t.Name] = t
	}
	used := map[*Tensor]string{}
	for _, t := range ts {
		if t.Quant == nil || t.Quant.Scale != nil {
			continue
		}
		name := t.Quant.scaleName
		s, ok := byName[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: tensor %s: its scale tensor %s is not in the model", file, t.Name, name)
		case s.Quant != nil || s.DType == BLR:
			return nil, fmt.Errorf("%s: tensor %s: its scale tensor %s is %s, not a plain float tensor", file, t.Name, name, s.DType)
		case used[s] != "":
			return nil, fmt.Errorf("%s: tensor %s: its scale tensor %s is also tensor %s's", file, t.Name, name, used[s])
		}
		used[s] = t.Name
		t.Quant.Scale = s
		if err := checkQuant(t); err != nil {
			return nil, err
		}
	}
	if len(used) == 0 {
		return ts, nil
	}
	out := ts[:0:0]
	for _, t := range ts {
		if used[t] == "" {
			out = append(out, t)
		}
	}
	return out, nil
}

// computedTensor returns a tensor of the given name, dtype and shape whose bytes (rows
// row-major rows of rowBytes each) are computed when read: compute(r0, r1) returns the bytes
// of rows [r0, r1), r0 a multiple of block (rows are computed in blocks: an FP8 quantizer's
// scales depend on 128 rows at once). file names the source in errors.
func computedTensor(name string, d DType, shape []int, rowBytes int64, rows, block int, file string, compute func(r0, r1 int) ([]byte, error)) *Tensor {
	rr := &rowsReader{rowBytes: rowBytes, rows: rows, block: block, compute: compute}
	return &Tensor{Name: name, DType: d, Shape: append([]int(nil), shape...), src: rr, size: rowBytes * int64(rows), file: file}
}

// rowsReader is the io.ReaderAt of a computedTensor. It computes at least rowsChunkBytes of
// rows at a time and keeps the last chunk, so the small sequential reads of a WriteTo
// compute every row once.
type rowsReader struct {
	rowBytes    int64
	rows, block int
	compute     func(r0, r1 int) ([]byte, error)

	mu     sync.Mutex
	c0, c1 int // the cached rows
	cache  []byte
}

// rowsChunkBytes is the least a rowsReader computes at once.
const rowsChunkBytes = 1 << 20

func (r *rowsReader) ReadAt(p []byte, off int64) (int, error) {
	size := r.rowBytes * int64(r.rows)
	if off < 0 || off > size {
		return 0, fmt.Errorf("offset %d outside %d bytes", off, size)
	}
	end := min(off+int64(len(p)), size)
	n := 0
	for off < end {
		row := int(off / r.rowBytes)
		r.mu.Lock()
		if !(r.cache != nil && row >= r.c0 && row < r.c1) {
			r0 := row / r.block * r.block
			want := max(int((end-1)/r.rowBytes)+1, r0+int(rowsChunkBytes/r.rowBytes))
			r1 := min(r.rows, (want+r.block-1)/r.block*r.block)
			b, err := r.compute(r0, r1)
			if err != nil {
				r.mu.Unlock()
				return n, err
			}
			r.c0, r.c1, r.cache = r0, r1, b
		}
		k := copy(p[n:end-off+int64(n)], r.cache[off-int64(r.c0)*r.rowBytes:])
		r.mu.Unlock()
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
