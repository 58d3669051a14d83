package gpu

import (
	"fmt"
	"math"
	"sync"
)

const qkNormRoPEWG = 64

// ropeTables caches the f32 bits of the cos/sin tables by (t, rot, θ): [2, t, rot/2].
var ropeTables sync.Map

type ropeKey struct {
	t, rot int
	theta  float64
}

// ropeTable returns cos(p·f_i) for p < t, i < rot/2, then the sines, as f32 bits, computed in
// float64 with f_i = θ^(−2i/rot) (HF's default inv_freq).
func ropeTable(t, rot int, theta float64) []uint32 {
	key := ropeKey{t, rot, theta}
	if v, ok := ropeTables.Load(key); ok {
		return v.([]uint32)
	}
	half := rot / 2
	tab := make([]uint32, 2*t*half)
	for i := range half {
		f := math.Pow(theta, -float64(2*i)/float64(rot))
		for p := range t {
			s, c := math.Sincos(float64(p) * f)
			tab[p*half+i] = math.Float32bits(float32(c))
			tab[(t+p)*half+i] = math.Float32bits(float32(s))
		}
	}
	ropeTables.Store(key, tab)
	return tab
}

// QKNormRoPEDims are the sizes and constants of QKNormRoPE and QKNormRoPEBackward.
type QKNormRoPEDims struct {
	// Rows is the number of token rows, nb·t: x and y are [Rows, Heads, HeadDim].
	Rows int
	// Heads is the number of heads per row (query or KV heads).
	Heads int
	// HeadDim is the head size, over which each head is normalised.
	HeadDim int
	// Eps is the norm's ε in rsqrt(mean(x²) + ε): finite, ≥ 0.
	Eps float64
	// Rot is the number of rotary dims at the start of each head: even, in [2, HeadDim].
	Rot int
	// Theta is the RoPE base θ (angles p·θ^(−2i/Rot)): positive, finite.
	Theta float64
	// T is the window length: position p = row mod T; Rows is a multiple of T.
	T int
}

// check errors when r is not usable or dims is out of range.
func (d QKNormRoPEDims) check(r *Recorder, op string) error {
	if err := r.usable(); err != nil {
		return err
	}
	rows, heads, headDim, eps, rot, theta, t := d.Rows, d.Heads, d.HeadDim, d.Eps, d.Rot, d.Theta, d.T
	if err := positive(op, "rows, heads, headDim, t", rows, heads, headDim, t); err != nil {
		return err
	}
	if rows%t != 0 {
		return fmt.Errorf("gpu: %s: rows %d is not a multiple of the window length t = %d", op, rows, t)
	}
	if rot < 2 || rot%2 != 0 || rot > headDim {
		return fmt.Errorf("gpu: %s: rotary dims %d must be even and in [2, headDim = %d]", op, rot, headDim)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return fmt.Errorf("gpu: %s: theta = %g must be positive and finite", op, theta)
	}
	if !(eps >= 0) || eps > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: eps = %g must be finite and ≥ 0", op, eps)
	}
	if n := rows * heads * headDim; n > maxU32Elems || t*rot > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·heads·headDim = %d exceeds %d", op, n, maxU32Elems)
	}
	return nil
}

// QKNormRoPE records the per-head query/key norm of Qwen3.5 gated attention followed by
// partial rotary position embedding (host.QKNormRoPE, DESIGN.md §3):
//
//  1. per head, over headDim: n = x · rsqrt(mean(x²) + eps) · (1 + w) (zero-centred gain);
//  2. on the first rot dims of every head, rotate-half pairing (dim i with i + rot/2) with
//     angle p·θ^(−2i/rot), p = row mod t the position within the window:
//     y_i = n_i·cos − n_{i+rot/2}·sin, y_{i+rot/2} = n_{i+rot/2}·cos + n_i·sin;
//     dims rot…headDim−1 are n unchanged.
//
// Sizes and constants: dims (QKNormRoPEDims). x and y are F32 [rows, heads, headDim] row-major (rows = nb·t tokens; distinct buffers), w
// is F32 [headDim] (q_norm or k_norm). The norm is f32; the cos/sin table is computed on
// the host in float64, rounded to f32 and uploaded as a recorder temporary [2, t, rot/2].
// Errors: non-positive sizes, rows not a multiple of t, rot odd or outside [2, headDim], θ
// not positive and finite, eps negative or not finite, dtype or length mismatches,
// aliasing, or any Dispatch error.
func QKNormRoPE(r *Recorder, x, w, y *Buffer, dims QKNormRoPEDims) error {
	const op = "QKNormRoPE"
	if err := dims.check(r, op); err != nil {
		return err
	}
	rows, heads, headDim, eps, rot, theta, t := dims.Rows, dims.Heads, dims.HeadDim, dims.Eps, dims.Rot, dims.Theta, dims.T
	n := rows * heads * headDim
	if err := need(op, "x", x, n, F32); err != nil {
		return err
	}
	if err := need(op, "w", w, headDim, F32); err != nil {
		return err
	}
	if err := need(op, "y", y, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "w": w, "y": y}); err != nil {
		return err
	}
	form := r.d.rowForm(qkNormRoPEWG, dims.HeadDim)
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "qk_norm_rope.wgsl", Params: form,
		Bindings: []Access{Read, Read, Read, ReadWrite}, Uniforms: 6,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D(form.groups(rows * heads))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	tab, err := r.TempUint32("rope cos/sin", ropeTable(t, rot, theta), 2, t, rot/2)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	return r.Dispatch(k, g, []uint32{uint32(rows * heads), uint32(heads), uint32(headDim), uint32(rot / 2), uint32(t),
		math.Float32bits(float32(eps))}, Whole(x), Whole(w), Whole(tab), Whole(y))
}
