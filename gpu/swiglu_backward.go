package gpu

// SwiGLUBackward records the backward of SwiGLU (y = silu(gate) ⊙ up) for the output
// gradient dy: dgate = dy ⊙ up ⊙ σ(gate)·(1 + gate·(1 − σ(gate))) and dup = dy ⊙ silu(gate)
// (host.SwiGLUBackward). gate, up, dy, dgate and dup are F32 buffers with one number of
// elements (typically [rows, intermediate], row-major); dgate and dup are overwritten and
// must be distinct from the others. Errors: dtype, length or aliasing mistakes.
func SwiGLUBackward(r *Recorder, gate, up, dy, dgate, dup *Buffer) error {
	const op = "SwiGLUBackward"
	if err := need(op, "gate", gate, -1, F32); err != nil {
		return err
	}
	n := gate.numel
	for _, c := range []struct {
		name string
		b    *Buffer
	}{{"up", up}, {"dy", dy}, {"dgate", dgate}, {"dup", dup}} {
		if err := need(op, c.name, c.b, n, F32); err != nil {
			return err
		}
	}
	if err := distinct(op, map[string]*Buffer{"gate": gate, "up": up, "dy": dy, "dgate": dgate, "dup": dup}); err != nil {
		return err
	}
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "swiglu_backward.wgsl", Params: struct{ WG int }{swigluWG},
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 1,
	}, (n+swigluWG-1)/swigluWG, []uint32{uint32(n)}, Whole(gate), Whole(up), Whole(dy), Whole(dgate), Whole(dup)); err != nil {
		return err
	}
	r.Cost(0, 20*float64(n)) // gate, up, dy read, dgate, dup written
	return nil
}
