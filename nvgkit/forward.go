package nvgkit

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// acts holds one decoder layer's forward activations, F32 row-major [rows, width] with
// rows = nb·t, written by recordLayer and read by the backward (recordLayerBackward). A
// Teacher's work aliases resid to its residual stream x and xn1, xn2 to its one norm output
// (the pass runs in place, nothing is kept for a backward); a Student's work holds them apart.
type acts struct {
	xn1, resid, xn2, mix *gpu.Buffer // [rows, H]: input norm, x + mixer, post norm, mixer/MLP output
	gate, up, act        *gpu.Buffer // [rows, I]
	// attention
	qg                     *gpu.Buffer // [rows, 2·nh·hd]: q_proj's output (query and gate per head)
	q, agate, qr, o, gated *gpu.Buffer // [rows, nh·hd]
	k, v, kr               *gpu.Buffer // [rows, nkv·hd]
	alse                   *gpu.Buffer // [rows, nh]
	// GatedDeltaNet
	mixed               *gpu.Buffer // [rows, C]: in_proj_qkv's output
	qc, kc, qn, kn      *gpu.Buffer // [rows, Hk·dk]: the conv's q, k blocks; after the L2 norm
	vc, z, core, normed *gpu.Buffer // [rows, Hv·dv]
	a, b, g, beta       *gpu.Buffer // [rows, Hv]
	// kept, while recordLayer runs with keep, holds every BLR projection's t1 = (x⊙g)·Vᵀ and
	// c = (t1⊙ℓ)·Uᵀ per path (gpu.BLRKept) in recorder temporaries (freed at the layer's
	// submit) for its BLRBackward. In a work's kept activations (KeepActivations) it holds
	// work buffers for t1, and for c with KeepBLROutputs (keptSpecs says why), allocated by
	// NewWork for every BLR projection of the layer and written by the forward.
	kept map[*gpu.BLRLayer]gpu.BLRKept
	// ownKept marks kept as the kept activations' own buffers: apply writes them and never
	// adds recorder temporaries.
	ownKept bool
	// deltaSaved is set by the recompute's recordLayer (keep) on a GatedDeltaNet layer where
	// the delta rule's chunked forward saved what its backward needs
	// (gpu.GatedDeltaRuleAutoSave, in recorder temporaries freed at the layer's submit), and
	// read by the layer's backward in the same recording, which then does not run that
	// forward a third time; nil elsewhere.
	deltaSaved *gpu.DeltaRuleSaved
	// observe, when not nil, is called by recordLayer with every distinct input of the
	// layer's projections right after the recipe writes it, in the layer's recording (the
	// calibration pass, Calibrate): the checkpoint names of the weights that read it, the
	// activation x [rows, cols] (a Teacher's xn1 and xn2 share one buffer: what observe
	// records reads it before the next norm overwrites it). Nil everywhere else: the recipe
	// then records exactly what it did before.
	observe func(r *gpu.Recorder, names func() []string, x *gpu.Buffer, cols int) error
}

// see calls s.observe, when set, with the input x [rows, cols] of the weights names.
func (s *acts) see(r *gpu.Recorder, names func() []string, x *gpu.Buffer, cols int) error {
	if s.observe == nil {
		return nil
	}
	return s.observe(r, names, x, cols)
}

// recomputing reports whether recordLayer runs with keep (the backward's recompute, in the
// recording of the layer's backward): kept is a fresh map of recorder temporaries.
func (s *acts) recomputing() bool { return s.kept != nil && !s.ownKept }

// apply records y = x·Wᵀ for l, keeping t1 and c while s.kept is set (recordLayer with keep).
func (s *acts) apply(r *gpu.Recorder, l linear, x, y *gpu.Buffer, rows int) error {
	if l.blr == nil || s.kept == nil {
		return l.apply(r, x, y, rows)
	}
	k, ok := s.kept[l.blr]
	if !ok {
		if s.ownKept {
			return fmt.Errorf("the kept activations have no t1 for %s (the net's projections changed after NewWork)", l.name)
		}
		// Borrowed and never given back: they live to the layer's submit, and the forward
		// overwrites them, so they need no zero fill.
		for range l.blr.Paths {
			t1, _, err := r.Borrow("student t1", gpu.F32, rows, l.blr.Rank)
			if err != nil {
				return err
			}
			c, _, err := r.Borrow("student c", gpu.F32, rows, l.blr.M)
			if err != nil {
				return err
			}
			k.T1, k.C = append(k.T1, t1), append(k.C, c)
		}
		s.kept[l.blr] = k
	}
	return gpu.BLRForward(r, l.blr, x, y, k, rows)
}

