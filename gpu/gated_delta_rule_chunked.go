package gpu

import "fmt"

// GatedDeltaRuleChunkLen is the chunk length of GatedDeltaRuleChunked and
// GatedDeltaRuleChunkedBackward (the C = 64 of flash-linear-attention's chunked kernels).
const GatedDeltaRuleChunkLen = 64

// gdrcParams are gated_delta_rule_chunked.wgsl's template parameters: the intra-chunk
// entry (Intra: DK, DV) or the inter-chunk one (DK, DV, CS, WantState, SaveH and the
// binding numbers that follow from them).
type gdrcParams struct {
	DK, DV, CS         int
	Intra              bool
	Unroll             bool // intra: the forward substitution unrolled over the chunk's rows
	Tiled              bool // inter: the tiled kernel (with BK, IT, ND)
	BK, IT, ND         int
	WantState, SaveH   bool
	HBinding, UBinding int
}

// gdrcTiles returns the tiled inter-chunk kernel's BK (the largest of 32, 16, 8, 4 dividing
// dk), IT (the largest power of 2 ≤ 64 with IT·dk ≤ 4608) and ND = ⌈dk/128⌉.
func gdrcTiles(dk int) (bk, it, nd int) {
	bk = 32
	for dk%bk != 0 {
		bk /= 2
	}
	it = 64
	for it*dk > 4608 {
		it /= 2
	}
	return bk, it, (dk + 127) / 128
}

// gdrcTiledSlice is gdrcSlice for the tiled inter-chunk kernel, whose workgroup memory also
// holds a tile of 4608 f32.
func gdrcTiledSlice(d *Device, dk int) int {
	for _, cs := range []int{32, 16, 8} {
		if uint32(4*(dk*cs+64*cs+4608+128)) <= d.info.MaxWorkgroupStorage {
			return cs
		}
	}
	return 0
}

// gdrcUnroll, when not 0, forces the intra-chunk kernel's forward substitution unrolled (1)
// or as a loop (−1) (tests: SetGDRCUnroll); else gdrcUnrolled decides.
var gdrcUnroll = 0

// gdrcUnrolled reports whether the intra-chunk kernel on d takes its unrolled forward
// substitution: on GPUs, where the loop form's array of 64 values went to local memory and
// made the kernel 3.4 TFLOP/s on an H100; not on CPU adapters, where LLVM takes ~1 min to
// compile each unrolled specialisation (the loop form ~0.2 s). Both add in the same order
// (TestGatedDeltaRuleChunkedUnrolled).
func gdrcUnrolled(d *Device) bool {
	if gdrcUnroll != 0 {
		return gdrcUnroll > 0
	}
	return !d.info.CPU
}

// gdrcCS, when not 0, caps the tiled inter-chunk kernel's slice width (tests: SetGDRCSlice).
var gdrcCS = 0

// gdrcSlice returns the value columns per workgroup of the inter-chunk kernel: 32 when
// its workgroup memory (the state slice dk×cs, V' 64×cs, two gate vectors) fits the
// device, else 16, else 8 (0 when nothing fits).
func gdrcSlice(d *Device, dk int) int {
	for _, cs := range []int{32, 16, 8} {
		if uint32(4*(dk*cs+64*cs+128)) <= d.info.MaxWorkgroupStorage {
			return cs
		}
	}
	return 0
}

// GatedDeltaRuleChunkedScratch is the number of f32 scratch values GatedDeltaRuleChunked
// takes from r.Temp: per window, value head and token, W (dk), U (dv), a row of the masked
// q·k matrix (64) and the cumulative log-decay (1).
func GatedDeltaRuleChunkedScratch(dims DeltaRuleDims) int {
	nb, t, hv, dk, dv := dims.NB, dims.T, dims.HV, dims.DK, dims.DV
	return nb * hv * t * (dk + dv + GatedDeltaRuleChunkLen + 1)
}

