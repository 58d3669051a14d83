package gpu

import (
	"fmt"
	"math"
)

// QKNormRoPEBackward records the backward of QKNormRoPE (same x, w and dims)
// for the output gradient dy (host.QKNormRoPEBackward). RoPE is a rotation, so the gradient
// of the normed vector n is dy rotated back by the angle −p·θ^(−2i/rot) on the pairs
// (i, i + rot/2), i < rot/2 (p = row mod t; dims ≥ rot pass through); then, per head over
// headDim, the zero-centred RMSNorm backward with inv = rsqrt(mean(x²) + eps):
//
//	dx_i = inv·(1+w_i)·dn_i − inv³·x_i·(1/headDim)·Σ_j (1+w_j)·dn_j·x_j,
//	dw_i += Σ_{rows, heads} dn_i·x_i·inv.
//
// x, dy and dx are F32 [rows, heads, headDim] row-major (rows = nb·t tokens), dx
// overwritten; w and dw are F32 [headDim] (q_norm or k_norm gain), dw accumulated (+=). All
// five distinct. Two dispatches: one workgroup per (row, head) for dx (writing dn and inv
// to recorder temporaries), then the deterministic column reduction of RMSNormBackward for
// dw over rows·heads. The cos/sin table is the forward's (float64, rounded to f32); f32
// throughout. Errors: as QKNormRoPE, plus dy/dx/dw dtype, length or aliasing mistakes; a
// failed call records nothing.
func QKNormRoPEBackward(r *Recorder, x, w, dy, dx, dw *Buffer, dims QKNormRoPEDims) error {
	const op = "QKNormRoPEBackward"
	if err := dims.check(r, op); err != nil {
		return err
	}
	rows, heads, headDim, eps, rot, theta, t := dims.Rows, dims.Heads, dims.HeadDim, dims.Eps, dims.Rot, dims.Theta, dims.T
	n := rows * heads * headDim
	for _, c := range []struct {
		name string
		b    *Buffer
		n    int
	}{{"x", x, n}, {"w", w, headDim}, {"dy", dy, n}, {"dx", dx, n}, {"dw", dw, headDim}} {
		if err := need(op, c.name, c.b, c.n, F32); err != nil {
			return err
		}
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "w": w, "dy": dy, "dx": dx, "dw": dw}); err != nil {
		return err
	}
	form := r.d.rowForm(qkNormRoPEWG, dims.HeadDim)
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "qk_norm_rope_backward.wgsl", Params: form,
		Bindings: []Access{Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite}, Uniforms: 6,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D(form.groups(rows * heads))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	tab, err := r.TempUint32(op+" cos/sin", ropeTable(t, rot, theta), 2, t, rot/2)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	dn, err := r.Temp(op+" dn", F32, rows, heads, headDim)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	inv, err := r.Temp(op+" inv", F32, rows*heads)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	mark := len(r.ops)
	if err := r.Dispatch(k, g, []uint32{uint32(rows * heads), uint32(heads), uint32(headDim), uint32(rot / 2), uint32(t),
		math.Float32bits(float32(eps))}, Whole(x), Whole(w), Whole(tab), Whole(dy), Whole(dx), Whole(dn), Whole(inv)); err != nil {
		return err
	}
	if err := gradColDot(r, op+".dw", dn, x, inv, nil, nil, dw, nil, rows*heads, headDim, false); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
