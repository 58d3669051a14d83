package host

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/cmf"
)

// Linear is a projection y = x·Wᵀ of the model (no bias), whatever its storage: Dense for
// full-precision weights, a BLR linear (host/blr.go) for binary-low-rank ones.
//
// Apply takes x [rows, In()] row-major and returns a fresh y [rows, Out()] row-major.
// len(x) must equal rows·In(); the Net checks every size before calling Apply, and an
// implementation may panic, with a message naming both sizes, on a mismatch (a programming
// error, not bad user input).
type Linear interface {
	Apply(x []float64, rows int) []float64
	In() int  // input features n
	Out() int // output features m
}

// Dense is a full-precision Linear: W [out, in] row-major float64 (the PyTorch weight
// layout), applied with gonum blas64 Dgemm.
type Dense struct {
	W       []float64 // [out, in] row-major
	in, out int
}

// NewDense wraps w [out, in] row-major (not copied). Errors: non-positive sizes or
// len(w) ≠ out·in.
func NewDense(w []float64, out, in int) (*Dense, error) {
	if out <= 0 || in <= 0 {
		return nil, fmt.Errorf("host.NewDense: sizes out = %d, in = %d must be positive", out, in)
	}
	if len(w) != out*in {
		return nil, fmt.Errorf("host.NewDense: w has %d values, want out·in = %d·%d = %d", len(w), out, in, out*in)
	}
	return &Dense{W: w, in: in, out: out}, nil
}

// Apply returns x·Wᵀ, [rows, Out()], for x [rows, In()]. It panics when len(x) ≠ rows·In()
// (see Linear).
func (d *Dense) Apply(x []float64, rows int) []float64 {
	if rows <= 0 || len(x) != rows*d.in {
		panic(fmt.Sprintf("host.Dense.Apply: x has %d values, want rows·in = %d·%d", len(x), rows, d.in))
	}
	return gemmXWt(x, rows, d.in, d.W, d.out)
}

// In is the number of input features.
func (d *Dense) In() int { return d.in }

// Out is the number of output features.
func (d *Dense) Out() int { return d.out }

// linearFromTensor converts a 2-D weight tensor [out, in] into a Linear: F32/F16/BF16/F64
// become a Dense in float64; a quantized weight (FP8, q8) a Dense of its float64
// dequantization (Dequantize); BLR becomes a BLRLinear (NewBLRLinear).
// Errors name the tensor.
func linearFromTensor(t *cmf.Tensor) (Linear, error) {
	if len(t.Shape) != 2 || t.Shape[0] <= 0 || t.Shape[1] <= 0 {
		return nil, fmt.Errorf("tensor %s: shape %v is not a 2-D weight [out, in]", t.Name, t.Shape)
	}
	switch {
	case t.DType == cmf.BLR:
		return NewBLRLinear(t)
	case t.DType.Float() || t.Quant != nil:
		w, err := denseWeight(t)
		if err != nil {
			return nil, err
		}
		for i, x := range w {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("%s: element %d is %g (not finite)", t.Where(), i, x)
			}
		}
		d, err := NewDense(w, t.Shape[0], t.Shape[1])
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("tensor %s: dtype %s cannot be a linear weight", t.Name, t.DType)
}

// denseWeight returns the float64 values of a dense or quantized weight tensor.
func denseWeight(t *cmf.Tensor) ([]float64, error) {
	if t.Quant == nil {
		return t.Float64()
	}
	q, err := QuantWeightOf(t)
	if err != nil {
		return nil, err
	}
	return Dequantize(q)
}
