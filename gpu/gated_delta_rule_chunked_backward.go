package gpu

import "fmt"

// gdrcbParams are gated_delta_rule_chunked_backward.wgsl's template parameters.
type gdrcbParams struct {
	DK, DV, CS int
	Stage      string
	BC         int // stage state: value columns per staged slice
	LPR        int // stage final: invocations per token row
}

// GatedDeltaRuleChunkedBackwardScratch is the number of f32 scratch values
// GatedDeltaRuleChunkedBackward takes from r.Temp for nb windows of t tokens, hv value
// heads and dk×dv states: the forward's (GatedDeltaRuleChunkedScratch) plus its output o
// and V' (2·dv per token and value head), the states before and the state gradients after
// every chunk (2·⌈t/64⌉·dk·dv per window and value head), dV', dW and the WY gradients
// (4·dk + 2·dv per token and value head), one scalar per chunk, and, when hv > hk, the
// per-value-head dq and dk (2·dk per token and value head).
func GatedDeltaRuleChunkedBackwardScratch(dims DeltaRuleDims) int {
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	n := GatedDeltaRuleChunkedScratch(dims) + nb*hv*t*(2*dv+4*dk+2*dv) + nb*hv*nck*(2*dk*dv+1)
	if hk > 0 && hv > hk {
		n += 2 * nb * t * hv * dk
	}
	return n
}

// GatedDeltaRuleChunkedBackward records the backward of GatedDeltaRule (same arguments,
// layouts and outputs as GatedDeltaRuleBackward: q, k, v, g, beta and the output gradient
// do in; dq, dkey, dval, dg, dbeta overwritten, dq and dkey summed over the value heads of
// a key head in head order; deterministic, no atomics) in the chunked form of
// flash-linear-attention (fla/ops/gated_delta_rule/chunk.py chunk_gated_delta_rule_bwd,
// wy_fast.py prepare_wy_repr_bwd, fla/ops/common/chunk_delta_h.py chunk_bwd_dhu,
// chunk_o.py chunk_bwd_dqkwg), chunks of 64 tokens. The math is written out at the top of
// wgsl/gated_delta_rule_chunked_backward.wgsl; only differences of cumulative log-decays
// are exponentiated where a quotient of decays appears. g ≤ −104 (−∞ included) is floored
// as in GatedDeltaRuleChunked, and dg is exactly 0 where g < −104: the floor's derivative,
// and what GatedDeltaRuleBackward gives there (Σ Ŝ⊙dŜ with Ŝ = e^g·S = 0).
//
// Dispatches: the chunked forward (GatedDeltaRuleChunked's two kernels, the inter-chunk
// one untiled, also writing the state before every chunk and V'); Dhu, the state gradients
// chunk by chunk in reverse (one workgroup per window, value head and 32 value columns, as
// the forward's untiled inter-chunk kernel) with dV'; then, every chunk in parallel (one
// workgroup per window, value head and chunk): State (the products with the states), QK
// (the masked q·k gradient), Wy (A recomputed, the WY backward substitution), F (the
// gradient of A), Final (dk, dv, dβ, dγ and the reverse cumulative sum into dg); when
// hv > hk, the sum of dq and dk over the value heads of each key head
// (GatedDeltaRuleBackward's kernel). State, QK and F stage their operands in workgroup
// memory and compute register blocks of unrolled FMAs; Final gives each row eight
// invocations (coalesced reads).
// Scratch: GatedDeltaRuleChunkedBackwardScratch(...) f32 values of r.Temp, in parts of at
// most nb·hv·t·(3dk + dv) or nb·hv·⌈t/64⌉·dk·dv values, each bound whole (each must fit
// maxStorageBufferBindingSize). Limits: dk and dv multiples of 4, dk ≤ 256.
// Measured on the H200 (BenchmarkGatedDeltaRuleChunkedBackward, t = 512, dk = dv = 128, GPU
// time of one call; the sum over the dispatches of per-kernel times measured in two
// benchmark variants, DESIGN.md §9): nb = 1, hv = 2: ≈1.0 ms (GatedDeltaRuleBackward
// 4.5 ms); nb = 8, hk = 16, hv = 32: ≈21.4 ms (GatedDeltaRuleBackward 23.3 ms).
// Errors: non-positive sizes, hv not a multiple of hk, dk or dv out of range, dtype or
// length mismatches, aliasing among the buffers, scratch or workgroup memory beyond the
// device's limits, or any Dispatch error (nothing is left recorded on error).
func GatedDeltaRuleChunkedBackward(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	return gatedDeltaRuleChunkedBackward(r, "GatedDeltaRuleChunkedBackward", q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, false, nil)
}

