package gpu

import "fmt"

const transposeWG = 256

// Transpose records y = xᵀ: y[j, t] = x[t, j] for the row-major F32 matrices x [rows, cols]
// and y [cols, rows] (transpose.wgsl, one invocation per element of y). A pure copy (exact);
// Gram uses it to put the tokens of an activation along the GEMM's depth. Host reference: the
// loop above (a copy has no arithmetic to compare). Errors: non-positive sizes, sizes beyond
// the 2³¹ index range, dtype or length mismatches, x and y the same buffer, or any Dispatch
// error.
func Transpose(r *Recorder, x, y *Buffer, rows, cols int) error {
	const op = "Transpose"
	if err := r.usable(); err != nil {
		return err
	}
	if err := positive(op, "rows, cols", rows, cols); err != nil {
		return err
	}
	if uint64(rows)*uint64(cols) > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·cols = %d·%d exceeds %d", op, rows, cols, maxU32Elems)
	}
	if err := need(op, "x", x, rows*cols, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, rows*cols, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "y": y}); err != nil {
		return err
	}
	return transpose(r, Whole(x), Whole(y), rows, cols)
}

// transpose records Transpose on bindings already checked (x's first rows·cols values).
func transpose(r *Recorder, x, y Binding, rows, cols int) error {
	total := rows * cols
	return r.dispatch1D(KernelSpec{Name: "Transpose", File: "transpose.wgsl", Params: struct{ WG int }{transposeWG},
		Bindings: []Access{Read, ReadWrite}, Uniforms: 3},
		(total+transposeWG-1)/transposeWG, []uint32{uint32(total), uint32(rows), uint32(cols)}, x, y)
}
