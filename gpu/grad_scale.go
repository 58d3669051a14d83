package gpu

import "fmt"

// GradScale records g ← s·g elementwise for the F32 buffer g (any shape), s rounded to f32:
// gradient-norm clipping multiplies every gradient by min(1, maxNorm/‖g‖). Errors: dtype,
// an empty g, or s not finite in f32.
func GradScale(r *Recorder, g *Buffer, s float64) error {
	const op = "GradScale"
	if err := need(op, "g", g, -1, F32); err != nil {
		return err
	}
	if err := positive(op, "len(g)", g.numel); err != nil {
		return err
	}
	if !(s >= -maxF32 && s <= maxF32) {
		return fmt.Errorf("gpu: %s: s = %g must be finite in f32", op, s)
	}
	return r.dispatch1D(KernelSpec{Name: op, File: "grad_scale.wgsl", Params: struct{ WG int }{gradWG},
		Bindings: []Access{ReadWrite}, Uniforms: 2}, (g.numel+gradWG-1)/gradWG, []uint32{uint32(g.numel), f32bits(s)}, Whole(g))
}