// back records l's backward (linear.backward), reusing the t1 and c kept by apply when there
// are some.
func (s *acts) back(r *gpu.Recorder, l linear, x, dy, dx *gpu.Buffer, rows int) error {
	return l.backward(r, x, s.kept[l.blr], dy, dx, rows)
}

// recordLayer records decoder layer L (DESIGN.md §3) on x [rows, H], the one layer recipe of
// the teacher pass, the student forward and the backward's recompute:
//
//	resid = x + mixer(norm1(x));  out = resid + down(silu(gate(norm2(resid))) ⊙ up(norm2(resid)))
//
// leaving the activations in s. x is read only, unless it is s.resid (a Teacher's in-place
// pass: out = x = s.resid too). keep is the backward's recompute: every BLR projection's t1
// and c are kept in s.kept (a fresh map; the caller clears it after the submit), a
// GatedDeltaNet layer's delta rule saves its chunked forward in s.deltaSaved, and the recipe
// stops at the SwiGLU, the last activation the backward reads (out is not written; it may be
// nil).
func (n *Net) recordLayer(r *gpu.Recorder, L *layer, s *acts, x, out *gpu.Buffer, nb, t int, keep bool) error {
	c := n.Config
	rows, H := nb*t, c.HiddenSize
	eps := c.RMSNormEps
	if keep {
		s.kept = map[*gpu.BLRLayer]gpu.BLRKept{}
	} else if !s.ownKept {
		s.kept = nil // a recompute's map left by a failed step holds another recording's buffers
	}
	s.deltaSaved = nil
	steps := []func() error{
		func() error { return gpu.RMSNorm(r, x, L.inNorm.buf, s.xn1, rows, H, eps, true) },
		func() error { return s.see(r, L.mixerInputNames, s.xn1, H) },
		func() error {
			if L.attn != nil {
				return n.recordAttention(r, L.attn, s, nb, t)
			}
			return n.recordDeltaNet(r, L.delta, s, nb, t)
		},
		func() error {
			if s.resid == x {
				return nil
			}
			return gpu.ColumnCopy(r, x, s.resid, rows, H, 0, H, 0, H)
		},
		func() error { return gpu.ResidualAdd(r, s.resid, s.mix) },
		func() error { return gpu.RMSNorm(r, s.resid, L.postNorm.buf, s.xn2, rows, H, eps, true) },
		func() error { return s.see(r, func() []string { return []string{L.gate.name, L.up.name} }, s.xn2, H) },
		func() error { return s.apply(r, L.gate, s.xn2, s.gate, rows) },
		func() error { return s.apply(r, L.up, s.xn2, s.up, rows) },
		func() error { return gpu.SwiGLU(r, s.gate, s.up, s.act) },
		func() error {
			return s.see(r, func() []string { return []string{L.down.name} }, s.act, c.IntermediateSize)
		},
	}
	if !keep {
		steps = append(steps,
			func() error { return s.apply(r, L.down, s.act, s.mix, rows) },
			func() error {
				if out == s.resid {
					return nil
				}
				return gpu.ColumnCopy(r, s.resid, out, rows, H, 0, H, 0, H)
			},
			func() error { return gpu.ResidualAdd(r, out, s.mix) })
	}
	return runSteps(steps)
}

// mixerInputNames are the weights that read the input RMSNorm's output: q_proj, k_proj,
// v_proj, or in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (host.Net.LinearInputs' order).
func (L *layer) mixerInputNames() []string {
	if a := L.attn; a != nil {
		return []string{a.qg.name, a.k.name, a.v.name}
	}
	d := L.delta
	return []string{d.qkv.name, d.z.name, d.b.name, d.a.name}
}

