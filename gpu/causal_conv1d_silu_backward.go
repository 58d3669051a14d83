package gpu

import "fmt"

// CausalConv1dSiLUBackward records the backward of CausalConv1dSiLU (same x, w, nb, t,
// channels, K) with respect to x only (the conv weight is frozen in the student), for the
// output gradient dy (host.CausalConv1dSiLUBackward). With s the pre-activation (recomputed
// from x with the forward's arithmetic) and ds = dy ⊙ silu′(s),
// silu′(s) = σ(s)·(1 + s·(1 − σ(s))):
//
//	dx[(b, τ′), c] = Σ_{i<K, τ = τ′+K−1−i < t} w[c, i] · ds[(b, τ), c],
//
// the transposed depthwise conv within each window: taps beyond a window's last token are
// skipped, so no gradient leaks from window b+1 into window b.
//
// x, dy and dx are F32 [nb·t, channels] row-major (token-major), w is F32 [channels, 1, K],
// i.e. [channels·K]; dx is overwritten and must be distinct from the others. Two elementwise
// passes (ds, then dx) through an nb·t·channels f32 scratch from r.Temp; f32 throughout.
// Errors: non-positive sizes, K > 64, dtype or length mismatches, aliasing, or any Dispatch
// error (nothing is left recorded on error).
func CausalConv1dSiLUBackward(r *Recorder, x, w, dy, dx *Buffer, nb, t, channels, K int) error {
	const op = "CausalConv1dSiLUBackward"
	n, err := causalConvSize(op, nb, t, channels, K)
	if err != nil {
		return err
	}
	if err := needF32(op, arg{"x", x, n}, arg{"w", w, channels * K}, arg{"dy", dy, n}, arg{"dx", dx, n}); err != nil {
		return err
	}
	type params struct {
		WG, K      int
		Transposed bool
		RB         int
	}
	rb, inv := r.d.causalConvRuns(nb, t, channels)
	k1, err := r.d.Kernel(KernelSpec{
		Name: op, File: "causal_conv1d_silu_backward.wgsl", Params: params{causalConvWG, K, false, rb},
		Bindings: []Access{Read, Read, Read, ReadWrite}, Uniforms: 3,
	})
	if err != nil {
		return err
	}
	k2, err := r.d.Kernel(KernelSpec{
		Name: op + ".dx", File: "causal_conv1d_silu_backward.wgsl", Params: params{causalConvWG, K, true, rb},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3,
	})
	if err != nil {
		return err
	}
	g, err := Grid1D((inv + causalConvWG - 1) / causalConvWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	ds, err := r.Temp(op+" ds", F32, nb*t, channels)
	if err != nil {
		return err
	}
	uni := []uint32{uint32(n), uint32(channels), uint32(t)}
	mark := len(r.ops)
	if err := r.Dispatch(k1, g, uni, Whole(x), Whole(w), Whole(dy), Whole(ds)); err != nil {
		return err
	}
	wb := 4 * float64(channels*K)
	r.Cost(2*float64(n*K), 12*float64(n)+wb) // x, dy read, ds written, w
	if err := r.Dispatch(k2, g, uni, Whole(ds), Whole(w), Whole(dx)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	r.Cost(2*float64(n*K), 8*float64(n)+wb) // ds read, dx written, w
	return nil
}
