package gpu

import "fmt"

const gatedDeltaGatesWG = 256

// gatedDeltaGatesParams are gated_delta_gates.wgsl's template parameters (Backward: the
// backward's entry).
type gatedDeltaGatesParams struct {
	Backward bool
	WG       int
}

// GatedDeltaGates records the per-token, per-value-head gates of the GatedDeltaNet
// (host.GatedDeltaGates, HF Qwen3_5GatedDeltaNet):
//
//	beta = sigmoid(b),   g = −exp(A_log) · softplus(a + dt_bias)   (g ≤ 0, a log decay),
//
// in f32. a and b are F32 [rows, hv] row-major (outputs of in_proj_a and in_proj_b), aLog
// and dtBias are F32 [hv]; the outputs g and beta are F32 [rows, hv]. All six buffers must
// be distinct. Errors: non-positive sizes, dtype or length mismatches, aliasing, or any
// Dispatch error.
func GatedDeltaGates(r *Recorder, a, b, aLog, dtBias, g, beta *Buffer, rows, hv int) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "GatedDeltaGates"
	if err := positive(op, "rows, hv", rows, hv); err != nil {
		return err
	}
	n := rows * hv
	if n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·hv = %d exceeds %d", op, n, maxU32Elems)
	}
	if err := needF32(op, arg{"a", a, n}, arg{"b", b, n}, arg{"aLog", aLog, hv}, arg{"dtBias", dtBias, hv}, arg{"g", g, n}, arg{"beta", beta, n}); err != nil {
		return err
	}
	return r.dispatch1D(KernelSpec{
		Name: op, File: "gated_delta_gates.wgsl", Params: gatedDeltaGatesParams{WG: gatedDeltaGatesWG},
		Bindings: []Access{Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 2,
	}, (n+gatedDeltaGatesWG-1)/gatedDeltaGatesWG, []uint32{uint32(n), uint32(hv)},
		Whole(a), Whole(b), Whole(aLog), Whole(dtBias), Whole(g), Whole(beta))
}