func runSteps(steps []func() error) error {
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// attnShapes are the sizes of an attention layer's kernels over nb windows of t tokens: the
// query's and the key's QK-norm and RoPE, and the attention's.
func (n *Net) attnShapes(nb, t int) (qd, kd gpu.QKNormRoPEDims, ad gpu.AttentionDims) {
	c := n.Config
	g := attnDims(c)
	qd = gpu.QKNormRoPEDims{Rows: nb * t, Heads: g.nh, HeadDim: g.hd, Eps: c.RMSNormEps, Rot: c.RotaryDim(), Theta: c.RopeTheta, T: t}
	kd = qd
	kd.Heads = g.nkv
	ad = gpu.AttentionDims{NB: nb, T: t, NH: g.nh, NKV: g.nkv, HeadDim: g.hd}
	return qd, kd, ad
}

// recordAttention records the gated attention mixer on s.xn1 into s.mix: q_proj whole, its
// output split into the query and the gate per head (DESIGN.md §3) by SplitQueryGate.
func (n *Net) recordAttention(r *gpu.Recorder, a *attnWeights, s *acts, nb, t int) error {
	rows, nh, hd := nb*t, n.Config.NumAttentionHeads, n.Config.HeadDim
	qd, kd, ad := n.attnShapes(nb, t)
	return runSteps([]func() error{
		func() error { return s.apply(r, a.qg, s.xn1, s.qg, rows) },
		func() error { return gpu.SplitQueryGate(r, s.qg, s.q, s.agate, rows, nh, hd) },
		func() error { return s.apply(r, a.k, s.xn1, s.k, rows) },
		func() error { return s.apply(r, a.v, s.xn1, s.v, rows) },
		func() error { return gpu.QKNormRoPE(r, s.q, a.qNorm.buf, s.qr, qd) },
		func() error { return gpu.QKNormRoPE(r, s.k, a.kNorm.buf, s.kr, kd) },
		func() error { return gpu.AttentionAuto(r, s.qr, s.kr, s.v, s.o, s.alse, ad) },
		func() error { return gpu.AttentionGate(r, s.o, s.agate, s.gated) },
		func() error { return s.see(r, func() []string { return []string{a.o.name} }, s.gated, nh*hd) },
		func() error { return s.apply(r, a.o, s.gated, s.mix, rows) },
	})
}

// recordDeltaNet records the GatedDeltaNet mixer on s.xn1 into s.mix: in_proj_qkv and the
// depthwise conv over all C channels, which writes its q, k and v blocks to their own
// buffers.
func (n *Net) recordDeltaNet(r *gpu.Recorder, d *deltaWeights, s *acts, nb, t int) error {
	c, rows, g := n.Config, nb*t, deltaDims(n.Config)
	hk, hv, dk, dv, K, QK, VV := g.hk, g.hv, g.dk, g.dv, g.K, g.QK, g.VV
	return runSteps([]func() error{
		func() error { return s.apply(r, d.qkv, s.xn1, s.mixed, rows) },
		func() error {
			return gpu.CausalConv1dSiLUSplit(r, s.mixed, d.conv.buf, []gpu.ColumnBlock{{Buf: s.qc, Cols: QK}, {Buf: s.kc, Cols: QK}, {Buf: s.vc, Cols: VV}}, nb, t, K)
		},
		func() error { return gpu.L2Norm(r, s.qc, s.qn, rows*hk, dk, 1/math.Sqrt(float64(dk))) },
		func() error { return gpu.L2Norm(r, s.kc, s.kn, rows*hk, dk, 1) },
		func() error { return s.apply(r, d.z, s.xn1, s.z, rows) },
		func() error { return s.apply(r, d.b, s.xn1, s.b, rows) },
		func() error { return s.apply(r, d.a, s.xn1, s.a, rows) },
		func() error { return gpu.GatedDeltaGates(r, s.a, s.b, d.aLog.buf, d.dtBias.buf, s.g, s.beta, rows, hv) },
		func() error {
			dims := gpu.DeltaRuleDims{NB: nb, T: t, HK: hk, HV: hv, DK: dk, DV: dv}
			if s.recomputing() {
				var err error
				s.deltaSaved, err = gpu.GatedDeltaRuleAutoSave(r, s.qn, s.kn, s.vc, s.g, s.beta, s.core, dims)
				return err
			}
			return gpu.GatedDeltaRuleAuto(r, s.qn, s.kn, s.vc, s.g, s.beta, s.core, nil, dims)
		},
		func() error {
			return gpu.GatedRMSNorm(r, s.core, s.z, d.norm.buf, s.normed, rows, hv, dv, c.RMSNormEps)
		},
		func() error { return s.see(r, func() []string { return []string{d.out.name} }, s.normed, VV) },
		func() error { return s.apply(r, d.out, s.normed, s.mix, rows) },
	})
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
		if err := d.Run(func(r *gpu.Recorder) error { return n.embedInto(r, flat, w.x) }); err != nil {
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
			if err := n.embedInto(r, flat, w.x); err != nil {
				r.Discard()
				return err
			}
			embedded = true
		}
		if err := n.recordLayer(r, L, &w.acts, w.x, w.x, w.NB, w.T, false); err != nil {
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
		return d.Run(func(r *gpu.Recorder) error { return n.embedInto(r, flat, w.x) })
	}
	return nil
}

// recordFinalNorm records xn = final_norm(x), the head's input.
func (n *Net) recordFinalNorm(r *gpu.Recorder, w *Work) error {
	c := n.Config
	return gpu.RMSNorm(r, w.x, n.finalNorm, w.xn, w.NB*w.T, c.HiddenSize, c.RMSNormEps, true)
}
