package gpu

import (
	"fmt"
	"math"
)

const l2NormWG = 64

// checkL2Norm errors when rows or n is not positive, scale is not finite in f32 or rows·n
// exceeds 2³¹ (L2Norm, L2NormBackward).
func checkL2Norm(op string, rows, n int, scale float64) error {
	if err := positive(op, "rows, n", rows, n); err != nil {
		return err
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) || math.Abs(scale) > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: scale = %g must be finite in f32", op, scale)
	}
	if rows*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·n = %d exceeds %d", op, rows*n, maxU32Elems)
	}
	return nil
}

// L2Norm records y[r, :] = scale · x[r, :] · rsqrt(Σ x[r, :]² + 1e−6) for each of rows rows
// of n values, in f32 (host.L2Norm, HF `l2norm`): the GatedDeltaNet normalises keys per head
// with scale 1 and queries with scale dk^−½.
//
// x and y are F32 [rows, n] row-major (rows = tokens·heads), distinct buffers.
// Errors: non-positive sizes, scale not finite, dtype or length mismatches, aliasing, or
// any Dispatch error.
func L2Norm(r *Recorder, x, y *Buffer, rows, n int, scale float64) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "L2Norm"
	if err := checkL2Norm(op, rows, n, scale); err != nil {
		return err
	}
	if err := need(op, "x", x, rows*n, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, rows*n, F32); err != nil {
		return err
	}
	if x == y {
		return fmt.Errorf("gpu: %s: x and y are the same buffer %q", op, x.label)
	}
	form := r.d.rowForm(l2NormWG, n)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "l2_norm.wgsl", Params: form,
		Bindings: []Access{Read, ReadWrite}, Uniforms: 3,
	}, form.groups(rows), []uint32{uint32(rows), uint32(n), math.Float32bits(float32(scale))}, Whole(x), Whole(y)); err != nil {
		return err
	}
	r.Cost(0, 8*float64(rows)*float64(n)) // x read, y written
	return nil
}