// GatedDeltaRuleChunked records the same recurrence as GatedDeltaRule (same arguments,
// layouts and outputs; host.GatedDeltaRule, DESIGN.md §3) in the chunked WY/UT form of
// flash-linear-attention (fla/ops/gated_delta_rule/chunk.py, wy_fast.py,
// fla/ops/common/chunk_delta_h.py, chunk_o.py). Per window b and value head j (key head
// kh = j / (hv/hk)), the t tokens are cut into chunks of C = 64 (the last one shorter);
// in a chunk of L tokens with chunk-local cumulative log-decays γ_i = Σ_{s≤i} g_s:
//
//	A   = tril(diag(β)·(K·Kᵀ ⊙ e^{γ_i − γ_s}), −1),  T = (I + A)⁻¹
//	W   = T·diag(β·e^{γ})·K,  U = T·diag(β)·V,  Aqk = tril(Q·Kᵀ ⊙ e^{γ_i − γ_s})
//	V'  = U − W·S;  O = diag(e^{γ})·Q·S + Aqk·V';  S ← e^{γ_{L−1}}·S + (diag(e^{γ_{L−1}−γ})·K)ᵀ·V'
//
// with S the state before the chunk (zero before the first). Only differences of γ are
// exponentiated where a quotient of decays appears, so strongly negative g underflow to 0
// instead of dividing by 0. γ sums max(g, −104) (GMIN in
// wgsl/gated_delta_rule_chunk_lib.wgsl; e^{−104} rounds to 0 in f32): any g ≤ −104,
// −∞ included (exp(A_log) overflowing f32), forgets the state exactly as exp(g) = 0 does in
// GatedDeltaRule, and γ stays finite, so no −∞ − (−∞) = NaN appears.
//
// Two dispatches: (1) one workgroup per (window, value head, chunk), all chunks in
// parallel, builds A and Aqk from 4×4 tiles of dot products and solves (I + A)·[W U] =
// [diag(β·e^{γ})·K  diag(β)·V] by forward substitution (one column per invocation);
// (2) one workgroup per (window, value head, slice of 32 value columns; 16 or 8 when the
// device's workgroup memory is smaller) runs the chunks in order with its slice of S in
// workgroup memory: the tiled kernel (every operand staged in workgroup memory by coalesced
// vec4 loads, each invocation a 4×4 register block of unrolled FMAs). Scratch:
// GatedDeltaRuleChunkedScratch(nb, t, hv, dk, dv) f32 values of r.Temp (each of its four
// parts bound whole, so each must fit maxStorageBufferBindingSize).
// Measured on the H200 (BenchmarkGatedDeltaRuleChunked, t = 512, dk = dv = 128, GPU time of
// one call, DESIGN.md §9): nb = 1, hv = 2: intra 0.22 ms + inter 0.30 ms (the untiled inter
// kernel 0.49 ms; GatedDeltaRule 2.0 ms); nb = 8, hk = 16, hv = 32: intra 4.4 ms + inter
// 7.2 ms (untiled 9.0 ms; GatedDeltaRule 9.1 ms): faster while the token-by-token kernel is
// latency-bound, slower once both fill the GPU.
// Limits: dk a multiple of 4 and ≤ 256 (as GatedDeltaRule); dv ≥ 1 any.
// Errors: those of GatedDeltaRule, plus scratch or workgroup memory beyond the device's
// limits (nothing is left recorded on error).
func GatedDeltaRuleChunked(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	_, err := gatedDeltaRuleChunked(r, "GatedDeltaRuleChunked", q, k, v, g, beta, o, state, nil, nil, dims, false)
	return err
}

// gdrcScratch holds the intra-chunk outputs of gatedDeltaRuleChunked (r.Temp buffers):
// W [nb·hv·t, dk], U [nb·hv·t, dv], Aqk [nb·hv·t, 64], the cumulative log-decays γ [nb·hv·t].
type gdrcScratch struct{ w, u, aqk, gc *Buffer }

