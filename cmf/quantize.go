package cmf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nvg-project/nvg/arch"
	"github.com/x448/float16"
)

// QuantizeModel returns a view of m with every decoder-layer projection (arch.Projection:
// the attention, GatedDeltaNet and MLP weights, in_proj_a/b included) quantized by scheme —
// QuantizeFP8 with DefaultFP8Block, or QuantizeQ8 — and every other tensor (embedding, head,
// norms, conv, A_log, dt_bias) shared with m. The quantized tensors are computed when read
// (WriteCMF streams them a block of rows at a time, so a 27B model never sits in memory);
// m must stay open while the view is read, and errors in the weights (a value that is not
// finite, a q8 scale beyond f16) surface then, naming the tensor. Errors now: an unknown
// scheme, a projection that is BLR or already quantized ("quantize from a bf16, f16 or f32
// checkpoint"), or one whose dtype is not a float.
func QuantizeModel(m *Model, scheme QuantScheme) (*Model, error) {
	proj := map[string]bool{}
	for _, L := range m.Config.Layout().Layers {
		for _, t := range L.Tensors() {
			if t.Role == arch.Projection {
				proj[t.Name] = true
			}
		}
	}
	out := &Model{Config: m.Config, Tensors: make(map[string]*Tensor, len(m.Tensors)), Source: m.Source}
	for _, n := range m.Names() {
		t := m.Tensors[n]
		if !proj[n] {
			out.Tensors[n] = t
			continue
		}
		var q *Tensor
		var err error
		switch scheme {
		case QuantFP8:
			q, err = QuantizeFP8(t, DefaultFP8Block)
		case QuantQ8:
			q, err = QuantizeQ8(t)
		default:
			err = fmt.Errorf("quantize: unknown scheme %q (nvg knows %q and %q)", scheme, QuantFP8, QuantQ8)
		}
		if err != nil {
			return nil, err
		}
		out.Tensors[n] = q
	}
	return out, nil
}

// checkQuantSource checks that t can be quantized: a 2-D float weight [out, in].
func checkQuantSource(t *Tensor) error {
	switch {
	case t.Quant != nil || t.DType == BLR:
		return fmt.Errorf("quantize %s: dtype %s: quantize from a bf16, f16 or f32 checkpoint", t.Where(), t.DType)
	case !t.DType.Float():
		return fmt.Errorf("quantize %s: dtype %s is not a float dtype", t.Where(), t.DType)
	case len(t.Shape) != 2 || t.Shape[0] <= 0 || t.Shape[1] <= 0:
		return fmt.Errorf("quantize %s: shape %v is not a weight [out, in]", t.Where(), t.Shape)
	}
	return nil
}

// sourceRows reads rows [r0, r1) of the float weight t [out, in] as float32 (F64 rounded to
// nearest; the others exactly). Errors name the tensor: a read error, a value that is not
// finite (its element).
func (t *Tensor) sourceRows(r0, r1 int) ([]float32, error) {
	in, esz := t.Shape[1], t.DType.Size()
	raw := make([]byte, (r1-r0)*in*esz)
	if err := t.readAt(raw, int64(r0*in*esz)); err != nil {
		return nil, err
	}
	v, err := DecodeFloat64(t.DType, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Where(), err)
	}
	w := make([]float32, len(v))
	for i, x := range v {
		w[i] = float32(x)
		if math.IsNaN(x) || math.IsInf(float64(w[i]), 0) {
			return nil, fmt.Errorf("quantize %s: element [%d, %d] is %g (not finite in float32)", t.Where(), r0+i/in, i%in, x)
		}
	}
	return w, nil
}

// QuantizeFP8 quantizes the float weight t [out, in] to block-wise FP8 with blocks of
// block[0] rows × block[1] columns, by the rule of transformers' Fp8Quantize (the public
// FP8 checkpoints'), in float32: per block, amax = max |w|, s = 448/amax (1 when amax = 0),
// code = FP8E4M3Code(clamp(w·s, −448, 448)), and weight_scale_inv = 1/s, stored F32.
// Dimensions that are not multiples of the block leave a ragged last block, whose amax is
// over the weights it holds. The result is computed when read (see QuantizeModel), 128 rows
// at a time; t must stay readable. Errors: t not a 2-D float weight, a non-positive block;
// when read, a value that is not finite or a block whose 448/amax overflows float32
// (amax < 1.3·10⁻³⁶), naming the tensor.
func QuantizeFP8(t *Tensor, block [2]int) (*Tensor, error) {
	if err := checkQuantSource(t); err != nil {
		return nil, err
	}
	if block[0] <= 0 || block[1] <= 0 {
		return nil, fmt.Errorf("quantize %s: FP8 block %v must be positive", t.Where(), block)
	}
	in := t.Shape[1]
	// blocks quantizes the block rows of rows [r0, r1) (r0 a multiple of block[0]).
	blocks := func(r0, r1 int) (codes []byte, inv []byte, err error) {
		w, err := t.sourceRows(r0, r1)
		if err != nil {
			return nil, nil, err
		}
		codes = make([]byte, len(w))
		for b0 := r0; b0 < r1; b0 += block[0] {
			b1 := min(b0+block[0], r1)
			for c0 := 0; c0 < in; c0 += block[1] {
				c1 := min(c0+block[1], in)
				var amax float32
				for i := b0; i < b1; i++ {
					for _, x := range w[(i-r0)*in+c0 : (i-r0)*in+c1] {
						amax = max(amax, float32(math.Abs(float64(x))))
					}
				}
				s := float32(1)
				if amax > 0 {
					s = FP8E4M3Max / amax
				}
				if math.IsInf(float64(s), 0) {
					return nil, nil, fmt.Errorf("quantize %s: block [%d, %d]: 448/amax overflows float32 (amax %g)", t.Where(), b0/block[0], c0/block[1], amax)
				}
				for i := b0; i < b1; i++ {
					for j := c0; j < c1; j++ {
						e := (i-r0)*in + j
						codes[e] = FP8E4M3Code(min(max(w[e]*s, -FP8E4M3Max), FP8E4M3Max))
					}
				}
				inv = binary.LittleEndian.AppendUint32(inv, math.Float32bits(1/s))
			}
		}
		return codes, inv, nil
	}
	return quantized(t, QuantFP8, block, F32, blocks), nil
}

