package nvgkit

import "github.com/nvg-project/nvg/gpu"

// chunkedForwardMaxHeads is the largest nb·hv (windows × value heads) for which deltaRule
// takes the chunked forward. Measured on the H200 at t = 512, dk = dv = 128 (GPU time,
// DESIGN.md §9): chunked ≈0.53 ms vs 2.0 ms token-by-token at nb·hv = 2 (the token-by-token
// kernel is latency-bound), ≈11.6 ms vs 9.1 ms at nb·hv = 256 (both fill the GPU; the
// chunked kernels run at ~1–3 TFLOP/s there). The crossover between the two was not
// measured: 64 (a quarter of the GPU's workgroup slots for the token-by-token kernel) is a
// guess.
const chunkedForwardMaxHeads = 64

// deltaRule records the GatedDeltaNet recurrence with the chunked kernel
// (gpu.GatedDeltaRuleChunked) when nb·hv ≤ chunkedForwardMaxHeads and its scratch parts fit
// one storage binding of the device, else with the token-by-token one (gpu.GatedDeltaRule);
// both compute the same o (within f32 rounding, gpu tests).
func deltaRule(r *gpu.Recorder, q, k, v, g, beta, o *gpu.Buffer, nb, t, hk, hv, dk, dv int) error {
	if r != nil && r.Device() != nil && nb*hv <= chunkedForwardMaxHeads && chunkedFits(r.Device(), nb*t*hv, dk, dv) {
		return gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, nil, nb, t, hk, hv, dk, dv)
	}
	return gpu.GatedDeltaRule(r, q, k, v, g, beta, o, nil, nb, t, hk, hv, dk, dv)
}

// chunkedFits reports whether the largest scratch part of the chunked kernels for n
// (token, value head) pairs, n·max(dk, dv, 64) f32, fits maxStorageBufferBindingSize.
func chunkedFits(d *gpu.Device, n, dk, dv int) bool {
	return 4*uint64(n)*uint64(max(dk, dv, gpu.GatedDeltaRuleChunkLen)) <= d.Info().MaxStorageBindingSize
}

// deltaRuleBackward records the backward of deltaRule with the chunked kernels
// (gpu.GatedDeltaRuleChunkedBackward; faster on the H200 at both measured sizes: ≈4.5× at
// nb·hv = 2, ≈1.09× at nb·hv = 256) when dk and dv are multiples of 4 and their scratch
// parts fit one storage binding, else with the token-by-token ones
// (gpu.GatedDeltaRuleBackward); both compute the same gradients.
func deltaRuleBackward(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, nb, t, hk, hv, dk, dv int) error {
	if r != nil && r.Device() != nil && dk%4 == 0 && dv%4 == 0 && chunkedFits(r.Device(), nb*t*hv, 3*dk+dv, 0) {
		nck := (t + gpu.GatedDeltaRuleChunkLen - 1) / gpu.GatedDeltaRuleChunkLen
		if 4*uint64(nb*hv*nck)*uint64(dk*dv) <= r.Device().Info().MaxStorageBindingSize {
			return gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, t, hk, hv, dk, dv)
		}
	}
	return gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, t, hk, hv, dk, dv)
}
