package gpu

import (
	"fmt"
	"math"
)

// attentionBackwardParams are attention_backward.wgsl's template parameters.
type attentionBackwardParams struct {
	Pass, HD, NS, BR, BC, D4, WG int
}

// attentionBackwardConfig returns the pass-0/1 parameters for headDim on a device offering
// maxSmem bytes of workgroup memory and maxInv invocations per workgroup: NS dim slices of
// ≤ 8 vec4s (32 dims) per invocation, WG = 256 invocations, BR = WG/NS rows, and BC tile
// rows (16 for headDim ≤ 128, else 8, halved until the tile, BC·D4·NS vec4s, and the
// partial dots, BC·WG floats, fit). On the H200 (t = 4096, nh 16, nkv 4, head_dim 256)
// 256 invocations took 139 ms against 235 ms for 64 (fewer tile loads per row).
func attentionBackwardConfig(headDim int, maxSmem, maxInv int) (attentionBackwardParams, error) {
	ns := 1
	for 32*ns < headDim {
		ns *= 2
	}
	const wg = 256
	bc := 16
	if headDim > 128 {
		bc = 8
	}
	d4 := (headDim + 4*ns - 1) / (4 * ns)
	smem := func(bc int) int { return bc * (d4*ns*16 + wg*4) }
	for bc > 1 && smem(bc) > maxSmem {
		bc /= 2
	}
	if smem(bc) > maxSmem || wg > maxInv {
		return attentionBackwardParams{}, fmt.Errorf("device offers %d bytes of workgroup memory and %d invocations, fewer than %d and %d",
			maxSmem, maxInv, smem(bc), wg)
	}
	return attentionBackwardParams{HD: headDim, NS: ns, BR: wg / ns, BC: bc, D4: d4, WG: wg}, nil
}

// attentionBackwardBuffers checks AttentionBackward's buffers for dims: F32, the lengths of
// their layouts, all distinct.
func attentionBackwardBuffers(op string, dims AttentionDims, q, k, v, out, lse, dout, dq, dk, dv *Buffer) error {
	rows := dims.NB * dims.T
	nq, nk := rows*dims.NH*dims.HeadDim, rows*dims.NKV*dims.HeadDim
	bufs := map[string]*Buffer{"q": q, "k": k, "v": v, "out": out, "lse": lse, "dout": dout, "dq": dq, "dk": dk, "dv": dv}
	for _, c := range []struct {
		name string
		n    int
	}{{"q", nq}, {"k", nk}, {"v", nk}, {"out", nq}, {"lse", rows * dims.NH}, {"dout", nq}, {"dq", nq}, {"dk", nk}, {"dv", nk}} {
		if err := need(op, c.name, bufs[c.name], c.n, F32); err != nil {
			return err
		}
	}
	return distinct(op, bufs)
}

