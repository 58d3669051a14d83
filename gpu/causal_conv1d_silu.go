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
	if err := r.usable(); err != nil {
		return err
	}
	const op = "CausalConv1dSiLU"
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
	if err := need(op, "y", y, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "w": w, "y": y}); err != nil {
		return err
	}
	rb, inv := r.d.causalConvRuns(nb, t, channels)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "causal_conv1d_silu.wgsl",
		Params:   struct{ WG, K, RB int }{causalConvWG, K, rb},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3,
	}, (inv+causalConvWG-1)/causalConvWG, []uint32{uint32(n), uint32(channels), uint32(t)}, Whole(x), Whole(w), Whole(y)); err != nil {
		return err
	}
	r.Cost(2*float64(n*K), 8*float64(n)+4*float64(channels*K)) // x read, y written, w
	return nil
}

// causalConvRunTokens is the run length RB of the run form of the causal convolution
// kernels (causal_conv1d_lib.wgsl): tokens of one channel per invocation.
const causalConvRunTokens = 16

// causalConvRuns returns the run length RB the causal convolution kernels take here (0: the
// per-element form of GPUs; causalConvRunTokens on CPU adapters, where every load is a loop
// over the lanes) and their invocation count.
func (d *Device) causalConvRuns(nb, t, channels int) (rb, invocations int) {
	runs := d.info.CPU
	if causalConvForced != 0 {
		runs = causalConvForced > 0
	}
	if !runs {
		return 0, nb * t * channels
	}
	return causalConvRunTokens, nb * ((t + causalConvRunTokens - 1) / causalConvRunTokens) * channels
}
