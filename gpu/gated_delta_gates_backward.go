package gpu

import "fmt"

// GatedDeltaGatesBackward records the backward of GatedDeltaGates (same a, b, aLog, dtBias,
// rows, hv) with respect to a and b for the gradients dg and dbeta of its outputs
// (host.GatedDeltaGatesBackward); A_log and dt_bias are frozen in the student, so they get
// no gradient:
//
//	db = dβ ⊙ σ(b)·(1 − σ(b)),   da = −dg ⊙ exp(A_log) ⊙ σ(a + dt_bias).
//
// a, b, dg, dbeta, da and db are F32 [rows, hv] row-major; aLog and dtBias F32 [hv]. da and
// db are overwritten; all eight buffers must be distinct. Elementwise, f32, sigmoids without
// overflow; da is 0 where dg is 0, also where exp(A_log) overflows f32 (A_log ≥ 88.8, g = −∞:
// the delta rule's backward gives dg = 0 there), as the float64 host's −0·e^{A_log}. Errors: non-positive sizes, dtype or length mismatches, aliasing, or any
// Dispatch error.
func GatedDeltaGatesBackward(r *Recorder, a, b, aLog, dtBias, dg, dbeta, da, db *Buffer, rows, hv int) error {
	const op = "GatedDeltaGatesBackward"
	if err := positive(op, "rows, hv", rows, hv); err != nil {
		return err
	}
	n := rows * hv
	if n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·hv = %d exceeds %d", op, n, maxU32Elems)
	}
	if err := needF32(op, arg{"a", a, n}, arg{"b", b, n}, arg{"aLog", aLog, hv}, arg{"dtBias", dtBias, hv},
		arg{"dg", dg, n}, arg{"dbeta", dbeta, n}, arg{"da", da, n}, arg{"db", db, n}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "gated_delta_gates.wgsl", Params: gatedDeltaGatesParams{Backward: true, WG: gatedDeltaGatesWG},
		Bindings: []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 2,
	}, (n+gatedDeltaGatesWG-1)/gatedDeltaGatesWG, []uint32{uint32(n), uint32(hv)},
		Whole(a), Whole(b), Whole(aLog), Whole(dtBias), Whole(dg), Whole(dbeta), Whole(da), Whole(db))
}
