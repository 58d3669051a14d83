package gpu

import "fmt"

// gatedDeltaRuleLanesChunk is the chunk of tokens GatedDeltaRuleBackwardLanes recomputes
// from a checkpoint at a time; the kernel unrolls a chunk and keeps its states in private
// variables (the stack on lavapipe), so the WGSL and its compile time grow with it.
const gatedDeltaRuleLanesChunk = 4

// gdrbLanesParams are gated_delta_rule_lanes.wgsl's template parameters (Backward).
type gdrbLanesParams struct {
	S, C, DK, DV, D4, KL, NSLICE, CL int
	Backward                         bool
}

// gdrbLanesSizes returns the f32 sizes of GatedDeltaRuleBackwardLanes's scratch (the
// checkpoints) and of its partial sums (dq and dk, then dβ and dg), and the number of column
// slices.
func gdrbLanesSizes(d *Device, dims DeltaRuleDims) (scratch, part, part1, nslice int) {
	s := max(d.info.SubgroupSize, 1)
	cl := gatedDeltaRuleLanesChunk
	nck := (dims.T + cl - 1) / cl
	cc := gdrLanesCols(dims.DK)
	nslice = (dims.DV + s*cc - 1) / (s * cc)
	rows := dims.NB * dims.T
	return dims.NB * dims.HV * nck * dims.DK * dims.DV, 2 * nslice * rows * dims.HV * dims.DK, 2 * nslice * rows * dims.HV, nslice
}

// GatedDeltaRuleBackwardLanesFits reports whether GatedDeltaRuleBackwardLanes runs on d for
// dims: a probed subgroup size (CPU adapters), dk a multiple of 4 and ≤ 256, and its scratch
// and partial sums each within one storage binding. False for a nil device.
func GatedDeltaRuleBackwardLanesFits(d *Device, dims DeltaRuleDims) bool {
	if d == nil || d.info.SubgroupSize == 0 || dims.DK%4 != 0 || dims.DK > 256 {
		return false
	}
	scratch, part, _, _ := gdrbLanesSizes(d, dims)
	return fitsBinding(d, scratch, 1) && fitsBinding(d, part, 1)
}

// GatedDeltaRuleBackwardLanes records the backward of the gated delta rule, as
// GatedDeltaRuleBackward (same arguments, layouts and gradients within f32 rounding), in the
// lane-blocked form of CPU adapters (wgsl/gated_delta_rule_lanes.wgsl, Backward): one
// subgroup per (window, value head, slice of CC·S value columns, CC = gdrLanesCols(dk))
// sweeps the window forward writing a checkpoint every gatedDeltaRuleLanesChunk (4) tokens,
// then goes back chunk by chunk, recomputing the chunk's states from its checkpoint into
// private variables and stepping its tokens back with the state and its gradient in
// registers; per-slice column sums of dq, dk, dβ and dg are added over the lanes and then
// over slices and value heads by a second kernel, in a fixed order (deterministic).
// GatedDeltaRuleBackwardAuto takes it wherever GatedDeltaRuleBackwardLanesFits.
// Memory: scratch of r.Temp, 4·nb·hv·⌈t/CL⌉·dk·dv bytes (CL = gatedDeltaRuleLanesChunk), and
// partial sums 8·⌈dv/(CC·S)⌉·nb·t·hv·(dk + 1) bytes, each within one storage binding.
// Errors: those of GatedDeltaRuleBackward, a device without a probed subgroup size, dk not a
// multiple of 4 or above 256, and scratch or partial sums beyond one binding.
func GatedDeltaRuleBackwardLanes(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	const op = "GatedDeltaRuleBackwardLanes"
	if err := dims.check(r, op); err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	if dk%4 != 0 || dk > 256 {
		return fmt.Errorf("gpu: %s: dk = %d must be a multiple of 4 and ≤ 256", op, dk)
	}
	s, err := lanesSubgroup(r, op)
	if err != nil {
		return err
	}
	rows := nb * t
	scratch, part, part1, nslice := gdrbLanesSizes(r.d, dims)
	if rows*hv*dv > maxU32Elems || rows*hk*dk > maxU32Elems || scratch > maxU32Elems || part > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes nb=%d t=%d hk=%d hv=%d dk=%d dv=%d exceed 2³¹ elements", op, nb, t, hk, hv, dk, dv)
	}
	if err := checkGDRBackwardBuffers(op, rows, hk, hv, dk, dv, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta); err != nil {
		return err
	}
	for _, c := range []struct {
		what string
		n    int
	}{{"checkpoint scratch", scratch}, {"partial sums", part}} {
		if b := 4 * uint64(c.n); b > r.d.info.MaxStorageBindingSize {
			return fmt.Errorf("gpu: %s: the %s (%d bytes for nb=%d t=%d hv=%d dk=%d dv=%d) exceed maxStorageBufferBindingSize %d; use fewer windows per call",
				op, c.what, b, nb, t, hv, dk, dv, r.d.info.MaxStorageBindingSize)
		}
	}
	cl := gatedDeltaRuleLanesChunk
	nck := (t + cl - 1) / cl
	d4 := dk / 4
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_delta_rule_lanes.wgsl",
		Params:   gdrbLanesParams{S: s, C: gdrLanesCols(dk), DK: dk, DV: dv, D4: d4, KL: (d4 + s - 1) / s, NSLICE: nslice, CL: cl, Backward: true},
		Bindings: []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite},
		Uniforms: 5,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(nb * hv * nslice)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	scr, err := r.Temp(op+" checkpoints", F32, scratch)
	if err != nil {
		return err
	}
	pt, err := r.Temp(op+" dq, dk per slice", F32, part)
	if err != nil {
		return err
	}
	pt1, err := r.Temp(op+" dβ, dg per slice", F32, part1)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	if err := r.Dispatch(kern, grid, []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(nck)},
		Whole(q), Whole(k), Whole(v), Whole(g), Whole(beta), Whole(do), Whole(dval), Whole(scr), Whole(pt), Whole(pt1)); err != nil {
		return err
	}
	for _, sum := range []struct {
		part           *Buffer
		out            *Buffer
		off, n, w, grp int
	}{
		{pt, dq, 0, rows * hk * dk, dk, hv / hk},
		{pt, dkey, part / 2, rows * hk * dk, dk, hv / hk},
		{pt1, dbeta, 0, rows * hv, 1, 1},
		{pt1, dg, part1 / 2, rows * hv, 1, 1},
	} {
		if err := gdrSum(r, op+".sum", sum.part, sum.out, sum.n, sum.w, sum.grp, nslice, sum.off); err != nil {
			r.ops = r.ops[:mark]
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
	}
	return nil
}
