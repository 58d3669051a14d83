package gpu

import "fmt"

const splitQueryGateWG = 256

// splitQueryGateParams are split_query_gate.wgsl's template parameters (Backward: the
// adjoint's scatter).
type splitQueryGateParams struct {
	Backward bool
	WG       int
}

// SplitQueryGate records the split of a Qwen3.5 gated-attention q_proj output into the query
// and the output gate (host.SplitQueryGate): per token and head, qg holds first headDim query
// values and then headDim gate values (interleaved per head, not the two halves of the row).
//
// qg is F32 [rows, heads, 2·headDim]; q and gate are F32 [rows, heads, headDim], all row-major
// and distinct. A pure copy (exact). Errors: non-positive sizes, dtype or length mismatches,
// aliasing, or any Dispatch error.
func SplitQueryGate(r *Recorder, qg, q, gate *Buffer, rows, heads, headDim int) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "SplitQueryGate"
	if err := positive(op, "rows, heads, headDim", rows, heads, headDim); err != nil {
		return err
	}
	n := rows * heads * headDim
	if 2*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·heads·2·headDim = %d exceeds %d", op, 2*n, maxU32Elems)
	}
	if err := need(op, "qg", qg, 2*n, F32); err != nil {
		return err
	}
	if err := need(op, "q", q, n, F32); err != nil {
		return err
	}
	if err := need(op, "gate", gate, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"qg": qg, "q": q, "gate": gate}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "split_query_gate.wgsl", Params: splitQueryGateParams{WG: splitQueryGateWG},
		Bindings: []Access{Read, ReadWrite, ReadWrite}, Uniforms: 2,
	}, (n+splitQueryGateWG-1)/splitQueryGateWG, []uint32{uint32(n), uint32(headDim)}, Whole(qg), Whole(q), Whole(gate))
}
