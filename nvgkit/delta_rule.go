package nvgkit

import "github.com/nvg-project/nvg/gpu"

// deltaRule records the GatedDeltaNet recurrence with the chunked kernel
// (gpu.GatedDeltaRuleChunked) when its scratch parts fit one storage binding of the device,
// else with the token-by-token one (gpu.GatedDeltaRule); both compute the same o.
func deltaRule(r *gpu.Recorder, q, k, v, g, beta, o *gpu.Buffer, nb, t, hk, hv, dk, dv int) error {
	if r != nil && r.Device() != nil && chunkedFits(r.Device(), nb*t*hv, dk, dv) {
		return gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, nil, nb, t, hk, hv, dk, dv)
	}
	return gpu.GatedDeltaRule(r, q, k, v, g, beta, o, nil, nb, t, hk, hv, dk, dv)
}

// chunkedFits reports whether the largest scratch part of the chunked kernels for n
// (token, value head) pairs, n·max(dk, dv, 64) f32, fits maxStorageBufferBindingSize.
func chunkedFits(d *gpu.Device, n, dk, dv int) bool {
	return 4*uint64(n)*uint64(max(dk, dv, gpu.GatedDeltaRuleChunkLen)) <= d.Info().MaxStorageBindingSize
}
