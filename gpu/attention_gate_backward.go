package gpu

import "fmt"

// AttentionGateBackward records the backward of AttentionGate (y = o ⊙ σ(gate)) for the
// output gradient dy (host.AttentionGateBackward):
//
//	do = dy ⊙ σ(gate),  dgate = dy ⊙ o ⊙ σ(gate)·(1 − σ(gate)),
//
// with σ·(1 − σ) evaluated as e/(1+e)², e = exp(−|gate|) (no overflow, no cancellation).
// o, gate, dy, do and dgate are F32 buffers with one number of elements (in the model
// [rows, nh·headDim] row-major: Attention's out, SplitQueryGate's gate and the gradient of
// the gated output); do and dgate are overwritten and must be distinct from each other and
// from the inputs. f32 throughout. Errors: dtype, length or aliasing mistakes, or any
// Dispatch error.
func AttentionGateBackward(r *Recorder, o, gate, dy, do, dgate *Buffer) error {
	const op = "AttentionGateBackward"
	if err := need(op, "o", o, -1, F32); err != nil {
		return err
	}
	n := o.numel
	for _, c := range []struct {
		name string
		b    *Buffer
	}{{"gate", gate}, {"dy", dy}, {"do", do}, {"dgate", dgate}} {
		if err := need(op, c.name, c.b, n, F32); err != nil {
			return err
		}
	}
	if n > maxU32Elems {
		return fmt.Errorf("gpu: %s: %d elements exceed %d", op, n, maxU32Elems)
	}
	if err := distinct(op, map[string]*Buffer{"o": o, "gate": gate, "dy": dy, "do": do, "dgate": dgate}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "attention_gate_backward.wgsl", Params: struct{ WG int }{attentionGateWG},
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 1,
	}, (n+attentionGateWG-1)/attentionGateWG, []uint32{uint32(n)}, Whole(o), Whole(gate), Whole(dy), Whole(do), Whole(dgate))
}
