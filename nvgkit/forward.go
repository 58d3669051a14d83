package nvgkit

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// recordLayer records decoder layer l on w.x in place (DESIGN.md §3):
// x += mixer(norm1(x)); x += down(silu(gate(norm2(x))) ⊙ up(norm2(x))).
func (n *Net) recordLayer(r *gpu.Recorder, L *layer, w *Work) error {
	c := n.Config
	rows, H, I := w.NB*w.T, c.HiddenSize, c.IntermediateSize
	eps := c.RMSNormEps
	if err := gpu.RMSNorm(r, w.x, L.inNorm.buf, w.xn, rows, H, eps, true); err != nil {
		return err
	}
	var err error
	if L.attn != nil {
		err = n.recordAttention(r, L.attn, w)
	} else {
		err = n.recordDeltaNet(r, L.delta, w)
	}
	if err != nil {
		return err
	}
	if err := gpu.ResidualAdd(r, w.x, w.mix); err != nil {
		return err
	}
	if err := gpu.RMSNorm(r, w.x, L.postNorm.buf, w.xn, rows, H, eps, true); err != nil {
		return err
	}
	if err := L.gate.apply(r, w.xn, w.gate, rows); err != nil {
		return err
	}
	if err := L.up.apply(r, w.xn, w.up, rows); err != nil {
		return err
	}
	if err := gpu.SwiGLU(r, w.gate, w.up, w.act); err != nil {
		return err
	}
	_ = I
	if err := L.down.apply(r, w.act, w.mix, rows); err != nil {
		return err
	}
	return gpu.ResidualAdd(r, w.x, w.mix)
}

// recordDeltaNet records the GatedDeltaNet mixer on w.xn into w.mix. q, k and v are
// projected and convolved as separate channel blocks (the conv is depthwise, so this is
// the same arithmetic as one in_proj_qkv and one conv over all channels).
func (n *Net) recordDeltaNet(r *gpu.Recorder, d *deltaWeights, w *Work) error {
	c := n.Config
	nb, t, rows := w.NB, w.T, w.NB*w.T
	hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	steps := []func() error{
		func() error { return d.q.apply(r, w.xn, w.qa, rows) },
		func() error { return d.k.apply(r, w.xn, w.ka, rows) },
		func() error { return d.v.apply(r, w.xn, w.va, rows) },
		func() error { return gpu.CausalConv1dSiLU(r, w.qa, d.convQ.buf, w.qb, nb, t, hk*dk, K) },
		func() error { return gpu.CausalConv1dSiLU(r, w.ka, d.convK.buf, w.kb, nb, t, hk*dk, K) },
		func() error { return gpu.CausalConv1dSiLU(r, w.va, d.convV.buf, w.vb, nb, t, hv*dv, K) },
		// q and k normalised back into qa and ka (the projections are spent).
		func() error { return gpu.L2Norm(r, w.qb, w.qa, rows*hk, dk, 1/math.Sqrt(float64(dk))) },
		func() error { return gpu.L2Norm(r, w.kb, w.ka, rows*hk, dk, 1) },
		func() error { return d.z.apply(r, w.xn, w.z, rows) },
		func() error { return d.b.apply(r, w.xn, w.b, rows) },
		func() error { return d.a.apply(r, w.xn, w.a, rows) },
		func() error { return gpu.GatedDeltaGates(r, w.a, w.b, d.aLog.buf, d.dtBias.buf, w.g, w.beta, rows, hv) },
		func() error {
			return gpu.GatedDeltaRuleAuto(r, w.qa, w.ka, w.vb, w.g, w.beta, w.core, nil, gpu.DeltaRuleDims{NB: nb, T: t, HK: hk, HV: hv, DK: dk, DV: dv})
		},
		func() error {
			return gpu.GatedRMSNorm(r, w.core, w.z, d.norm.buf, w.normed, rows, hv, dv, c.RMSNormEps)
		},
		func() error { return d.out.apply(r, w.normed, w.mix, rows) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// recordAttention records the gated full-attention mixer on w.xn into w.mix. The query and
// the gate come from the per-head halves of q_proj, stored as two weights (DESIGN.md §3).
func (n *Net) recordAttention(r *gpu.Recorder, a *attnWeights, w *Work) error {
	c := n.Config
	nb, t, rows := w.NB, w.T, w.NB*w.T
	nh, nkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	qd := gpu.QKNormRoPEDims{Rows: rows, Heads: nh, HeadDim: hd, Eps: c.RMSNormEps, Rot: c.RotaryDim(), Theta: c.RopeTheta, T: t}
	kd := qd
	kd.Heads = nkv
	ad := gpu.AttentionDims{NB: nb, T: t, NH: nh, NKV: nkv, HeadDim: hd}
	steps := []func() error{
		func() error { return a.query.apply(r, w.xn, w.q, rows) },
		func() error { return a.gate.apply(r, w.xn, w.agate, rows) },
		func() error { return a.k.apply(r, w.xn, w.k, rows) },
		func() error { return a.v.apply(r, w.xn, w.v, rows) },
		func() error { return gpu.QKNormRoPE(r, w.q, a.qNorm.buf, w.qr, qd) },
		func() error { return gpu.QKNormRoPE(r, w.k, a.kNorm.buf, w.kr, kd) },
		func() error { return gpu.Attention(r, w.qr, w.kr, w.v, w.o, w.alse, ad) },
		func() error { return gpu.AttentionGate(r, w.o, w.agate, w.gated) },
		func() error { return a.o.apply(r, w.gated, w.mix, rows) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// pass embeds flat (w.NB·w.T ids, validated) into w.x and runs every decoder layer, one
// submit per layer. keep, when not nil, is called with l = 0 after the embedding and with
// l = 1..L after layer l−1 (w.x then holds that hidden state; keep may read it back).
// Streamed nets upload layer l+1 right after layer l is submitted and release layer l after
// it, so at most two layers are on the GPU.
func (n *Net) pass(w *Work, flat []int, keep func(l int) error) (err error) {
	d := n.dev
	if n.streamed {
		defer func() {
			for _, L := range n.layers {
				n.releaseLayer(L)
			}
		}()
		if len(n.layers) > 0 {
			if err := n.upload(n.layers[0]); err != nil {
				return err
			}
		}
	}
	embedded := false
	if keep != nil {
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.Embedding(r, n.embed, flat, w.x) }); err != nil {
			return err
		}
		embedded = true
		if err := keep(0); err != nil {
			return err
		}
	}
	for i, L := range n.layers {
		r := d.Begin()
		if !embedded {
			if err := gpu.Embedding(r, n.embed, flat, w.x); err != nil {
				r.Discard()
				return err
			}
			embedded = true
		}
		if err := n.recordLayer(r, L, w); err != nil {
			r.Discard()
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err := r.Submit(); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if n.streamed {
			if i+1 < len(n.layers) {
				if err := n.upload(n.layers[i+1]); err != nil {
					return err
				}
			}
			n.releaseLayer(L) // the submitted work keeps its buffers alive until it completes
		}
		if keep != nil {
			if err := keep(i + 1); err != nil {
				return err
			}
		}
	}
	if !embedded { // a model without layers
		return d.Run(func(r *gpu.Recorder) error { return gpu.Embedding(r, n.embed, flat, w.x) })
	}
	return nil
}

// recordFinalNorm records xn = final_norm(x), the head's input.
func (n *Net) recordFinalNorm(r *gpu.Recorder, w *Work) error {
	c := n.Config
	return gpu.RMSNorm(r, w.x, n.finalNorm, w.xn, w.NB*w.T, c.HiddenSize, c.RMSNormEps, true)
}