// gatedDeltaRuleChunked is GatedDeltaRuleChunked that also writes, when h and vnew are not
// nil, the state before every chunk, h [nb·hv, ⌈t/64⌉, dk, dv], and V' [nb·hv·t, dv], and
// returns its scratch buffers (for the backward). With coop the inter-chunk stage runs on
// cooperative matrices (coopDeltaInter; the caller checked the device has them).
func gatedDeltaRuleChunked(r *Recorder, op string, q, k, v, g, beta, o, state, h, vnew *Buffer, dims DeltaRuleDims, coop bool) (*gdrcScratch, error) {
	if err := dims.check(r, op); err != nil {
		return nil, err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	if dk%4 != 0 || dk > 256 {
		return nil, fmt.Errorf("gpu: %s: dk = %d must be a multiple of 4 and ≤ 256", op, dk)
	}
	rows := nb * t
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	if rows*hv*dv > maxU32Elems || rows*hk*dk > maxU32Elems || nb*hv*dk*dv > maxU32Elems ||
		rows*hv*dk > maxU32Elems || rows*hv*GatedDeltaRuleChunkLen > maxU32Elems || nb*hv*nck*dk*dv > maxU32Elems {
		return nil, fmt.Errorf("gpu: %s: sizes nb=%d t=%d hk=%d hv=%d dk=%d dv=%d exceed 2³¹ elements", op, nb, t, hk, hv, dk, dv)
	}
	bufs, err := gdrForwardBuffers(op, dims, q, k, v, g, beta, o, state)
	if err != nil {
		return nil, err
	}
	if h != nil {
		if err := need(op, "h", h, nb*hv*nck*dk*dv, F32); err != nil {
			return nil, err
		}
		if err := need(op, "vnew", vnew, rows*hv*dv, F32); err != nil {
			return nil, err
		}
		bufs["h"], bufs["vnew"] = h, vnew
	}
	if err := distinct(op, bufs); err != nil {
		return nil, err
	}
	maxB := r.d.info.MaxStorageBindingSize
	for _, n := range []int{rows * hv * dk, rows * hv * dv, rows * hv * GatedDeltaRuleChunkLen} {
		if uint64(n)*4 > maxB {
			return nil, fmt.Errorf("gpu: %s: a scratch part of %d bytes (nb=%d t=%d hv=%d dk=%d dv=%d) exceeds maxStorageBufferBindingSize %d; use fewer windows per call",
				op, 4*n, nb, t, hv, dk, dv, maxB)
		}
	}
	if shm := uint32(4 * (2*64 + 64*64)); shm > r.d.info.MaxWorkgroupStorage {
		return nil, fmt.Errorf("gpu: %s: needs %d bytes of workgroup memory, the device allows %d", op, shm, r.d.info.MaxWorkgroupStorage)
	}
	var inter *Kernel
	var gridB [3]int
	if coop {
		if err := r.d.coopDeltaPlan(dims); err != nil {
			return nil, fmt.Errorf("gpu: %s: %w", op, err)
		}
	} else if inter, gridB, err = gdrcInterKernel(r, op, dims, state != nil, h != nil); err != nil {
		return nil, err
	}
	intra, err := r.d.Kernel(KernelSpec{
		Name: op + ".intra", File: "gated_delta_rule_chunked.wgsl",
		Params:   gdrcParams{DK: dk, DV: dv, Intra: true, Unroll: gdrcUnrolled(r.d)},
		Bindings: []Access{Read, Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return nil, err
	}
	gridA, err := Grid1D(nb * hv * nck)
	if err != nil {
		return nil, fmt.Errorf("gpu: %s: %w", op, err)
	}
	w, err := r.Temp(op+" W", F32, rows*hv, dk)
	if err != nil {
		return nil, err
	}
	u, err := r.Temp(op+" U", F32, rows*hv, dv)
	if err != nil {
		return nil, err
	}
	aqk, err := r.Temp(op+" Aqk", F32, rows*hv, GatedDeltaRuleChunkLen)
	if err != nil {
		return nil, err
	}
	gc, err := r.Temp(op+" cumulative g", F32, rows*hv)
	if err != nil {
		return nil, err
	}
	mark := len(r.ops)
	uni := []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(nck)}
	if err := r.Dispatch(intra, gridA, uni, Whole(q), Whole(k), Whole(v), Whole(g), Whole(beta),
		Whole(w), Whole(u), Whole(aqk), Whole(gc)); err != nil {
		return nil, err
	}
	// Per chunk: K·Kᵀ and Q·Kᵀ (lower halves, 2·C²/2·dk MACs each), the substitution
	// (C²/2·(dk + dv) MACs); bytes: q, k, v read, W, U, Aqk, γ written.
	fc := float64(rows * hv)
	r.Cost(fc*(2*64*float64(dk)+64*float64(dk+dv)), 4*(fc/float64(hv/hk)*2*float64(dk)+fc*(float64(dv)+2)+fc*float64(dk+dv+GatedDeltaRuleChunkLen+1)))
	sc := &gdrcScratch{w, u, aqk, gc}
	if coop {
		if err := coopDeltaInter(r, op, q, k, sc, o, state, h, vnew, dims); err != nil {
			r.ops = r.ops[:mark]
			return nil, err
		}
		return sc, nil
	}
	binds := []Binding{Whole(q), Whole(k), Whole(w), Whole(u), Whole(aqk), Whole(gc), Whole(o)}
	if state != nil {
		binds = append(binds, Whole(state))
	}
	if h != nil {
		binds = append(binds, Whole(h), Whole(vnew))
	}
	if err := r.Dispatch(inter, gridB, uni, binds...); err != nil {
		r.ops = r.ops[:mark]
		return nil, err
	}
	r.Cost(gdrcInterCost(dims, state != nil, h != nil))
	return sc, nil
}

// gdrcInterCost is the inter-chunk stage's arithmetic and least traffic: per token W·S, Q·S
// and the state update (3·dk·dv MACs) and Aqk·V' (C/2·dv MACs); W, U, Aqk, γ, q, k read
// (once), o written, the states written when asked (final, and per chunk with V' when
// saveH).
func gdrcInterCost(dims DeltaRuleDims, wantState, saveH bool) (flops, bytes float64) {
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	fc := float64(nb * t * hv)
	sb := 0.0
	if wantState {
		sb += float64(nb * hv * dk * dv)
	}
	if saveH {
		sb += float64(nb*hv*nck*dk*dv) + fc*float64(dv)
	}
	return fc * 2 * (3*float64(dk*dv) + 32*float64(dv)),
		4 * (fc*float64(dk+dv+GatedDeltaRuleChunkLen+1) + fc/float64(hv/hk)*2*float64(dk) + fc*float64(dv) + sb)
}

// gdrcInterKernel returns the WGSL inter-chunk kernel for dims (the tiled one for the
// forward, the untiled one when saving the states, DESIGN.md §9) and its grid. Errors: the
// device's workgroup memory too small for dk, or those of Kernel and Grid1D.
func gdrcInterKernel(r *Recorder, op string, dims DeltaRuleDims, wantState, saveH bool) (*Kernel, [3]int, error) {
	dk, dv := dims.DK, dims.DV
	tiled := !saveH && gdrcTiledSlice(r.d, dk) != 0
	cs := gdrcSlice(r.d, dk)
	if tiled {
		cs = gdrcTiledSlice(r.d, dk)
		if gdrcCS != 0 && gdrcCS < cs {
			cs = gdrcCS
		}
	}
	if cs == 0 {
		return nil, [3]int{}, fmt.Errorf("gpu: %s: dk = %d needs more workgroup memory than the device's %d bytes", op, dk, r.d.info.MaxWorkgroupStorage)
	}
	bk, it, nd := gdrcTiles(dk)
	access := []Access{Read, Read, Read, Read, Read, Read, ReadWrite}
	if wantState {
		access = append(access, ReadWrite)
	}
	hb := len(access)
	if saveH {
		access = append(access, ReadWrite, ReadWrite)
	}
	inter, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_delta_rule_chunked.wgsl",
		Params: gdrcParams{DK: dk, DV: dv, CS: cs, Tiled: tiled, BK: bk, IT: it, ND: nd,
			WantState: wantState, SaveH: saveH, HBinding: hb, UBinding: len(access)},
		Bindings: access, Uniforms: 5,
	})
	if err != nil {
		return nil, [3]int{}, err
	}
	grid, err := Grid1D(dims.NB * dims.HV * ((dv + cs - 1) / cs))
	if err != nil {
		return nil, [3]int{}, fmt.Errorf("gpu: %s: %w", op, err)
	}
	return inter, grid, nil
}
