package gpu

import (
	"fmt"
	"math"
)

// attentionBackwardParams are attention_backward.wgsl's template parameters.
type attentionBackwardParams struct {
	DQ                bool
	HD, NS, BR, BC, D int
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
// Two dispatches, no atomics (deterministic): the first, one workgroup per (window, query
// head, block of query rows), forms D_i into a recorder temporary [nb·t, nh] and dq; the
// second, one workgroup per (window, KV head, block of key rows), loops over the group's
// query heads and the query blocks at or after its keys and forms dk and dv. Scores are
// recomputed from q, k and lse tile by tile in workgroup memory (no t×t matrix); f32
// throughout. Errors: non-positive sizes, nh not a multiple of nkv, headDim > 256, dtype or
// length mismatches, aliasing, or any Dispatch error; a failed call records nothing.
func AttentionBackward(r *Recorder, q, k, v, out, lse, dout, dq, dk, dv *Buffer, nb, t, nh, nkv, headDim int) error {
	const op = "AttentionBackward"
	if err := positive(op, "nb, t, nh, nkv, headDim", nb, t, nh, nkv, headDim); err != nil {
		return err
	}
	if nh%nkv != 0 {
		return fmt.Errorf("gpu: %s: nh = %d query heads is not a multiple of nkv = %d KV heads", op, nh, nkv)
	}
	if headDim > attentionMaxHeadDim {
		return fmt.Errorf("gpu: %s: headDim = %d exceeds %d", op, headDim, attentionMaxHeadDim)
	}
	rows := nb * t
	if rows*nh*headDim > maxU32Elems {
		return fmt.Errorf("gpu: %s: nb·t·nh·headDim = %d exceeds %d", op, rows*nh*headDim, maxU32Elems)
	}
	nq, nk := rows*nh*headDim, rows*nkv*headDim
	bufs := map[string]*Buffer{"q": q, "k": k, "v": v, "out": out, "lse": lse, "dout": dout, "dq": dq, "dk": dk, "dv": dv}
	for _, c := range []struct {
		name string
		n    int
	}{{"q", nq}, {"k", nk}, {"v", nk}, {"out", nq}, {"lse", rows * nh}, {"dout", nq}, {"dq", nq}, {"dk", nk}, {"dv", nk}} {
		if err := need(op, c.name, bufs[c.name], c.n, F32); err != nil {
			return err
		}
	}
	if err := distinct(op, bufs); err != nil {
		return err
	}
	// 64 invocations: NS dim slices × BR rows, ≤ 32 dims per invocation; a tile of
	// BC·headDim floats (≤ 8 KiB) and BR·NS·BC partial dots (≤ 4 KiB) in workgroup memory.
	ns, bc := 4, 16
	if headDim > 128 {
		ns, bc = 8, 8
	}
	pq := attentionBackwardParams{DQ: true, HD: headDim, NS: ns, BR: 64 / ns, BC: bc, D: (headDim + ns - 1) / ns}
	pkv := pq
	pkv.DQ = false
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
	nblk := (t + pq.BR - 1) / pq.BR
	gq, err := Grid1D(nb * nh * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gkv, err := Grid1D(nb * nkv * nblk)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	delta, err := r.Temp(op+" delta", F32, rows, nh)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	uni := []uint32{uint32(nb), uint32(t), uint32(nh), uint32(nkv), math.Float32bits(float32(1 / math.Sqrt(float64(headDim))))}
	mark := len(r.ops)
	if err := r.Dispatch(kq, gq, uni, Whole(q), Whole(k), Whole(v), Whole(out), Whole(dout), Whole(lse), Whole(dq), Whole(delta)); err != nil {
		return err
	}
	if err := r.Dispatch(kkv, gkv, uni, Whole(q), Whole(k), Whole(v), Whole(dout), Whole(lse), Whole(delta), Whole(dk), Whole(dv)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
