package gpu

const attentionGateWG = 256

// AttentionGate records y = o ⊙ sigmoid(gate) elementwise (host.AttentionGate), the output
// gate of Qwen3.5 gated attention, in f32. o, gate and y are F32 buffers with the same
// number of elements (in the model [rows, nh·headDim] row-major: Attention's out and
// SplitQueryGate's gate); y must be a third buffer. Errors: dtype, length or aliasing
// mistakes, or any Dispatch error.
func AttentionGate(r *Recorder, o, gate, y *Buffer) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "AttentionGate"
	if err := need(op, "o", o, -1, F32); err != nil {
		return err
	}
	n := o.numel
	if err := need(op, "gate", gate, n, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"o": o, "gate": gate, "y": y}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "attention_gate.wgsl", Params: struct{ WG int }{attentionGateWG},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 1,
	}, (n+attentionGateWG-1)/attentionGateWG, []uint32{uint32(n)}, Whole(o), Whole(gate), Whole(y))
}
