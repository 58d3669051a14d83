package gpu

import "fmt"

const residualAddWG = 256

// ResidualAdd records x += y (elementwise) on r. x and y are F32 buffers with the same
// number of elements (any shape; typically [rows, H] row-major). Errors: dtype or length
// mismatch, x and y being the same buffer, or any Dispatch error.
func ResidualAdd(r *Recorder, x, y *Buffer) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := x.usable(); err != nil {
		return fmt.Errorf("gpu: ResidualAdd: x: %w", err)
	}
	if err := y.usable(); err != nil {
		return fmt.Errorf("gpu: ResidualAdd: y: %w", err)
	}
	if x.dtype != F32 || y.dtype != F32 {
		return fmt.Errorf("gpu: ResidualAdd: x %s and y %s must be f32", x, y)
	}
	if x.numel != y.numel {
		return fmt.Errorf("gpu: ResidualAdd: x %s and y %s differ in length", x, y)
	}
	if x == y {
		return fmt.Errorf("gpu: ResidualAdd: x and y are the same buffer %q", x.label)
	}
	if err := r.dispatch1D(KernelSpec{
		Name: "ResidualAdd", File: "residual_add.wgsl",
		Params:   struct{ WG int }{residualAddWG},
		Bindings: []Access{ReadWrite, Read}, Uniforms: 1,
	}, (x.numel+residualAddWG-1)/residualAddWG, []uint32{uint32(x.numel)}, Whole(x), Whole(y)); err != nil {
		return err
	}
	r.Cost(0, 12*float64(x.numel)) // x read and written, y read
	return nil
}
