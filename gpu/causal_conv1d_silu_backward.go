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
	return CausalConv1dSiLUBackwardSplit(r, x, w, []ColumnBlock{{Buf: dy, Cols: channels}}, dx, nb, t, K)
}

// CausalConv1dSiLUBackwardSplit is CausalConv1dSiLUBackward reading dy as its consecutive
// column blocks (1 to 3; channels = Σ Cols), each F32 [nb·t, Cols] in its own buffer: the
// gradients of the GatedDeltaNet's q, k and v channels, without assembling them first. The
// same bits as CausalConv1dSiLUBackward. Errors: those of CausalConv1dSiLUBackward and of the
// blocks (checkColumnBlocks).
func CausalConv1dSiLUBackwardSplit(r *Recorder, x, w *Buffer, dy []ColumnBlock, dx *Buffer, nb, t, K int) error {
	const op = "CausalConv1dSiLUBackward"
	channels := columnBlocksCols(dy)
	n, err := causalConvSize(op, nb, t, channels, K)
	if err != nil {
		return err
	}
	for _, a := range []arg{{"x", x, n}, {"w", w, channels * K}, {"dx", dx, n}} {
		if err := need(op, a.name, a.b, a.n, F32); err != nil {
			return err
		}
	}
	all := map[string]*Buffer{"x": x, "w": w, "dx": dx}
	c0, c1, dyBinds, err := checkColumnBlocks(op, "dy", dy, nb*t, all)
	if err != nil {
		return err
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	type params struct {
		WG, K      int
		Transposed bool
		RB, Blocks int
	}
	rb, inv := r.d.causalConvRuns(nb, t, channels)
	access := []Access{Read, Read}
	for range dy {
		access = append(access, Read)
	}
	k1, err := r.d.Kernel(KernelSpec{
		Name: op, File: "causal_conv1d_silu_backward.wgsl", Params: params{causalConvWG, K, false, rb, len(dy)},
		Bindings: append(access, ReadWrite), Uniforms: 5,
	})
	if err != nil {
		return err
	}
	k2, err := r.d.Kernel(KernelSpec{
		Name: op + ".dx", File: "causal_conv1d_silu_backward.wgsl", Params: params{causalConvWG, K, true, rb, 1},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 5,
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
	uni := []uint32{uint32(n), uint32(channels), uint32(t), uint32(c0), uint32(c1)}
	mark := len(r.ops)
	binds := append(append([]Binding{Whole(x), Whole(w)}, dyBinds...), Whole(ds))
	if err := r.Dispatch(k1, g, uni, binds...); err != nil {
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
