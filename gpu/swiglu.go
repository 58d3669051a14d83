package gpu

const swigluWG = 256

// SwiGLU records y = silu(gate) ⊙ up elementwise (silu(g) = g·sigmoid(g)). gate, up and y
// are F32 buffers with the same number of elements (typically [rows, intermediate]);
// y must be a third buffer. Errors: dtype, length or aliasing mistakes.
func SwiGLU(r *Recorder, gate, up, y *Buffer) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "SwiGLU"
	if err := need(op, "gate", gate, -1, F32); err != nil {
		return err
	}
	n := gate.numel
	if err := need(op, "up", up, n, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"gate": gate, "up": up, "y": y}); err != nil {
		return err
	}
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "swiglu.wgsl", Params: struct{ WG int }{swigluWG},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 1,
	}, (n+swigluWG-1)/swigluWG, []uint32{uint32(n)}, Whole(gate), Whole(up), Whole(y)); err != nil {
		return err
	}
	r.Cost(0, 12*float64(n)) // gate, up read, y written
	return nil
}
