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
	return backwardAuto(r, nil, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
}

// backwardAuto is GatedDeltaRuleBackwardAuto's choice of form, its chunked forms reading
// saved (when not nil, checked by the caller) instead of recording the forward.
func backwardAuto(r *Recorder, saved *DeltaRuleSaved, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	wgsl := func() error {
		return gatedDeltaRuleBackwardAutoWGSL(r, saved, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	if r != nil && GatedDeltaRuleBackwardCoopmatFits(r.Device(), dims) {
		return coopOrWGSL(func() error {
			return chunkedBackwardCoopmat(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, saved)
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

// gatedDeltaRuleBackwardAutoWGSL is GatedDeltaRuleBackwardAuto's choice among the WGSL
// forms, the chunked one reading saved when not nil.
func gatedDeltaRuleBackwardAutoWGSL(r *Recorder, saved *DeltaRuleSaved, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	if r != nil && GatedDeltaRuleBackwardLanesFits(r.Device(), dims) {
		return GatedDeltaRuleBackwardLanes(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	if r != nil && GatedDeltaRuleChunkedBackwardFits(r.Device(), dims) {
		return gatedDeltaRuleChunkedBackward(r, "GatedDeltaRuleChunkedBackward", q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, false, saved)
	}
	return GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
}

// DeltaRuleSaved is what the cooperative-matrix chunked forward recorded by
// GatedDeltaRuleAutoSave computed that the chunked backward needs again: the intra-chunk
// outputs W [nb·hv·t, dk], U [nb·hv·t, dv], Aqk [nb·hv·t, 64] and the cumulative log-decays
// γ [nb·hv·t], the state before every chunk h [nb·hv, ⌈t/64⌉, dk, dv] and V' [nb·hv·t, dv],
// all f32 temporaries of the recorder that recorded it, handed back at its Submit or
// Discard. GatedDeltaRuleBackwardAutoSaved given it records only the backward's own stages
// instead of the forward again (a recomputing training step runs the layer's forward just
// before its backward, in the same recording: nvgkit).
type DeltaRuleSaved struct {
	r       *Recorder
	dims    DeltaRuleDims
	q, k, v *Buffer
	g, beta *Buffer
	sc      *gdrcScratch
	h, vnew *Buffer
}

// GatedDeltaRuleAutoSave records the forward of the gated delta rule like GatedDeltaRuleAuto
// (same arguments, outputs and errors; no final state) and, where GatedDeltaRuleBackwardAuto
// takes the cooperative-matrix form (GatedDeltaRuleBackwardCoopmatFits), records the
// cooperative-matrix forward that GatedDeltaRuleAuto takes there with the states before every
// chunk and V' saved too — o is the same bits either way (the same products in the same
// order; TestGatedDeltaRuleSaved), so a recomputing step's gradients stay those of a step
// that keeps its activations — and returns what the backward needs (DeltaRuleSaved: the
// forward's own scratch, GatedDeltaRuleChunkedScratch, plus h and V',
// 4·nb·hv·(⌈t/64⌉·dk·dv + t·dv) bytes, kept to r's Submit). Elsewhere it records
// GatedDeltaRuleAuto and returns nil, for which GatedDeltaRuleBackwardAutoSaved records
// GatedDeltaRuleBackwardAuto: the WGSL forms do not save, because the chunked one that can
// runs the untiled inter-chunk kernel, whose o differs in bits from the tiled and
// token-by-token forms GatedDeltaRuleAuto takes.
func GatedDeltaRuleAutoSave(r *Recorder, q, k, v, g, beta, o *Buffer, dims DeltaRuleDims) (*DeltaRuleSaved, error) {
	auto := func() error { return GatedDeltaRuleAuto(r, q, k, v, g, beta, o, nil, dims) }
	if r == nil || !GatedDeltaRuleBackwardCoopmatFits(r.Device(), dims) {
		return nil, auto()
	}
	var s *DeltaRuleSaved
	err := coopOrWGSL(func() (err error) {
		s, err = saveChunked(r, q, k, v, g, beta, o, dims, true)
		return err
	}, auto)
	return s, err
}

// saveChunked records the chunked forward (of the cooperative-matrix form with coop) writing
// o, the states before every chunk and V', and returns them with its scratch.
func saveChunked(r *Recorder, q, k, v, g, beta, o *Buffer, dims DeltaRuleDims, coop bool) (*DeltaRuleSaved, error) {
	op := "GatedDeltaRuleChunked"
	if coop {
		op = "GatedDeltaRuleChunkedCoopmat"
	}
	if err := dims.check(r, op); err != nil {
		return nil, err
	}
	if coop { // before any temporary: a device without tensor cores falls back with nothing taken
		if err := r.d.coopDeltaPlan(dims); err != nil {
			return nil, fmt.Errorf("gpu: %s: %w", op, err)
		}
	}
	nck := (dims.T + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	s := &DeltaRuleSaved{r: r, dims: dims, q: q, k: k, v: v, g: g, beta: beta}
	var err error
	if s.h, err = r.Temp(op+" h (saved)", F32, dims.NB*dims.HV*nck, dims.DK, dims.DV); err != nil {
		return nil, err
	}
	if s.vnew, err = r.Temp(op+" V' (saved)", F32, dims.NB*dims.T*dims.HV, dims.DV); err != nil {
		return nil, err
	}
	if s.sc, err = gatedDeltaRuleChunked(r, op, q, k, v, g, beta, o, nil, s.h, s.vnew, dims, coop); err != nil {
		return nil, err
	}
	return s, nil
}

// check errors unless s can serve the backward on r of q, k, v, g, beta and dims.
func (s *DeltaRuleSaved) check(op string, r *Recorder, q, k, v, g, beta *Buffer, dims DeltaRuleDims) error {
	if err := r.usable(); err != nil {
		return err
	}
	switch {
	case s.r != r:
		return fmt.Errorf("gpu: %s: the saved forward belongs to another recorder (its temporaries live only to that recorder's Submit)", op)
	case r.done:
		return fmt.Errorf("gpu: %s: the recorder was already submitted or discarded, and the saved forward's temporaries with it", op)
	case s.dims != dims:
		return fmt.Errorf("gpu: %s: dims %+v differ from the saved forward's %+v", op, dims, s.dims)
	case s.q != q || s.k != k || s.v != v || s.g != g || s.beta != beta:
		return fmt.Errorf("gpu: %s: q, k, v, g and beta must be the buffers the saved forward read", op)
	}
	return nil
}

// GatedDeltaRuleBackwardAutoSaved records the backward of the gated delta rule on the
// inputs and dims of s (GatedDeltaRuleAutoSave earlier in this recording) as
// GatedDeltaRuleBackwardAuto does (same outputs: do in; dq, dkey, dval, dg, dbeta
// overwritten), its chunked forms reading s instead of recording the forward again (the
// WGSL chunked one too, where tensor cores went off after s was saved); with s = nil it is
// GatedDeltaRuleBackwardAuto on q, k, v, g, beta and dims. The gradients are
// GatedDeltaRuleBackwardAuto's bits (gpu tests). Errors: s from another recording or from
// one already submitted or discarded, inputs other than s's, or those of
// GatedDeltaRuleBackwardAuto.
func GatedDeltaRuleBackwardAutoSaved(r *Recorder, s *DeltaRuleSaved, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	if s == nil {
		return GatedDeltaRuleBackwardAuto(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}
	if err := s.check("GatedDeltaRuleBackwardAutoSaved", r, q, k, v, g, beta, dims); err != nil {
		return err
	}
	return backwardAuto(r, s, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
}
