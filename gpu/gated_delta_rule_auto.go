package gpu

import "fmt"

// DeltaRuleDims are the sizes of one gated delta rule call (GatedDeltaRule,
// GatedDeltaRuleChunked, their backwards, the Auto forms and the scratch sizes). The token
// rows are NB·T, in window-major order.
type DeltaRuleDims struct {
	// NB is the number of windows; the state restarts from zero at each window's first token.
	NB int
	// T is the number of tokens per window.
	T int
	// HK is the number of key heads: q and k are [NB·T, HK, DK].
	HK int
	// HV is the number of value heads, a multiple of HK (value head j reads key head
	// j / (HV/HK)): v and o are [NB·T, HV, DV], g and beta [NB·T, HV].
	HV int
	// DK is the key head size: the state of a window and value head is DK×DV.
	DK int
	// DV is the value head size.
	DV int
}

// check errors when r is not usable, a size is not positive or HV is not a multiple of HK.
func (d DeltaRuleDims) check(r *Recorder, op string) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := positive(op, "nb, t, hk, hv, dk, dv", d.NB, d.T, d.HK, d.HV, d.DK, d.DV); err != nil {
		return err
	}
	if d.HV%d.HK != 0 {
		return fmt.Errorf("gpu: %s: hv = %d value heads is not a multiple of hk = %d key heads", op, d.HV, d.HK)
	}
	return nil
}

// gatedDeltaRuleChunkedMaxHeads is the largest NB·HV (windows × value heads) for which
// GatedDeltaRuleAuto takes the chunked forward. Measured on the H200 at t = 512,
// dk = dv = 128 (GPU time, DESIGN.md §9): chunked ≈0.53 ms vs 2.0 ms token-by-token at
// nb·hv = 2 (the token-by-token kernel is latency-bound), ≈11.6 ms vs 9.1 ms at
// nb·hv = 256 (both fill the GPU; the chunked kernels run at ~1–3 TFLOP/s there). The
// crossover between the two was not measured: 64 (a quarter of the GPU's workgroup slots for
// the token-by-token kernel) is a guess.
const gatedDeltaRuleChunkedMaxHeads = 64

// fitsBinding reports whether n·width f32 values fit one storage binding of d.
func fitsBinding(d *Device, n, width int) bool {
	return 4*uint64(n)*uint64(width) <= d.info.MaxStorageBindingSize
}

// GatedDeltaRuleChunkedFits reports whether GatedDeltaRuleAuto takes the chunked forward
// (GatedDeltaRuleChunked) on d for dims: DK a multiple of 4 and ≤ 256 (its limits), NB·HV ≤
// 64 (where it was measured faster, see GatedDeltaRuleChunked) and the largest part of its
// scratch, NB·T·HV·max(DK, DV, 64) f32, fits maxStorageBufferBindingSize. False for a nil
// device.
func GatedDeltaRuleChunkedFits(d *Device, dims DeltaRuleDims) bool {
	return d != nil && dims.DK%4 == 0 && dims.DK <= 256 && dims.NB*dims.HV <= gatedDeltaRuleChunkedMaxHeads &&
		fitsBinding(d, dims.NB*dims.T*dims.HV, max(dims.DK, dims.DV, GatedDeltaRuleChunkLen))
}

