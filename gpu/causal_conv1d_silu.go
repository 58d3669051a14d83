package gpu

import "fmt"

const causalConvWG = 256

// causalConvSize returns the element count nb·t·channels of CausalConv1dSiLU and its
// backward. Errors: a non-positive size, K > 64, or more than 2³¹ elements.
func causalConvSize(op string, nb, t, channels, K int) (int, error) {
	if err := positive(op, "nb, t, channels, K", nb, t, channels, K); err != nil {
		return 0, err
	}
	if K > 64 {
		return 0, fmt.Errorf("gpu: %s: K = %d taps exceeds 64", op, K)
	}
	n := nb * t * channels
	if n > maxU32Elems {
		return 0, fmt.Errorf("gpu: %s: nb·t·channels = %d exceeds %d", op, n, maxU32Elems)
	}
	return n, nil
}

// CausalConv1dSiLU records the GatedDeltaNet's depthwise causal convolution over time
// followed by SiLU (host.CausalConv1dSiLU, DESIGN.md §3):
//
//	y[(b,τ), c] = silu( Σ_{i<K} w[c,i] · x[(b, τ−K+1+i), c] ),
//
// with x taken as zero before the start of each window (left zero padding inside every
// window: nothing leaks from window b−1 into window b).
//
// x and y are F32 [nb·t, channels] row-major (token-major, as a Linear writes them;
// distinct buffers), w is F32 [channels, 1, K] (HF conv1d.weight), i.e. [channels·K].
// Arithmetic is f32. Errors: non-positive sizes, K > 64, buffers whose dtype or length
// disagree with nb, t, channels and K, aliasing, or any Dispatch error.
func CausalConv1dSiLU(r *Recorder, x, w, y *Buffer, nb, t, channels, K int) error {
	return CausalConv1dSiLUSplit(r, x, w, []ColumnBlock{{Buf: y, Cols: channels}}, nb, t, K)
}

// CausalConv1dSiLUSplit is CausalConv1dSiLU writing y as its consecutive column blocks (1 to
// 3; channels = Σ Cols), each F32 [nb·t, Cols] in its own buffer: the GatedDeltaNet's q, k
// and v channels go straight to their buffers, without a copy. The same bits as
// CausalConv1dSiLU. Errors: those of CausalConv1dSiLU and of the blocks (checkColumnBlocks).
func CausalConv1dSiLUSplit(r *Recorder, x, w *Buffer, y []ColumnBlock, nb, t, K int) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "CausalConv1dSiLU"
	channels := columnBlocksCols(y)
	n, err := causalConvSize(op, nb, t, channels, K)
	if err != nil {
		return err
	}
	if err := need(op, "x", x, n, F32); err != nil {
		return err
	}
	if err := need(op, "w", w, channels*K, F32); err != nil {
		return err
	}
	all := map[string]*Buffer{"x": x, "w": w}
	c0, c1, binds, err := checkColumnBlocks(op, "y", y, nb*t, all)
	if err != nil {
		return err
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	access := []Access{Read, Read}
	for range y {
		access = append(access, ReadWrite)
	}
	rb, inv := r.d.causalConvRuns(nb, t, channels)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "causal_conv1d_silu.wgsl",
		Params:   struct{ WG, K, RB, Blocks int }{causalConvWG, K, rb, len(y)},
		Bindings: access, Uniforms: 5,
	}, (inv+causalConvWG-1)/causalConvWG, []uint32{uint32(n), uint32(channels), uint32(t), uint32(c0), uint32(c1)},
		append([]Binding{Whole(x), Whole(w)}, binds...)...); err != nil {
		return err
	}
	r.Cost(2*float64(n*K), 8*float64(n)+4*float64(channels*K)) // x read, y written, w
	return nil
}

// causalConvRunTokens is the run length RB of the run form of the causal convolution
// kernels (causal_conv1d_lib.wgsl): tokens of one channel per invocation.
const causalConvRunTokens = 16

// causalConvRuns returns the run length RB the causal convolution kernels take (0: the
// per-element form, the simple twin that tests force) and their invocation count. The run
// form is every device's: on lavapipe each load is a loop over the lanes, and on an H100 it
// halved the GPU time (0.8B's conv, 4,096 tokens × 6,144 channels: forward 203 → 101 µs,
// backward 239 → 130 and 196 → 95; BenchmarkGatedDeltaNetRows, 2026-12-07).
func (d *Device) causalConvRuns(nb, t, channels int) (rb, invocations int) {
	if causalConvRunsOff {
		return 0, nb * t * channels
	}
	return causalConvRunTokens, nb * ((t + causalConvRunTokens - 1) / causalConvRunTokens) * channels
}
