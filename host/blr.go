package host

import (
	"fmt"

	"github.com/nvg-project/nvg/cmf"
)

// BLRLinear is a Linear whose weight is binary low rank (DESIGN.md §4):
// y = Σ_p h_p ⊙ U_p(ℓ_p ⊙ V_p(g_p ⊙ x)) per row, computed in float64 by
// cmf.BLRWeight.Apply (two skinny products per path, W is never formed).
type BLRLinear struct {
	W *cmf.BLRWeight
}

// NewBLRLinear decodes a tensor of dtype BLR (logical shape [out, in]) into a BLRLinear.
// Errors, naming the tensor: a dtype other than BLR, a shape that is not [m, n], a payload
// DecodeBLR rejects, or a payload whose m×n disagrees with the shape.
func NewBLRLinear(t *cmf.Tensor) (Linear, error) {
	w, err := cmf.BLRFromTensor(t)
	if err != nil {
		return nil, err
	}
	return &BLRLinear{W: w}, nil
}

// Apply returns x·Ŵᵀ, [rows, Out()], for x [rows, In()] row-major. It panics with a message
// naming both sizes when len(x) ≠ rows·In() (see Linear).
func (b *BLRLinear) Apply(x []float64, rows int) []float64 {
	if rows <= 0 || len(x) != rows*b.W.N {
		panic(fmt.Sprintf("host.BLRLinear.Apply: x has %d values, want rows·in = %d·%d", len(x), rows, b.W.N))
	}
	return b.W.Apply(x, rows)
}

// In is the number of input features n.
func (b *BLRLinear) In() int { return b.W.N }

// Out is the number of output features m.
func (b *BLRLinear) Out() int { return b.W.M }