// QuantizeQ8 quantizes the float weight t [out, in] to nvg's q8 (QuantQ8): per row and
// group of QuantQ8Group inputs (the last group ragged when in is not a multiple of 128),
// amax = max |w|, the scale s = the least f16 ≥ amax/127 (rounded up, so no weight clips),
// code = round(w/s) to nearest, ties to even, in [−127, 127]; an all-zero group gets s = 0
// and codes 0. Every dequantized weight code·s is exact in float32 and within s/2 of w.
// Computed when read, like QuantizeFP8. Errors: t not a 2-D float weight; when read, a value
// that is not finite or a group whose amax/127 exceeds f16's 65504, naming the tensor.
func QuantizeQ8(t *Tensor) (*Tensor, error) {
	if err := checkQuantSource(t); err != nil {
		return nil, err
	}
	out, in := t.Shape[0], t.Shape[1]
	block := [2]int{1, QuantQ8Group}
	ss := ScaleShape(out, in, block)
	groups := func(r0, r1 int) (codes []byte, scales []byte, err error) {
		w, err := t.sourceRows(r0, r1)
		if err != nil {
			return nil, nil, err
		}
		codes = make([]byte, len(w))
		scales = make([]byte, 0, 2*(r1-r0)*ss[1])
		for i := r0; i < r1; i++ {
			for c0 := 0; c0 < in; c0 += QuantQ8Group {
				row := w[(i-r0)*in+c0 : (i-r0)*in+min(c0+QuantQ8Group, in)]
				var amax float64
				for _, x := range row {
					amax = max(amax, math.Abs(float64(x)))
				}
				h, err := q8Scale(amax)
				if err != nil {
					return nil, nil, fmt.Errorf("quantize %s: row %d, group %d: %w", t.Where(), i, c0/QuantQ8Group, err)
				}
				scales = binary.LittleEndian.AppendUint16(scales, h.Bits())
				s := float64(h.Float32())
				for j, x := range row {
					if s > 0 {
						codes[(i-r0)*in+c0+j] = byte(int8(min(max(math.RoundToEven(float64(x)/s), -127), 127)))
					}
				}
			}
		}
		return codes, scales, nil
	}
	return quantized(t, QuantQ8, block, F16, groups), nil
}

// quantized returns t quantized by scheme, computed when read: compute(r0, r1), r0 a
// multiple of block[0], quantizes the weight rows [r0, r1) into their codes and the scales
// (bytes of scaleDType) of the block rows that hold them.
func quantized(t *Tensor, scheme QuantScheme, block [2]int, scaleDType DType, compute func(r0, r1 int) (codes, scales []byte, err error)) *Tensor {
	out, in := t.Shape[0], t.Shape[1]
	ss := ScaleShape(out, in, block)
	scale := computedTensor(ScaleName(scheme, t.Name), scaleDType, ss, int64(ss[1]*scaleDType.Size()), ss[0], 1, t.file, func(b0, b1 int) ([]byte, error) {
		_, s, err := compute(b0*block[0], min(b1*block[0], out))
		return s, err
	})
	codes := computedTensor(t.Name, scheme.CodeDType(), t.Shape, int64(in), out, block[0], t.file, func(r0, r1 int) ([]byte, error) {
		c, _, err := compute(r0, r1)
		return c, err
	})
	codes.Quant = &Quant{Scheme: scheme, Block: block, Scale: scale}
	return codes
}

// q8Scale returns the least f16 s ≥ amax/127 (0 for amax 0). Errors: s beyond f16's 65504.
func q8Scale(amax float64) (float16.Float16, error) {
	want := amax / 127
	h := float16.Fromfloat32(float32(want))
	if h.IsInf(0) || h.IsNaN() {
		return 0, fmt.Errorf("amax %g needs a scale %g beyond f16's 65504", amax, want)
	}
	// Positive f16 bit patterns are ordered like their values: step to the least one ≥ want
	// (float32 then f16 may round either way).
	for float64(h.Float32()) < want {
		h++
	}
	for h > 0 && float64((h-1).Float32()) >= want {
		h--
	}
	if h.IsInf(0) {
		return 0, fmt.Errorf("amax %g needs a scale %g beyond f16's 65504", amax, want)
	}
	return h, nil
}
