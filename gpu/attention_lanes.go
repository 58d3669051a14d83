package gpu

import (
	"fmt"
	"math"
)

// AttentionLanesFits reports whether AttentionLanes and AttentionBackwardLanes run on d for
// dims: a probed subgroup size (CPU adapters, Info.SubgroupSize) and a head_dim that is a
// multiple of 4. False for a nil device.
func AttentionLanesFits(d *Device, dims AttentionDims) bool {
	return d != nil && d.info.SubgroupSize > 0 && dims.HeadDim%4 == 0
}

// attentionLanesParams are attention_lanes.wgsl's template parameters.
type attentionLanesParams struct{ S, HD, D4, Pass int }

// attentionLanesPrep checks the lane-blocked passes' common arguments and buffers (named
// as in bufs, each with its element count) and returns the subgroup size and scale uniforms.
func attentionLanesPrep(r *Recorder, op string, dims AttentionDims, bufs map[string]*Buffer, counts map[string]int) (int, []uint32, error) {
	if err := dims.check(r, op); err != nil {
		return 0, nil, err
	}
	if dims.HeadDim%4 != 0 {
		return 0, nil, fmt.Errorf("gpu: %s: headDim = %d must be a multiple of 4", op, dims.HeadDim)
	}
	s, err := lanesSubgroup(r, op)
	if err != nil {
		return 0, nil, err
	}
	for name, n := range counts {
		if err := need(op, name, bufs[name], n, F32); err != nil {
			return 0, nil, err
		}
	}
	if err := distinct(op, bufs); err != nil {
		return 0, nil, err
	}
	scale := float32(1 / math.Sqrt(float64(dims.HeadDim)))
	return s, []uint32{uint32(dims.NB), uint32(dims.T), uint32(dims.NH), uint32(dims.NKV), math.Float32bits(scale)}, nil
}

// AttentionLanes records Attention (same arguments, layouts and results within f32 rounding)
// in the lane-blocked form of CPU adapters (wgsl/attention_lanes.wgsl, Pass 0): one subgroup
// per (window, query head, block of S query rows), each lane one query row with its q and
// output accumulator in registers, the keys S at a time, each lane loading one key's k and v
// rows and every lane reading them through subgroup broadcasts (no workgroup memory, no
// barrier). AttentionAuto takes it wherever AttentionLanesFits. Errors: those of Attention,
// headDim not a multiple of 4, a device without a probed subgroup size.
func AttentionLanes(r *Recorder, q, k, v, out, lse *Buffer, dims AttentionDims) error {
	const op = "AttentionLanes"
	rows := dims.NB * dims.T
	nq, nk := rows*dims.NH*dims.HeadDim, rows*dims.NKV*dims.HeadDim
	s, uni, err := attentionLanesPrep(r, op, dims, map[string]*Buffer{"q": q, "k": k, "v": v, "out": out, "lse": lse},
		map[string]int{"q": nq, "k": nk, "v": nk, "out": nq, "lse": rows * dims.NH})
	if err != nil {
		return err
	}
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "attention_lanes.wgsl", Params: attentionLanesParams{s, dims.HeadDim, dims.HeadDim / 4, 0},
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(dims.NB * dims.NH * ((dims.T + s - 1) / s))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	if err := r.Dispatch(kern, grid, uni, Whole(q), Whole(k), Whole(v), Whole(out), Whole(lse)); err != nil {
		return err
	}
	r.Cost(attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 4))
	return nil
}

