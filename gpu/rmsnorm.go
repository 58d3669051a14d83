package gpu

import (
	"fmt"
	"math"
)

const rmsNormWG = 128

// RMSNorm records y[r, :] = x[r, :]·rsqrt(mean(x[r, :]²) + eps)·gain for each of rows rows
// of n values, in f32, with gain = 1 + w when zeroCentred (Qwen3.5's input, post-attention,
// final, q and k norms) or gain = w (plain, as in the GatedDeltaNet's gated norm).
// x and y are F32 [rows, n] (distinct buffers), w is F32 [n]. Errors: non-positive sizes,
// eps negative or not finite, or buffer sizes that disagree with rows and n.
func RMSNorm(r *Recorder, x, w, y *Buffer, rows, n int, eps float64, zeroCentred bool) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "RMSNorm"
	if err := positive(op, "rows, n", rows, n); err != nil {
		return err
	}
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return fmt.Errorf("gpu: %s: eps = %g must be finite and ≥ 0", op, eps)
	}
	if err := need(op, "x", x, rows*n, F32); err != nil {
		return err
	}
	if err := need(op, "w", w, n, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, rows*n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "w": w, "y": y}); err != nil {
		return err
	}
	form := r.d.rowForm(rmsNormWG, n)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "rmsnorm.wgsl",
		Params: struct {
			rowForm
			ZeroCentred bool
		}{form, zeroCentred},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3,
	}, form.groups(rows), []uint32{uint32(rows), uint32(n), math.Float32bits(float32(eps))}, Whole(x), Whole(w), Whole(y)); err != nil {
		return err
	}
	r.Cost(0, 8*float64(rows)*float64(n)+4*float64(n)) // x read, y written, w
	return nil
}
