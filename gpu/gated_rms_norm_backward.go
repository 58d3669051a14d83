package gpu

import (
	"fmt"
	"math"
)

// GatedRMSNormBackward records the backward of GatedRMSNorm (same x, z, w, rows, hv, dv,
// eps) for the output gradient dy (host.GatedRMSNormBackward). Per value head of a row,
// with inv = rsqrt(mean(x²) + eps) over dv, n(x) = x·inv and dn = dy ⊙ silu(z):
//
//	dz = dy ⊙ w ⊙ n(x) ⊙ silu′(z),   silu′(z) = σ(z)·(1 + z·(1 − σ(z))),
//	dx = inv·w ⊙ dn − inv³·x·(1/dv)·Σ w⊙dn⊙x,
//	dw += Σ_{rows, heads} dn ⊙ x·inv.
//
// x, z, dy, dx and dz are F32 [rows, hv, dv] row-major; dx and dz are overwritten. w and dw
// are F32 [dv]; dw is accumulated (+=), so gradients of several calls (layers' windows,
// steps) add up. One workgroup per (row, head) for dx and dz, then a deterministic column
// reduction over the rows·hv groups for dw (fixed summation order, no atomics: repeated
// calls give identical bits). Scratch: rows·hv·dv + rows·hv floats (dn and inv), taken
// from r.Temp. f32 throughout. Errors: non-positive sizes, eps negative or not finite,
// dtype or length mismatches, aliasing among the buffers, or any Dispatch error (nothing is
// left recorded on error).
func GatedRMSNormBackward(r *Recorder, x, z, w, dy, dx, dz, dw *Buffer, rows, hv, dv int, eps float64) error {
	const op = "GatedRMSNormBackward"
	if err := positive(op, "rows, hv, dv", rows, hv, dv); err != nil {
		return err
	}
	if !(eps >= 0) || eps > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: eps = %g must be finite and ≥ 0", op, eps)
	}
	n := rows * hv * dv
	if rows*hv > maxU32Elems || n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·hv·dv = %d exceeds %d", op, n, maxU32Elems)
	}
	if err := needF32(op, arg{"x", x, n}, arg{"z", z, n}, arg{"w", w, dv}, arg{"dy", dy, n}, arg{"dx", dx, n}, arg{"dz", dz, n}, arg{"dw", dw, dv}); err != nil {
		return err
	}
	form := r.d.rowForm(gatedRMSNormWG, dv)
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_rms_norm_backward.wgsl", Params: form,
		Bindings: []Access{Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite}, Uniforms: 3,
	})
	if err != nil {
		return err
	}
	groups := rows * hv
	g, err := Grid1D(form.groups(groups))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	dn, err := r.Temp(op+" dn", F32, groups, dv)
	if err != nil {
		return err
	}
	inv, err := r.Temp(op+" inv", F32, groups)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	if err := r.Dispatch(k, g, []uint32{uint32(groups), uint32(dv), math.Float32bits(float32(eps))},
		Whole(x), Whole(z), Whole(w), Whole(dy), Whole(dx), Whole(dz), Whole(dn), Whole(inv)); err != nil {
		return err
	}
	r.Cost(0, 24*float64(n)+4*float64(groups+dv)) // x, z, dy read; dx, dz, dn written; inv, w
	if err := gradColDot(r, op+".dw", dn, x, inv, nil, nil, dw, nil, groups, dv, false); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
