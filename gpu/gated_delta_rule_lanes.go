package gpu

import "fmt"

// gdrLanesCols is the number of value columns each lane of GatedDeltaRuleLanes and
// GatedDeltaRuleBackwardLanes owns for key head dim dk: 8 up to dk = 128 (Qwen3.5's), else 2.
// More columns per lane mean fewer slices: k and q are loaded and broadcast once per 8·S
// columns, and the backward adds its column sums over fewer slices (subgroupAdds were a
// third of its time at 2). At the tiny model's dk = dv = 128, t = 64: the forward 33 → 18 ms
// per step (the same bits: its columns are independent), the backward 0.58× (other bits:
// its sums group the columns otherwise), for ~1.5 s more pipeline compile on lavapipe.
// Above dk = 128 the private state (8 columns × dk/4 vec4s; five copies in the backward)
// would grow the compile further.
func gdrLanesCols(dk int) int {
	if dk <= 128 {
		return 8
	}
	return 2
}

// GatedDeltaRuleLanesFits reports whether GatedDeltaRuleLanes runs on d: a device with a
// probed subgroup size (CPU adapters, Info.SubgroupSize) and dk a multiple of 4, ≤ 256.
// False for a nil device.
func GatedDeltaRuleLanesFits(d *Device, dims DeltaRuleDims) bool {
	return d != nil && d.info.SubgroupSize > 0 && dims.DK%4 == 0 && dims.DK <= 256
}

// GatedDeltaRuleLanes records the gated delta rule token by token, as GatedDeltaRule (same
// arguments, layouts and result within f32 rounding), in the lane-blocked form of CPU
// adapters (wgsl/gated_delta_rule_lanes.wgsl): one subgroup per (window, value head, slice of
// CC·S value columns, CC = gdrLanesCols(dk)), each lane holding CC columns of the state in
// registers and reading
// k_t and q_t through subgroup broadcasts, with no workgroup memory and no barrier (on
// lavapipe every workgroup-memory access and barrier costs a loop over the lanes).
// GatedDeltaRuleAuto takes it wherever GatedDeltaRuleLanesFits. Errors: those of
// GatedDeltaRule, and a device without a probed subgroup size.
func GatedDeltaRuleLanes(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	const op = "GatedDeltaRuleLanes"
	access, binds, err := tokenForwardBindings(r, op, dims, q, k, v, g, beta, o, state)
	if err != nil {
		return err
	}
	s, err := lanesSubgroup(r, op)
	if err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	rows := nb * t
	c := gdrLanesCols(dk)
	d4 := dk / 4
	nslice := (dv + s*c - 1) / (s * c)
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_delta_rule_lanes.wgsl",
		Params: struct {
			S, C, DK, DV, D4, KL, NSLICE int
			WantState, Backward          bool
		}{s, c, dk, dv, d4, (d4 + s - 1) / s, nslice, state != nil, false},
		Bindings: access, Uniforms: 4,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(nb * hv * nslice)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	if err := r.Dispatch(kern, grid, []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv)}, binds...); err != nil {
		return err
	}
	// Per token and column: the decay, Sᵀk, the update and Sᵀq, 2·dk flops each but the decay.
	r.Cost(7*float64(rows)*float64(hv)*float64(dk)*float64(dv), 4*float64(rows)*float64(2*hk*dk+2*hv*dv+2*hv))
	return nil
}

// lanesSubgroup returns the subgroup size the lane-blocked kernels of op run with, or an
// error on a device without one (GPUs).
func lanesSubgroup(r *Recorder, op string) (int, error) {
	s := r.d.info.SubgroupSize
	if s == 0 {
		return 0, fmt.Errorf("gpu: %s: %s has no probed subgroup size (the lane-blocked kernels run on CPU adapters)", op, r.d.info.Name)
	}
	return s, nil
}
