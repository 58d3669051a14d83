package gpu

import (
	"math"
)

// L2NormBackward records the backward of L2Norm (same x, rows, n, scale) for the output
// gradient dy (host.L2NormBackward): with f = (Σx² + ε)^−½ per row, ε = 1e−6,
//
//	dx = scale·(f·dy − f³·x·(x·dy)),
//
// the exact Jacobian including ε, so it stays finite and correct at tiny and zero norms
// (f ≤ 1000). x, dy and dx are F32 [rows, n] row-major (rows = tokens·heads, n = dk); dx
// is overwritten and must be distinct from x and dy. One workgroup per row, fixed-order
// tree reductions (deterministic), f32 throughout. Errors: non-positive sizes, scale not
// finite in f32, dtype or length mismatches, aliasing, or any Dispatch error.
func L2NormBackward(r *Recorder, x, dy, dx *Buffer, rows, n int, scale float64) error {
	const op = "L2NormBackward"
	if err := checkL2Norm(op, rows, n, scale); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		b    *Buffer
	}{{"x", x}, {"dy", dy}, {"dx", dx}} {
		if err := need(op, c.name, c.b, rows*n, F32); err != nil {
			return err
		}
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "dy": dy, "dx": dx}); err != nil {
		return err
	}
	form := r.d.rowForm(l2NormWG, n)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "l2_norm_backward.wgsl", Params: form,
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3,
	}, form.groups(rows), []uint32{uint32(rows), uint32(n), math.Float32bits(float32(scale))}, Whole(x), Whole(dy), Whole(dx)); err != nil {
		return err
	}
	r.Cost(0, 12*float64(rows)*float64(n)) // x, dy read, dx written
	return nil
}