// gatedDeltaRuleChunkedBackward is GatedDeltaRuleChunkedBackward; with coop the forward's
// inter-chunk pass saving the states and the stages Dhu, State, QK and F run on cooperative
// matrices (GatedDeltaRuleChunkedBackwardCoopmat). With saved (a forward of this recording
// on q, k, v, g, beta and dims, checked by the caller) the forward is not recorded again:
// its scratch, states and V' are saved's.
func gatedDeltaRuleChunkedBackward(r *Recorder, op string, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims, coop bool, saved *DeltaRuleSaved) error {
	if err := dims.check(r, op); err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	if dk%4 != 0 || dk > 256 || dv%4 != 0 {
		return fmt.Errorf("gpu: %s: dk = %d and dv = %d must be multiples of 4, dk ≤ 256", op, dk, dv)
	}
	rows := nb * t
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	ws := 3*dk + dv
	if rows*hv*ws > maxU32Elems || rows*hk*dk > maxU32Elems || nb*hv*nck*dk*dv > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes nb=%d t=%d hk=%d hv=%d dk=%d dv=%d exceed 2³¹ elements", op, nb, t, hk, hv, dk, dv)
	}
	if err := checkGDRBackwardBuffers(op, rows, hk, hv, dk, dv, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta); err != nil {
		return err
	}
	maxB := r.d.info.MaxStorageBindingSize
	for _, n := range []int{rows * hv * ws, nb * hv * nck * dk * dv} {
		if uint64(n)*4 > maxB {
			return fmt.Errorf("gpu: %s: a scratch part of %d bytes (nb=%d t=%d hv=%d dk=%d dv=%d) exceeds maxStorageBufferBindingSize %d; use fewer windows per call",
				op, 4*n, nb, t, hv, dk, dv, maxB)
		}
	}
	cs := gdrcSlice(r.d, dk)
	if cs == 0 {
		return fmt.Errorf("gpu: %s: dk = %d needs more workgroup memory than the device's %d bytes", op, dk, r.d.info.MaxWorkgroupStorage)
	}
	bc := 16 // stage state's slice: dividing dv, bc·(2·dk + 192) ≤ 7168 f32
	for dv%bc != 0 || bc*(2*dk+192) > 7168 {
		bc /= 2
	}
	lpr := 8 // stage final: 64·lpr invocations
	if r.d.info.MaxInvocations < 512 {
		lpr = 4
	}
	// Workgroup memory of the stages beyond dhu (gdrcSlice): state, qk and f, final, wy.
	for _, shm := range []int{4 * (bc*(2*dk+192) + 256), 4 * (4096 + 2048 + 128), 16*128*lpr + 256, 4 * (4096 + 128)} {
		if uint32(shm) > r.d.info.MaxWorkgroupStorage {
			return fmt.Errorf("gpu: %s: needs %d bytes of workgroup memory, the device allows %d", op, shm, r.d.info.MaxWorkgroupStorage)
		}
	}
	kern := func(stage string, nread, nrw int) (*Kernel, error) {
		acc := make([]Access, nread, nread+nrw)
		for i := range acc {
			acc[i] = Read
		}
		acc = append(acc, rwN(nrw)...)
		return r.d.Kernel(KernelSpec{
			Name: op + "." + stage, File: "gated_delta_rule_chunked_backward.wgsl",
			Params:   gdrcbParams{DK: dk, DV: dv, CS: cs, Stage: stage, BC: bc, LPR: lpr},
			Bindings: acc, Uniforms: 5,
		})
	}
	type stageSpec struct {
		name  string
		nread int
		nrw   int
	}
	kerns := map[string]*Kernel{}
	for _, s := range []stageSpec{{"dhu", 6, 2}, {"state", 6, 4}, {"qk", 5, 2}, {"wy", 5, 1}, {"f", 5, 1}, {"final", 9, 4}} {
		if coop && s.name != "wy" && s.name != "final" { // on cooperative matrices (coopDeltaBwd)
			continue
		}
		kr, err := kern(s.name, s.nread, s.nrw)
		if err != nil {
			return err
		}
		kerns[s.name] = kr
	}
	group := hv / hk
	var err error
	gridS, err := Grid1D(nb * hv * ((dv + cs - 1) / cs))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gridC, err := Grid1D(nb * hv * nck)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	tmp := func(name string, shape ...int) *Buffer {
		if err != nil {
			return nil
		}
		var b *Buffer
		b, err = r.Temp(op+" "+name, F32, shape...)
		return b
	}
	var o, h, vnew *Buffer
	if saved == nil {
		o = tmp("o", rows, hv, dv)
		h = tmp("h", nb*hv*nck, dk, dv)
		vnew = tmp("V'", rows*hv, dv)
	} else {
		h, vnew = saved.h, saved.vnew
	}
	dh := tmp("dh", nb*hv*nck, dk, dv)
	dvp := tmp("dV'", rows*hv, dv)
	dwt := tmp("dW", rows*hv, dk)
	wyb := tmp("dR G H", rows*hv, ws)
	dgl := tmp("dγ last", nb*hv*nck)
	dqv, dkv := dq, dkey
	if group > 1 {
		dqv = tmp("dq per value head", rows, hv, dk)
		dkv = tmp("dk per value head", rows, hv, dk)
	}
	if err != nil {
		return err
	}
	fail := r.rollback()
	var sc *gdrcScratch
	if saved != nil {
		sc = saved.sc
	} else if sc, err = gatedDeltaRuleChunked(r, op, q, k, v, g, beta, o, nil, h, vnew, dims, coop); err != nil {
		return fail(err)
	}
	uni := []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(nck)}
	fc := float64(rows * hv)
	fk, fv := float64(dk), float64(dv)
	steps := []struct {
		name         string
		k            *Kernel
		grid         [3]int
		binds        []*Buffer
		flops, bytes float64
	}{
		{"dhu", kerns["dhu"], gridS, []*Buffer{q, k, sc.w, sc.aqk, sc.gc, do, dh, dvp},
			fc * 2 * (2*fk*fv + 32*fv), 4 * (fc*(2*fk+GatedDeltaRuleChunkLen+1+2*fv) + float64(nb*hv*nck)*fk*fv)},
		{"state", kerns["state"], gridC, []*Buffer{h, dh, do, vnew, dvp, sc.gc, dqv, dkv, dwt, dgl},
			fc * 2 * 3 * fk * fv, 4 * (2*float64(nb*hv*nck)*fk*fv + fc*(3*fv+1+3*fk))},
		{"qk", kerns["qk"], gridC, []*Buffer{q, k, do, vnew, sc.gc, dqv, dkv},
			fc * 2 * (32*fv + 128*fk), 4 * fc * (2*fk + 2*fv + 1 + 4*fk)},
		{"wy", kerns["wy"], gridC, []*Buffer{k, sc.gc, beta, dwt, dvp, wyb},
			fc * 2 * (32*fk + 32*(fk+fv)), 4 * fc * (fk + 2 + 2*fk + 2*fv)},
		{"f", kerns["f"], gridC, []*Buffer{k, sc.w, sc.u, sc.gc, beta, wyb},
			fc * 2 * (32*(2*fk+fv) + 128*fk), 4 * fc * (fk + 2 + 2*(fk+fv) + 2*fk)},
		{"final", kerns["final"], gridC, []*Buffer{q, k, v, sc.gc, beta, g, dqv, wyb, dgl, dkv, dval, dg, dbeta},
			fc * 2 * (6*fk + 2*fv), 4 * fc * (3*fk + 2*fv + 3*fk + fv + 5)},
	}
	var cb *coopDeltaBwd
	if coop {
		cb = newCoopDeltaBwd(r, op, dims, sc)
		defer cb.done()
	}
	for _, s := range steps {
		if coop && s.name != "wy" && s.name != "final" { // on cooperative matrices
			if err := cb.record(s.name, do, h, dh, vnew, dvp, q, k, beta, wyb, dqv, dkv, dwt, dgl, s.flops, s.bytes); err != nil {
				return fail(err)
			}
			continue
		}
		binds := make([]Binding, len(s.binds))
		for j, b := range s.binds {
			binds[j] = Whole(b)
		}
		if err := r.Dispatch(s.k, s.grid, uni, binds...); err != nil {
			return fail(err)
		}
		r.Cost(s.flops, s.bytes)
	}
	if group > 1 {
		for _, p := range [][2]*Buffer{{dqv, dq}, {dkv, dkey}} {
			if err := gdrSum(r, op+".gva", p[0], p[1], rows*hk*dk, dk, group, 1, 0); err != nil {
				return fail(err)
			}
			r.Cost(float64(rows*hv*dk), 4*float64(rows*(hv+hk)*dk))
		}
	}
	return nil
}

// rwN returns n ReadWrite accesses.
func rwN(n int) []Access {
	a := make([]Access, n)
	for i := range a {
		a[i] = ReadWrite
	}
	return a
}
