package gpu

import "fmt"

// SplitQueryGateBackward records the backward of SplitQueryGate: the split is a
// permutation, so the gradient of the interleaved q_proj output is the scatter of the query
// and gate gradients back into it (per token and head, headDim query values then headDim
// gate values; DESIGN.md §3). Reference: host.SplitQueryGate is its inverse, so
// host.SplitQueryGate(dqg) returns (dq, dgate) exactly.
//
// dq and dgate are F32 [rows, heads, headDim]; dqg is F32 [rows, heads, 2·headDim],
// overwritten; all row-major and distinct. A pure copy (exact). Errors: non-positive
// sizes, dtype or length mismatches, aliasing, or any Dispatch error.
func SplitQueryGateBackward(r *Recorder, dq, dgate, dqg *Buffer, rows, heads, headDim int) error {
	const op = "SplitQueryGateBackward"
	if err := positive(op, "rows, heads, headDim", rows, heads, headDim); err != nil {
		return err
	}
	n := rows * heads * headDim
	if 2*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·heads·2·headDim = %d exceeds %d", op, 2*n, maxU32Elems)
	}
	if err := need(op, "dq", dq, n, F32); err != nil {
		return err
	}
	if err := need(op, "dgate", dgate, n, F32); err != nil {
		return err
	}
	if err := need(op, "dqg", dqg, 2*n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"dq": dq, "dgate": dgate, "dqg": dqg}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "split_query_gate.wgsl", Params: splitQueryGateParams{Backward: true, WG: splitQueryGateWG},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 2,
	}, (n+splitQueryGateWG-1)/splitQueryGateWG, []uint32{uint32(n), uint32(headDim)}, Whole(dq), Whole(dgate), Whole(dqg))
}
