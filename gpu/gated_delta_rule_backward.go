package gpu

import (
	"fmt"
	"math"
)

// gatedDeltaRuleBackwardWG is the workgroup size of the GVA reduction of dq and dk.
const gatedDeltaRuleBackwardWG = 256

// gatedDeltaRuleBackwardCols is the number of value columns per workgroup of the
// checkpoint sweep.
const gatedDeltaRuleBackwardCols = 32

// gdrbParams are gated_delta_rule_backward.wgsl's template parameters: the main entry
// (DK, DV, TR, TC) or the checkpoint sweep (Ckpt: DK, DV, COLS).
type gdrbParams struct {
	DK, DV, TR, TC, COLS int
	Ckpt                 bool
}

// gdrSumParams are gated_delta_rule_sum.wgsl's template parameters.
type gdrSumParams struct{ WG int }

// gdrSum records the backward's fixed-order partial-gradient sum (gated_delta_rule_sum.wgsl)
// as the kernel name: out[r, a] = Σ_{s < ns} Σ_{m < g} part[off + ((s·R + r)·g + m)·w + a]
// for the n = R·w elements of out (f32). The token and chunked forms add the value heads of a
// key head (g = hv/hk, ns = 1), the lane form also its column slices.
func gdrSum(r *Recorder, name string, part, out *Buffer, n, w, g, ns, off int) error {
	k, err := r.d.Kernel(KernelSpec{
		Name: name, File: "gated_delta_rule_sum.wgsl", Params: gdrSumParams{WG: gatedDeltaRuleBackwardWG},
		Bindings: []Access{Read, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D((n + gatedDeltaRuleBackwardWG - 1) / gatedDeltaRuleBackwardWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", name, err)
	}
	return r.Dispatch(k, grid, []uint32{uint32(n), uint32(w), uint32(g), uint32(ns), uint32(off)}, Whole(part), Whole(out))
}

// GatedDeltaRuleChunk is the number of tokens between the state checkpoints that
// GatedDeltaRuleBackward keeps for windows of t tokens: ⌈√t⌉, which minimises the
// checkpoints plus the recomputed chunk states, ⌈t/C⌉ + C (e.g. 23 for t = 512: 46 states
// per window and value head instead of 512).
func GatedDeltaRuleChunk(t int) int {
	if t < 1 {
		return 1
	}
	c := int(math.Ceil(math.Sqrt(float64(t))))
	for c*c < t { // guard the float rounding
		c++
	}
	for c > 1 && (c-1)*(c-1) >= t {
		c--
	}
	return c
}

// GatedDeltaRuleBackwardScratch is the number of f32 scratch values GatedDeltaRuleBackward
// takes from r.Temp for nb windows of t tokens, hv value heads and dk×dv states: per window
// and value head, with C = GatedDeltaRuleChunk(t), ⌈t/C⌉ state checkpoints and C recomputed
// chunk states of dk·dv values each, plus u and w of the chunk's tokens (2·C·dv); when
// hv > hk, also the per-value-head dq and dk (2·nb·t·hv·dk) before their GVA sum.
func GatedDeltaRuleBackwardScratch(dims DeltaRuleDims) int {
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	c := GatedDeltaRuleChunk(t)
	nck := (t + c - 1) / c
	n := nb * hv * ((nck+c)*dk*dv + 2*c*dv)
	if hk > 0 && hv > hk {
		n += 2 * nb * t * hv * dk
	}
	return n
}

// GatedDeltaRuleBackward records the backward of GatedDeltaRule (same q, k, v, g, beta,
// nb, t, hk, hv, dk, dv) for the output gradient do, in reverse time
// (host.GatedDeltaRuleBackward, DESIGN.md §3). Per window and value head j (key head
// kh = j / (hv/hk)), with S_{τ−1} the state before token τ, Ŝ = e^{g}·S_{τ−1},
// w = v − Ŝᵀk, u = β·w, S_τ = Ŝ + k⊗u, o = S_τᵀq, and dS the gradient carried into S_τ
// (zero after the window's last token):
//
//	dS += q⊗do;  dq = S_τ·do;  du = dSᵀk;  dk = dS·u − Ŝ·(β·du);  dβ = du·w;  dv = β·du;
//	dŜ = dS − k⊗(β·du);  dg = Σ Ŝ⊙dŜ;  dS ← e^{g}·dŜ.
//
// Layouts, all F32 row-major: q, k, dq and dkey [nb·t, hk, dk]; v, do and dval
// [nb·t, hv, dv]; g, beta, dg and dbeta [nb·t, hv]. The five gradients are overwritten (not
// accumulated); dq and dkey are summed over the hv/hk value heads sharing a key head, in
// head order (deterministic: no atomics anywhere, repeated calls give identical bits).
//
// Method, three dispatches, f32 throughout: (1) a forward sweep (one workgroup per window,
// value head and 32 value columns, one state column per invocation, as GatedDeltaRule)
// writes the state before every chunk of C = GatedDeltaRuleChunk(t) tokens; (2) one
// workgroup of 256 invocations per (window, value head), the state and its gradient split
// into 16×16 strided tiles held in private memory, goes chunk by chunk in reverse:
// recompute the chunk's states from its checkpoint, then step its tokens back one by one;
// (3) when hv > hk, the per-value-head dq and dk are summed per key head.
// Memory: GatedDeltaRuleBackwardScratch(nb, t, hk, hv, dk, dv) f32 values of r.Temp, i.e.
// (⌈t/C⌉ + C)·dk·dv·4 bytes per window and value head (3.0 MB at t = 512, dk = dv = 128),
// bound as one storage binding, so it must fit maxStorageBufferBindingSize (128 MiB on
// lavapipe, 2 GiB on the H200). Cost: about 3·t·dk·dv state updates per window and value
// head (the sweep, the recompute, the backward step; ≈ 2.5× a forward call's arithmetic);
// the reverse pass has 8 workgroup barriers per token and runs the windows' value heads in
// parallel (nb·hv workgroups), the tokens of one head sequentially, so it is latency-bound
// (~9 µs per token on an H200). Measured with BenchmarkGatedDeltaRuleBackward (nb = 1,
// t = 512, hk = 1, hv = 2, dk = dv = 128): on an H200 4.5 ms of GPU time in the reverse
// kernel plus ~0.8 ms in the sweep, ~66k tokens/s for the whole call (the forward: 0.55 ms,
// ~190k tokens/s); on lavapipe 0.8–2.3k tokens/s depending on the machine's load. A chunked
// (WY-form) backward would be the next step for speed.
//
// Limits: dk, dv ≤ 256 (any value, not just multiples of 4) and the workgroup memory
// 4·(18·16⌈dk/16⌉ + 20·16⌈dv/16⌉) + 2176 bytes (21 KiB at 128) within the device's limit.
// Errors: non-positive sizes, hv not a multiple of hk, dk or dv out of range, dtype or
// length mismatches, aliasing among the buffers, scratch or workgroup memory beyond the
// device's limits, or any Dispatch error (nothing is left recorded on error).
func GatedDeltaRuleBackward(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	const op = "GatedDeltaRuleBackward"
	if err := dims.check(r, op); err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	if dk > 256 || dv > 256 {
		return fmt.Errorf("gpu: %s: dk = %d and dv = %d must be ≤ 256", op, dk, dv)
	}
	rows := nb * t
	scratch := GatedDeltaRuleBackwardScratch(dims)
	if rows*hv*dv > maxU32Elems || rows*hk*dk > maxU32Elems || rows*hv*dk > maxU32Elems || scratch > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes nb=%d t=%d hk=%d hv=%d dk=%d dv=%d exceed 2³¹ elements", op, nb, t, hk, hv, dk, dv)
	}
	if err := checkGDRBackwardBuffers(op, rows, hk, hv, dk, dv, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta); err != nil {
		return err
	}
	tr, tc := (dk+15)/16, (dv+15)/16
	if shm := 4*(18*16*tr+20*16*tc) + 2048 + 128; uint32(shm) > r.d.info.MaxWorkgroupStorage {
		return fmt.Errorf("gpu: %s: dk = %d, dv = %d need %d bytes of workgroup memory, the device allows %d",
			op, dk, dv, shm, r.d.info.MaxWorkgroupStorage)
	}
	group := hv / hk
	chunk := GatedDeltaRuleChunk(t)
	nck := (t + chunk - 1) / chunk
	stateN := nb * hv * ((nck+chunk)*dk*dv + 2*chunk*dv)
	if b := uint64(stateN) * 4; b > r.d.info.MaxStorageBindingSize {
		return fmt.Errorf("gpu: %s: the checkpoint scratch (%d bytes for nb=%d t=%d hv=%d dk=%d dv=%d) exceeds maxStorageBufferBindingSize %d; use fewer windows per call",
			op, b, nb, t, hv, dk, dv, r.d.info.MaxStorageBindingSize)
	}
	sweep, err := r.d.Kernel(KernelSpec{
		Name: op + ".checkpoints", File: "gated_delta_rule_backward.wgsl",
		Params:   gdrbParams{DK: dk, DV: dv, COLS: gatedDeltaRuleBackwardCols, Ckpt: true},
		Bindings: []Access{Read, Read, Read, Read, ReadWrite}, Uniforms: 6,
	})
	if err != nil {
		return err
	}
	sweepGrid, err := Grid1D(nb * hv * ((dv + gatedDeltaRuleBackwardCols - 1) / gatedDeltaRuleBackwardCols))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_delta_rule_backward.wgsl",
		Params:   gdrbParams{DK: dk, DV: dv, TR: tr, TC: tc},
		Bindings: []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, ReadWrite, ReadWrite},
		Uniforms: 6,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(nb * hv)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	scr, err := r.Temp(op+" checkpoints", F32, stateN)
	if err != nil {
		return err
	}
	dqOut, dkOut := dq, dkey
	if group > 1 {
		if dqOut, err = r.Temp(op+" dq per value head", F32, rows, hv, dk); err != nil {
			return err
		}
		if dkOut, err = r.Temp(op+" dk per value head", F32, rows, hv, dk); err != nil {
			return err
		}
	}
	mark := len(r.ops)
	uni := []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(chunk), uint32(nck)}
	if err := r.Dispatch(sweep, sweepGrid, uni, Whole(k), Whole(v), Whole(g), Whole(beta), Whole(scr)); err != nil {
		return err
	}
	if err := r.Dispatch(kern, grid, uni,
		Whole(q), Whole(k), Whole(v), Whole(g), Whole(beta), Whole(do),
		Whole(dqOut), Whole(dkOut), Whole(dval), Whole(dg), Whole(dbeta), Whole(scr)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	if group > 1 {
		for _, p := range [][2]*Buffer{{dqOut, dq}, {dkOut, dkey}} {
			if err := gdrSum(r, op+".gva", p[0], p[1], rows*hk*dk, dk, group, 1, 0); err != nil {
				r.ops = r.ops[:mark]
				return err
			}
		}
	}
	return nil
}

// checkGDRBackwardBuffers validates the buffers of a gated delta rule backward (both forms):
// F32 inputs q, k [rows, hk, dk], v, do [rows, hv, dv], g, beta [rows, hv] and gradients of
// the same shapes, all distinct.
func checkGDRBackwardBuffers(op string, rows, hk, hv, dk, dv int, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer) error {
	bufs := map[string]*Buffer{"q": q, "k": k, "v": v, "g": g, "beta": beta, "do": do,
		"dq": dq, "dkey": dkey, "dval": dval, "dg": dg, "dbeta": dbeta}
	for _, c := range []struct {
		name string
		n    int
	}{{"q", rows * hk * dk}, {"k", rows * hk * dk}, {"v", rows * hv * dv}, {"g", rows * hv}, {"beta", rows * hv},
		{"do", rows * hv * dv}, {"dq", rows * hk * dk}, {"dkey", rows * hk * dk}, {"dval", rows * hv * dv},
		{"dg", rows * hv}, {"dbeta", rows * hv}} {
		if err := need(op, c.name, bufs[c.name], c.n, F32); err != nil {
			return err
		}
	}
	return distinct(op, bufs)
}
