package host

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/cmf"
)

// FP8E4M3 returns the value of the float8_e4m3fn code c in float64, from the format's
// definition (OCP 8-bit floating point, E4M3; PyTorch's float8_e4m3fn): sign bit 7,
// exponent bits 6–3 with bias 7, mantissa bits 2–0; exponent 0 is subnormal, m·2⁻⁹;
// otherwise (1 + m/8)·2^(e−7); no infinities; 0x7F and 0xFF are NaN; largest ±448.
func FP8E4M3(c byte) float64 {
	e, m := int(c>>3)&0xF, float64(c&7)
	var v float64
	switch {
	case e == 0xF && m == 7:
		return math.NaN()
	case e == 0:
		v = m * math.Pow(2, -9)
	default:
		v = (1 + m/8) * math.Pow(2, float64(e-7))
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

// QuantWeight is an 8-bit quantized weight W [Out, In] (cmf.Quant): Codes one byte per
// weight, row-major (float8_e4m3fn for cmf.QuantFP8, int8 for cmf.QuantQ8) and Scales
// [ceil(Out/Block[0]), ceil(In/Block[1])] row-major: FP8's weight_scale_inv per block, q8's
// scale per row and group.
type QuantWeight struct {
	Scheme  cmf.QuantScheme
	Codes   []byte
	Scales  []float64
	Out, In int
	Block   [2]int
}

// check validates the sizes. Errors name the op.
func (w QuantWeight) check(op string) error {
	if w.Scheme != cmf.QuantFP8 && w.Scheme != cmf.QuantQ8 {
		return fmt.Errorf("host.%s: unknown scheme %q", op, w.Scheme)
	}
	if w.Out <= 0 || w.In <= 0 || w.Block[0] <= 0 || w.Block[1] <= 0 {
		return fmt.Errorf("host.%s: sizes out = %d, in = %d, block %v must be positive", op, w.Out, w.In, w.Block)
	}
	if len(w.Codes) != w.Out*w.In {
		return fmt.Errorf("host.%s: %d codes, want out·in = %d·%d", op, len(w.Codes), w.Out, w.In)
	}
	br, bc := (w.Out+w.Block[0]-1)/w.Block[0], (w.In+w.Block[1]-1)/w.Block[1]
	if len(w.Scales) != br*bc {
		return fmt.Errorf("host.%s: %d scales, want ceil(out/%d)·ceil(in/%d) = %d·%d", op, len(w.Scales), w.Block[0], w.Block[1], br, bc)
	}
	return nil
}

// Dequantize returns W [Out, In] row-major in float64: W[i, j] = value(code[i, j]) ·
// Scales[i/Block[0], j/Block[1]], the code's value being FP8E4M3 (cmf.QuantFP8, the rule of
// the public FP8 checkpoints: weight_scale_inv multiplies) or the int8 itself (cmf.QuantQ8).
// Products are exact in float64. An FP8 NaN code gives NaN. Errors: unknown scheme, sizes
// that disagree.
func Dequantize(w QuantWeight) ([]float64, error) {
	if err := w.check("Dequantize"); err != nil {
		return nil, err
	}
	sc := (w.In + w.Block[1] - 1) / w.Block[1]
	v := make([]float64, w.Out*w.In)
	for i := range w.Out {
		for j := range w.In {
			c := w.Codes[i*w.In+j]
			x := float64(int8(c))
			if w.Scheme == cmf.QuantFP8 {
				x = FP8E4M3(c)
			}
			v[i*w.In+j] = x * w.Scales[(i/w.Block[0])*sc+j/w.Block[1]]
		}
	}
	return v, nil
}

// LinearQuant is the reference of gpu.LinearQuant: y = x·Wᵀ [rows, Out] for x [rows, In]
// and W the dequantized weight (Dequantize), in float64. Errors: Dequantize's, and
// len(x) ≠ rows·In.
func LinearQuant(x []float64, rows int, w QuantWeight) ([]float64, error) {
	W, err := Dequantize(w)
	if err != nil {
		return nil, err
	}
	if rows <= 0 || len(x) != rows*w.In {
		return nil, fmt.Errorf("host.LinearQuant: x has %d values, want rows·in = %d·%d", len(x), rows, w.In)
	}
	return gemmXWt(x, rows, w.In, W, w.Out), nil
}

// QuantWeightOf reads the quantized tensor t (t.Quant not nil) into a QuantWeight: its codes
// and its scales in float64. Errors name the tensor (cmf.Tensor.QuantCodes, QuantScales).
func QuantWeightOf(t *cmf.Tensor) (QuantWeight, error) {
	if t.Quant == nil || len(t.Shape) != 2 {
		return QuantWeight{}, fmt.Errorf("%s: dtype %s %v is not a quantized weight", t.Where(), t.DType, t.Shape)
	}
	codes, err := t.QuantCodes()
	if err != nil {
		return QuantWeight{}, err
	}
	s, err := t.QuantScales()
	if err != nil {
		return QuantWeight{}, err
	}
	scales := make([]float64, len(s))
	for i, x := range s {
		scales[i] = float64(x)
	}
	return QuantWeight{Scheme: t.Quant.Scheme, Codes: codes, Scales: scales, Out: t.Shape[0], In: t.Shape[1], Block: t.Quant.Block}, nil
}
