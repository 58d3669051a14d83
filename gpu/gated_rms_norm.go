package gpu

import (
	"fmt"
	"math"
)

const gatedRMSNormWG = 64

// GatedRMSNorm records the gated norm of the GatedDeltaNet (host.GatedRMSNorm, HF
// Qwen3NextRMSNormGated), per value head over dv with a plain gain (not 1 + w):
//
//	y = w ⊙ x · rsqrt(mean(x²) + eps) ⊙ silu(z),
//
// in f32. x, z and y are F32 [rows, hv, dv] row-major (y distinct from x and z), w is F32
// [dv]. Errors: non-positive sizes, eps negative or not finite, dtype or length mismatches,
// aliasing, or any Dispatch error.
func GatedRMSNorm(r *Recorder, x, z, w, y *Buffer, rows, hv, dv int, eps float64) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "GatedRMSNorm"
	if err := positive(op, "rows, hv, dv", rows, hv, dv); err != nil {
		return err
	}
	if !(eps >= 0) || eps > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: eps = %g must be finite and ≥ 0", op, eps)
	}
	n := rows * hv * dv
	if n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·hv·dv = %d exceeds %d", op, n, maxU32Elems)
	}
	if err := needF32(op, arg{"x", x, n}, arg{"z", z, n}, arg{"w", w, dv}, arg{"y", y, n}); err != nil {
		return err
	}
	form := r.d.rowForm(gatedRMSNormWG, dv)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "gated_rms_norm.wgsl", Params: form,
		Bindings: []Access{Read, Read, Read, ReadWrite}, Uniforms: 3,
	}, form.groups(rows*hv), []uint32{uint32(rows * hv), uint32(dv), math.Float32bits(float32(eps))},
		Whole(x), Whole(z), Whole(w), Whole(y)); err != nil {
		return err
	}
	r.Cost(0, 12*float64(n)+4*float64(dv)) // x, z read, y written, w
	return nil
}