// AttentionBackward records the backward of Attention (causal softmax attention with
// grouped-query heads, DESIGN.md §3) from the forward's kept per-row log-sum-exp,
// FlashAttention-2 style (host.AttentionBackward): with scale = headDim^−½,
// s_ij = scale·q_i·k_j and p_ij = exp(s_ij − lse_i) for j ≤ i in the same window,
//
//	D_i = dout_i·out_i,  ds_ij = p_ij·(dout_i·v_j − D_i),
//	dq_i = scale·Σ_j ds_ij·k_j,  dk_j = scale·Σ_i ds_ij·q_i,  dv_j = Σ_i p_ij·dout_i,
//
// with dk and dv summed over the nh/nkv query heads that read each KV head (query head h
// reads KV head h / (nh/nkv)).
//
// Layouts, all F32 row-major: q, out, dout and dq [nb·t, nh, headDim]; k, v, dk and dv
// [nb·t, nkv, headDim]; lse [nb·t, nh] (Attention's outputs out and lse for these q, k, v).
// dq, dk and dv are overwritten (not accumulated); all ten buffers distinct.
//
// Up to three dispatches, no atomics (deterministic): pass 0, one workgroup per (window,
// query head, block of query rows), forms D_i into a recorder temporary [nb·t, nh] and dq;
// pass 1, one workgroup per (window, query head, block of key rows), loops over the query
// blocks at or after its keys and forms that head's share of dk and dv; when nh > nkv these
// go to two recorder temporaries [nb·t, nh, headDim] and pass 2 sums the nh/nkv shares of
// each KV head in a fixed order (when nh = nkv pass 1 writes dk and dv directly). Scores
// are recomputed from q, k and lse tile by tile in workgroup memory (no t×t matrix); f32
// throughout; workgroups of 256 invocations and ≤ 24 KiB of workgroup memory (the tile
// height halves on devices offering less). Errors: non-positive sizes, nh not a multiple
// of nkv, headDim > 256, dtype or length mismatches, aliasing, a device without the
// workgroup memory or invocations needed, or any Dispatch error; a failed call records
// nothing.
func AttentionBackward(r *Recorder, q, k, v, out, lse, dout, dq, dk, dv *Buffer, dims AttentionDims) error {
	const op = "AttentionBackward"
	if err := dims.check(r, op); err != nil {
		return err
	}
	if err := attentionBackwardBuffers(op, dims, q, k, v, out, lse, dout, dq, dk, dv); err != nil {
		return err
	}
	nb, t, nh, nkv, headDim := dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim
	rows := nb * t
	nq, nk := rows*nh*headDim, rows*nkv*headDim
	info := r.d.Info()
	pq, err := attentionBackwardConfig(headDim, int(info.MaxWorkgroupStorage), int(info.MaxInvocations))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	pkv := pq
	pkv.Pass = 1
	kq, err := r.d.Kernel(KernelSpec{
		Name: op + ".dq", File: "attention_backward.wgsl", Params: pq,
		Bindings: []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	kkv, err := r.d.Kernel(KernelSpec{
		Name: op + ".dkv", File: "attention_backward.wgsl", Params: pkv,
		Bindings: []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	psum := pq
	psum.Pass, psum.WG = 2, 256
	group := nh / nkv
	var ksum *Kernel
	var gsum [3]int
	if group > 1 {
		ksum, err = r.d.Kernel(KernelSpec{
			Name: op + ".sum", File: "attention_backward.wgsl", Params: psum,
			Bindings: []Access{Read, Read, ReadWrite, ReadWrite}, Uniforms: 2,
		})
		if err != nil {
			return err
		}
		if gsum, err = Grid1D((nk + 255) / 256); err != nil {
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
	}
	nblk := (t + pq.BR - 1) / pq.BR
	gq, err := Grid1D(nb * nh * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gkv, err := Grid1D(nb * nh * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	delta, err := r.Temp(op+" delta", F32, rows, nh)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	// Per-query-head dk, dv when heads share a KV head, summed by pass 2.
	dkh, dvh := dk, dv
	if group > 1 {
		if dkh, err = r.Temp(op+" dk per head", F32, rows, nh, headDim); err != nil {
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		if dvh, err = r.Temp(op+" dv per head", F32, rows, nh, headDim); err != nil {
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
	}
	uni := []uint32{uint32(nb), uint32(t), uint32(nh), uint32(nkv), math.Float32bits(float32(1 / math.Sqrt(float64(headDim))))}
	fail := r.rollback()
	if err := r.Dispatch(kq, gq, uni, Whole(q), Whole(k), Whole(v), Whole(out), Whole(dout), Whole(lse), Whole(dq), Whole(delta)); err != nil {
		return fail(err)
	}
	// dq pass: s = q·k, dp = dout·v, dq += ds·k per pair; q, out, dout, dq and k, v once.
	fl, by := attentionCost(nb, t, nh, nkv, headDim, 6)
	r.Cost(fl, by+8*float64(nq))
	if err := r.Dispatch(kkv, gkv, uni, Whole(q), Whole(k), Whole(v), Whole(dout), Whole(lse), Whole(delta), Whole(dkh), Whole(dvh)); err != nil {
		return fail(err)
	}
	// dk/dv pass: s, dp, dv += p·dout, dk += ds·q per pair; q, dout, k, v and dk, dv per head once.
	fl, _ = attentionCost(nb, t, nh, nkv, headDim, 8)
	r.Cost(fl, 4*float64(2*nq+2*nk)+8*float64(rows*nh*headDim))
	if group > 1 {
		if err := r.Dispatch(ksum, gsum, []uint32{uint32(nk), uint32(group)}, Whole(dkh), Whole(dvh), Whole(dk), Whole(dv)); err != nil {
			return fail(err)
		}
		r.Cost(0, 8*float64(nq+nk))
	}
	return nil
}
