package gpu

import (
	"fmt"
	"math"
)

// RMSNormBackward records the backward of RMSNorm (same x, w, rows, n, eps, zeroCentred)
// for the output gradient dy. With inv = rsqrt(mean(x²) + eps) per row and γ = 1 + w
// (zeroCentred) or w:
//
//	dx_i = inv·γ_i·dy_i − inv³·x_i·(1/n)·Σ_j γ_j·dy_j·x_j,   dw_i += Σ_rows dy_i·x_i·inv
//
// (dγ = dw in both gain styles; host.RMSNormBackward). x, dy and dx are F32 [rows, n]
// row-major, dx overwritten; w and dw are F32 [n], dw accumulated (+=). One workgroup per
// row for dx, then a deterministic column reduction for dw; f32 throughout. Errors:
// non-positive sizes, eps negative or not finite, buffer sizes that disagree, or aliasing.
func RMSNormBackward(r *Recorder, x, w, dy, dx, dw *Buffer, rows, n int, eps float64, zeroCentred bool) error {
	const op = "RMSNormBackward"
	if err := positive(op, "rows, n", rows, n); err != nil {
		return err
	}
	if rows*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·n exceeds the 2³¹ index range", op)
	}
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return fmt.Errorf("gpu: %s: eps = %g must be finite and ≥ 0", op, eps)
	}
	for _, c := range []struct {
		name string
		b    *Buffer
		n    int
	}{{"x", x, rows * n}, {"w", w, n}, {"dy", dy, rows * n}, {"dx", dx, rows * n}, {"dw", dw, n}} {
		if err := need(op, c.name, c.b, c.n, F32); err != nil {
			return err
		}
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "w": w, "dy": dy, "dx": dx, "dw": dw}); err != nil {
		return err
	}
	form := r.d.rowForm(rmsNormWG, n)
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "rmsnorm_backward.wgsl",
		Params: struct {
			rowForm
			ZeroCentred bool
		}{form, zeroCentred},
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 3,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D(form.groups(rows))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	inv, err := r.Temp(op+" inv", F32, rows)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	if err := r.Dispatch(k, g, []uint32{uint32(rows), uint32(n), math.Float32bits(float32(eps))},
		Whole(x), Whole(w), Whole(dy), Whole(dx), Whole(inv)); err != nil {
		return err
	}
	r.Cost(0, 12*float64(rows)*float64(n)+4*float64(rows)) // x, dy read, dx written, inv
	if err := gradColDot(r, op+".dw", dy, x, inv, nil, nil, dw, nil, rows, n, false); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