// GatedDeltaRuleChunkedBackwardFits reports whether GatedDeltaRuleBackwardAuto takes the
// chunked backward (GatedDeltaRuleChunkedBackward; faster on the H200 at both measured
// sizes: ≈4.5× at nb·hv = 2, ≈1.09× at nb·hv = 256) on d for dims: DK and DV multiples of 4
// and the largest parts of its scratch, NB·T·HV·max(3·DK + DV, 64) (the forward's parts
// included) and NB·HV·⌈T/64⌉·DK·DV f32, within maxStorageBufferBindingSize. False for a nil device.
func GatedDeltaRuleChunkedBackwardFits(d *Device, dims DeltaRuleDims) bool {
	if d == nil || dims.DK%4 != 0 || dims.DV%4 != 0 {
		return false
	}
	nck := (dims.T + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	return fitsBinding(d, dims.NB*dims.T*dims.HV, max(3*dims.DK+dims.DV, GatedDeltaRuleChunkLen)) && fitsBinding(d, dims.NB*dims.HV*nck, dims.DK*dims.DV)
}

// GatedDeltaRuleAuto records the gated delta rule (host.GatedDeltaRule) with
// GatedDeltaRuleChunkedCoopmat where tensor cores are on (GatedDeltaRuleCoopmatFits; within
// the bound of its f16 operands; where its kernel cannot be made, tensor cores go off with the
// reason and the WGSL forms run), else with GatedDeltaRuleLanes on CPU adapters
// (GatedDeltaRuleLanesFits: 15–35× the other forms on lavapipe), else with
// GatedDeltaRuleChunked where GatedDeltaRuleChunkedFits says so for r's device, else with
// GatedDeltaRule; the arguments and outputs are theirs, and the WGSL forms compute the same o
// and state within f32 rounding (gpu tests). Errors: those of the launcher taken.
func GatedDeltaRuleAuto(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	wgsl := func() error { return gatedDeltaRuleAutoWGSL(r, q, k, v, g, beta, o, state, dims) }
	if r != nil && GatedDeltaRuleCoopmatFits(r.Device(), dims) {
		return coopOrWGSL(func() error { return GatedDeltaRuleChunkedCoopmat(r, q, k, v, g, beta, o, state, dims) }, wgsl)
	}
	return wgsl()
}

// gatedDeltaRuleAutoWGSL is GatedDeltaRuleAuto's choice among the WGSL forms.
func gatedDeltaRuleAutoWGSL(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	if r != nil && GatedDeltaRuleLanesFits(r.Device(), dims) {
		return GatedDeltaRuleLanes(r, q, k, v, g, beta, o, state, dims)
	}
	if r != nil && GatedDeltaRuleChunkedFits(r.Device(), dims) {
		return GatedDeltaRuleChunked(r, q, k, v, g, beta, o, state, dims)
	}
	return GatedDeltaRule(r, q, k, v, g, beta, o, state, dims)
}

// GatedDeltaRuleBackwardAuto records the backward of the gated delta rule with
// GatedDeltaRuleChunkedBackwardCoopmat where tensor cores are on
// (GatedDeltaRuleBackwardCoopmatFits; within the bound of its f16 operands; where its kernels
// cannot be made, the WGSL forms run), else with GatedDeltaRuleBackwardLanes on CPU adapters
// (GatedDeltaRuleBackwardLanesFits), else with GatedDeltaRuleChunkedBackward where
// GatedDeltaRuleChunkedBackwardFits says so for r's device, else with GatedDeltaRuleBackward;
// the arguments and outputs are theirs, and the WGSL forms compute the same gradients within
// f32 rounding (gpu tests). Errors: those of the launcher taken.
func GatedDeltaRuleBackwardAuto(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	wgsl := func() error {
		return gatedDeltaRuleBackwardAutoWGSL(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	if r != nil && GatedDeltaRuleBackwardCoopmatFits(r.Device(), dims) {
		return coopOrWGSL(func() error {
			return GatedDeltaRuleChunkedBackwardCoopmat(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
		}, wgsl)
	}
	return wgsl()
}

// GatedDeltaRuleBackwardCoopmatFits reports whether GatedDeltaRuleBackwardAuto takes the
// cooperative-matrix form (GatedDeltaRuleChunkedBackwardCoopmat) on d for dims: where both
// the chunked backward (GatedDeltaRuleChunkedBackwardFits: dk and dv multiples of 4) and the
// cooperative-matrix forward (GatedDeltaRuleCoopmatFits) fit, and the chunk-parallel
// stages' workgroup memory and f16 copies of the per-chunk states fit the device. False for a
// nil device.
func GatedDeltaRuleBackwardCoopmatFits(d *Device, dims DeltaRuleDims) bool {
	return GatedDeltaRuleChunkedBackwardFits(d, dims) && GatedDeltaRuleCoopmatFits(d, dims) && d.coopDeltaBwdPlan(dims) == nil
}

// gatedDeltaRuleBackwardAutoWGSL is GatedDeltaRuleBackwardAuto's choice among the WGSL forms.
func gatedDeltaRuleBackwardAutoWGSL(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	if r != nil && GatedDeltaRuleBackwardLanesFits(r.Device(), dims) {
		return GatedDeltaRuleBackwardLanes(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	if r != nil && GatedDeltaRuleChunkedBackwardFits(r.Device(), dims) {
		return GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	return GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
}
