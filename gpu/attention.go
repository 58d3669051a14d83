package gpu

import (
	"fmt"
	"math"
)

// attentionMaxHeadDim is the largest head_dim Attention compiles for (Qwen3.5: 256).
const attentionMaxHeadDim = 256

// AttentionDims are the sizes of one Attention or AttentionBackward call; the token rows
// are NB·T, in window-major order.
type AttentionDims struct {
	// NB is the number of windows; a token attends only to the tokens of its own window.
	NB int
	// T is the number of tokens per window.
	T int
	// NH is the number of query heads: q and out are [NB·T, NH, HeadDim], lse [NB·T, NH].
	NH int
	// NKV is the number of KV heads, a divisor of NH (query head h reads KV head
	// h / (NH/NKV)): k and v are [NB·T, NKV, HeadDim].
	NKV int
	// HeadDim is the head size, ≤ 256.
	HeadDim int
}

// check errors when r is not usable, a size is not positive, NH is not a multiple of NKV,
// HeadDim exceeds 256 or the q rows exceed the 2³¹ index range.
func (d AttentionDims) check(r *Recorder, op string) error {
	if err := r.usable(); err != nil {
		return err
	}
	nb, t, nh, nkv, headDim := d.NB, d.T, d.NH, d.NKV, d.HeadDim
	if err := positive(op, "nb, t, nh, nkv, headDim", nb, t, nh, nkv, headDim); err != nil {
		return err
	}
	if nh%nkv != 0 {
		return fmt.Errorf("gpu: %s: nh = %d query heads is not a multiple of nkv = %d KV heads", op, nh, nkv)
	}
	if headDim > attentionMaxHeadDim {
		return fmt.Errorf("gpu: %s: headDim = %d exceeds %d", op, headDim, attentionMaxHeadDim)
	}
	if nb*t*nh*headDim > maxU32Elems {
		return fmt.Errorf("gpu: %s: nb·t·nh·headDim = %d exceeds %d", op, nb*t*nh*headDim, maxU32Elems)
	}
	return nil
}

// Attention records causal softmax attention with grouped-query heads (host.Attention, HF
// eager attention of Qwen3_5Attention, DESIGN.md §3), streaming (online) softmax over key
// blocks, f32 throughout:
//
//	s_ij = (q_i · k_j) · headDim^−½ for j ≤ i in the same window,  lse_i = log Σ_j exp(s_ij),
//	out_i = Σ_j exp(s_ij − lse_i) · v_j,
//
// where query head h uses KV head h / (nh/nkv). Windows of t tokens attend only within
// themselves; the scale is applied to q before the dot products.
//
// Layouts, all F32 row-major: q [nb·t, nh, headDim] (after QKNormRoPE), k and v
// [nb·t, nkv, headDim], out [nb·t, nh, headDim], lse [nb·t, nh] (natural log of each row's
// softmax denominator, for the backward). All five buffers distinct.
// Errors: non-positive sizes, nh not a multiple of nkv, headDim > 256, dtype or length
// mismatches, aliasing, or any Dispatch error.
func Attention(r *Recorder, q, k, v, out, lse *Buffer, dims AttentionDims) error {
	const op = "Attention"
	if err := dims.check(r, op); err != nil {
		return err
	}
	if err := attentionForwardBuffers(op, dims, q, k, v, out, lse); err != nil {
		return err
	}
	nb, t, nh, nkv, headDim := dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim
	// NS dim slices per query row (≤ 16 vec4s of dims each) and BQ query rows per workgroup
	// of NS·BQ invocations; workgroup memory holds the K/V tile (BK·D4·NS vec4s) and the
	// partial dots (BK·NS·BQ floats). head_dim ≤ 128: 256 invocations, BK = 16 (≤ 24 KiB);
	// head_dim > 128: 8 slices of ≤ 32 dims, 512 invocations, BK = 8 (24 KiB) — the fastest
	// of the shapes swept on the H200 at t = 4096, nh = 16, head_dim 256 (35 ms against 49 ms
	// for 4 slices × 64 rows, BK 16). BK halves on devices offering less workgroup memory.
	ns, wgs, bk := 1, 256, 16
	for 4*16*ns < headDim {
		ns *= 2
	}
	if headDim > 128 {
		ns, wgs, bk = 8, 512, 8
	}
	d4 := (headDim + 4*ns - 1) / (4 * ns)
	smem := func(bk int) int { return bk * (d4*ns*16 + wgs*4) }
	if int(r.d.Info().MaxWorkgroupStorage) < smem(bk) {
		bk /= 2
	}
	if int(r.d.Info().MaxWorkgroupStorage) < smem(bk) || int(r.d.Info().MaxInvocations) < wgs {
		return fmt.Errorf("gpu: %s: device offers %d bytes of workgroup memory and %d invocations, fewer than %d and %d",
			op, r.d.Info().MaxWorkgroupStorage, r.d.Info().MaxInvocations, smem(bk), wgs)
	}
	pr := struct{ HD, NS, BQ, BK, D4 int }{headDim, ns, wgs / ns, bk, d4}
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "attention.wgsl", Params: pr,
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 5,
	})
	if err != nil {
		return err
	}
	grid, err := Grid1D(nb * nh * ((t + pr.BQ - 1) / pr.BQ))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	scale := float32(1 / math.Sqrt(float64(headDim)))
	if err := r.Dispatch(kern, grid, []uint32{uint32(nb), uint32(t), uint32(nh), uint32(nkv), math.Float32bits(scale)},
		Whole(q), Whole(k), Whole(v), Whole(out), Whole(lse)); err != nil {
		return err
	}
	r.Cost(attentionCost(nb, t, nh, nkv, headDim, 4))
	return nil
}

// attentionForwardBuffers checks Attention's buffers for dims: F32, the lengths of their
// layouts, all distinct.
func attentionForwardBuffers(op string, dims AttentionDims, q, k, v, out, lse *Buffer) error {
	rows := dims.NB * dims.T
	nq, nk := rows*dims.NH*dims.HeadDim, rows*dims.NKV*dims.HeadDim
	bufs := map[string]*Buffer{"q": q, "k": k, "v": v, "out": out, "lse": lse}
	for _, c := range []struct {
		name string
		n    int
	}{{"q", nq}, {"k", nk}, {"v", nk}, {"out", nq}, {"lse", rows * dims.NH}} {
		if err := need(op, c.name, bufs[c.name], c.n, F32); err != nil {
			return err
		}
	}
	return distinct(op, bufs)
}

// attentionCost is the arithmetic of one causal pass over nb windows of t tokens and nh
// heads — t(t+1)/2 query-key pairs per window and head, perPair·headDim flops each (4 for
// the forward: q·k and p·v) — and the least traffic: q, out [rows, nh, headDim] and k, v
// [rows, nkv, headDim] in f32, once each.
func attentionCost(nb, t, nh, nkv, headDim int, perPair float64) (flops, bytes float64) {
	pairs := float64(nb) * float64(nh) * float64(t) * float64(t+1) / 2
	rows := float64(nb * t)
	return perPair * float64(headDim) * pairs, 4 * rows * float64(headDim) * float64(2*nh+2*nkv)
}