// AttentionBackwardLanes records AttentionBackward (same arguments, layouts and gradients
// within f32 rounding) in the lane-blocked form of CPU adapters (wgsl/attention_lanes.wgsl):
// Pass 1, one subgroup per (window, query head, block of S query rows), forms each row's
// D_i = dout_i·out_i (into a recorder temporary [nb·t, nh]) and dq_i over the keys j ≤ i;
// Pass 2, one subgroup per (window, KV head, block of S key rows), forms dk_j and dv_j over
// the group's query heads in order and the query rows i ≥ j, so no sum pass is needed
// (deterministic). AttentionBackwardAuto takes it wherever AttentionLanesFits. Errors: those
// of AttentionBackward, headDim not a multiple of 4, a device without a probed subgroup
// size; a failed call records nothing.
func AttentionBackwardLanes(r *Recorder, q, k, v, out, lse, dout, dq, dk, dv *Buffer, dims AttentionDims) error {
	const op = "AttentionBackwardLanes"
	rows := dims.NB * dims.T
	nq, nk := rows*dims.NH*dims.HeadDim, rows*dims.NKV*dims.HeadDim
	s, uni, err := attentionLanesPrep(r, op, dims,
		map[string]*Buffer{"q": q, "k": k, "v": v, "out": out, "lse": lse, "dout": dout, "dq": dq, "dk": dk, "dv": dv},
		map[string]int{"q": nq, "k": nk, "v": nk, "out": nq, "lse": rows * dims.NH, "dout": nq, "dq": nq, "dk": nk, "dv": nk})
	if err != nil {
		return err
	}
	acc := []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}
	kq, err := r.d.Kernel(KernelSpec{Name: op + ".dq", File: "attention_lanes.wgsl",
		Params: attentionLanesParams{s, dims.HeadDim, dims.HeadDim / 4, 1}, Bindings: acc, Uniforms: 5})
	if err != nil {
		return err
	}
	kkv, err := r.d.Kernel(KernelSpec{Name: op + ".dkv", File: "attention_lanes.wgsl",
		Params: attentionLanesParams{s, dims.HeadDim, dims.HeadDim / 4, 2}, Bindings: acc, Uniforms: 5})
	if err != nil {
		return err
	}
	nblk := (dims.T + s - 1) / s
	gq, err := Grid1D(dims.NB * dims.NH * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gkv, err := Grid1D(dims.NB * dims.NKV * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	delta, err := r.Temp(op+" delta", F32, rows, dims.NH)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	mark := len(r.ops)
	if err := r.Dispatch(kq, gq, uni, Whole(q), Whole(k), Whole(v), Whole(out), Whole(dout), Whole(lse), Whole(dq), Whole(delta)); err != nil {
		return err
	}
	fl, by := attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 6)
	r.Cost(fl, by+8*float64(nq))
	if err := r.Dispatch(kkv, gkv, uni, Whole(q), Whole(k), Whole(v), Whole(dout), Whole(lse), Whole(delta), Whole(dk), Whole(dv)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	fl, _ = attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 8)
	r.Cost(fl, 4*float64(2*nq+2*nk)+8*float64(rows*dims.NH*dims.HeadDim))
	return nil
}

// AttentionAuto records Attention with AttentionCoopmat where tensor cores are on
// (AttentionCoopmatFits; within the bound of its f16 operands), else with AttentionLanes on
// CPU adapters (AttentionLanesFits), else with Attention; the arguments and outputs are
// theirs, equal within f32 rounding (gpu tests). Where the cooperative-matrix kernel cannot
// be made (the layer did not swap it: tensor cores go off with the reason) the WGSL kernels
// run. Errors: those of the launcher taken.
func AttentionAuto(r *Recorder, q, k, v, out, lse *Buffer, dims AttentionDims) error {
	wgsl := func() error {
		if r != nil && AttentionLanesFits(r.Device(), dims) {
			return AttentionLanes(r, q, k, v, out, lse, dims)
		}
		return Attention(r, q, k, v, out, lse, dims)
	}
	if r != nil && AttentionCoopmatFits(r.Device(), dims) {
		return coopOrWGSL(func() error { return AttentionCoopmat(r, q, k, v, out, lse, dims) }, wgsl)
	}
	return wgsl()
}

// AttentionBackwardAuto records AttentionBackward with AttentionBackwardCoopmat where tensor
// cores are on (AttentionCoopmatFits; within the bound of its f16 operands), else with
// AttentionBackwardLanes on CPU adapters (AttentionLanesFits), else with AttentionBackward;
// the arguments and outputs are theirs, equal within f32 rounding (gpu tests). Where the
// cooperative-matrix kernels cannot be made the WGSL kernels run. Errors: those of the
// launcher taken.
func AttentionBackwardAuto(r *Recorder, q, k, v, out, lse, dout, dq, dk, dv *Buffer, dims AttentionDims) error {
	wgsl := func() error {
		if r != nil && AttentionLanesFits(r.Device(), dims) {
			return AttentionBackwardLanes(r, q, k, v, out, lse, dout, dq, dk, dv, dims)
		}
		return AttentionBackward(r, q, k, v, out, lse, dout, dq, dk, dv, dims)
	}
	if r != nil && AttentionCoopmatFits(r.Device(), dims) {
		return coopOrWGSL(func() error { return AttentionBackwardCoopmat(r, q, k, v, out, lse, dout, dq, dk, dv, dims) }, wgsl)
	}
	return wgsl()
}
