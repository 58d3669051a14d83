package nvgkit

import (
	"context"
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// stWork holds a Student's step buffers (all F32 row-major, rows = nb·t): the checkpoints,
// one layer's activations (acts, recomputed per layer in the backward), the head's, and the
// gradient scratch. See StudentWorkBytes.
type stWork struct {
	acts
	bufs []*gpu.Buffer
	ckpt []*gpu.Buffer // [L+1] of [rows, H]: ckpt[l] is layer l's input, ckpt[L] the last output

	hN, dh                  *gpu.Buffer // [rows, H] head input and its gradient
	kl, loss, gss           *gpu.Buffer // [rows], [1], [1]
	d0, d1, dResid, dXn, dT *gpu.Buffer // [rows, H] gradients (d0/d1 ping-pong)
	dAct, dGate, dUp        *gpu.Buffer // [rows, I]
	dQG                     *gpu.Buffer // [rows, 2·nh·hd]
	dGated, dO, dAgate, dQR *gpu.Buffer // [rows, nh·hd]
	dQ                      *gpu.Buffer
	dKR, dK, dV             *gpu.Buffer // [rows, nkv·hd]
	dMixed                  *gpu.Buffer // [rows, C]
	dQn, dKn, dQc, dKc      *gpu.Buffer // [rows, Hk·dk]
	dVc, dNormed, dCore, dZ *gpu.Buffer // [rows, Hv·dv]
	dG, dBeta, dA, dB       *gpu.Buffer // [rows, Hv]

	// kept is each layer's activations from the forward where the work keeps them
	// (KeepActivations, KeepActivationLayers; nil, or nil entries, otherwise): the backward
	// reads kept[l] instead of recomputing layer l (keptActs).
	kept []*acts

	ids, pT *gpu.Buffer // U32 / F32 [rows, k], allocated per k
	topK    int
	// hidT (F16 [rows, H], one selected layer's teacher state at a time) and hidLoss (F32
	// [layers, rows], the per-token losses) serve a hidden-state loss; allocated at its first
	// step (hiddenBuffers).
	hidT, hidLoss *gpu.Buffer
	// embed is the buffer holding d loss / d input embeddings after the last Step (nil before).
	embed *gpu.Buffer
}

func (s *stWork) release() {
	if s == nil {
		return
	}
	for _, b := range s.bufs {
		b.Release()
	}
	s.ids.Release()
	s.pT.Release()
	s.hidT.Release()
	s.hidLoss.Release()
	s.bufs, s.ids, s.pT, s.hidT, s.hidLoss = nil, nil, nil, nil, nil
}

func (s *stWork) bytes() uint64 {
	var n uint64
	for _, b := range append(s.bufs, s.ids, s.pT, s.hidT, s.hidLoss) {
		if b != nil {
			n += b.Bytes()
		}
	}
	return n
}

// studentSpecs lists a Student work's buffers (not the top-k ones) and their widths.
func studentSpecs(c arch.Config, s *stWork) []wspec {
	H, I := c.HiddenSize, c.IntermediateSize
	L := c.NumHiddenLayers
	s.ckpt = make([]*gpu.Buffer, L+1)
	var sp []wspec
	for l := range s.ckpt {
		sp = append(sp, wspec{&s.ckpt[l], fmt.Sprintf("work.ckpt[%d] (layer input)", l), H})
	}
	sp = append(sp, actSpecs(c, &s.acts, true)...)
	sp = append(sp, workSpecs(wspec{&s.hN, "hN (final norm)", H}, wspec{&s.dh, "dh (head gradient)", H},
		wspec{&s.kl, "kl (per token)", 1}, wspec{&s.loss, "loss", 1}, wspec{&s.gss, "gss (grad sum of squares)", 1},
		wspec{&s.d0, "d0 (residual gradient)", H}, wspec{&s.d1, "d1 (residual gradient)", H}, wspec{&s.dResid, "dResid", H},
		wspec{&s.dXn, "dXn", H}, wspec{&s.dT, "dT (input-gradient scratch)", H},
		wspec{&s.dAct, "dAct", I}, wspec{&s.dGate, "dGate", I}, wspec{&s.dUp, "dUp", I})...)
	if hasKind(c, true) {
		g := attnDims(c)
		sp = append(sp, workSpecs(
			wspec{&s.dQG, "dQG", 2 * g.Q}, wspec{&s.dGated, "dGated", g.Q}, wspec{&s.dO, "dO", g.Q}, wspec{&s.dAgate, "dAgate", g.Q},
			wspec{&s.dQR, "dQR", g.Q}, wspec{&s.dQ, "dQ", g.Q}, wspec{&s.dKR, "dKR", g.KV}, wspec{&s.dK, "dK", g.KV}, wspec{&s.dV, "dV", g.KV})...)
	}
	if hasKind(c, false) {
		g := deltaDims(c)
		sp = append(sp, workSpecs(
			wspec{&s.dMixed, "dMixed", g.C},
			wspec{&s.dQn, "dQn", g.QK}, wspec{&s.dKn, "dKn", g.QK}, wspec{&s.dQc, "dQc", g.QK}, wspec{&s.dKc, "dKc", g.QK},
			wspec{&s.dVc, "dVc", g.VV}, wspec{&s.dNormed, "dNormed", g.VV}, wspec{&s.dCore, "dCore", g.VV}, wspec{&s.dZ, "dZ", g.VV},
			wspec{&s.dG, "dG", g.hv}, wspec{&s.dBeta, "dBeta", g.hv}, wspec{&s.dA, "dA", g.hv}, wspec{&s.dB, "dB", g.hv})...)
	}
	return sp
}

// StudentWorkBytes is the GPU bytes NewWork allocates for a Student of architecture c over
// nb windows of t tokens (rows = nb·t), before the teacher top-k buffers (8·rows·k bytes,
// allocated at the first Step/LossOnly of a given k):
//
//	4·rows·[ (L+1)·H                        checkpoints
//	       + 11·H + 6·I + 1                 layer and head activations, residual-path gradients, KL
//	       + A·(14·Q + 6·KV + nh)           when the model has attention layers (Q = nh·hd, KV = nkv·hd)
//	       + D·(2·C + 8·QK + 8·VV + 8·Hv) ]  when it has GatedDeltaNet layers (QK = Hk·dk, VV = Hv·dv,
//	                                         C = 2·QK + VV)
//	+ 8 (the loss and a reduction scalar)
//
// with A, D ∈ {0, 1}. Per step, the recorder also takes temporaries, freed at each submit:
// for a BLR projection [m, n] at rank r with P paths, the recompute's kept t1 and c,
// 4·rows·(r + m)·P bytes, summed over one layer's projections, and BLRBackward's borrowed
// intermediates, one set per byte size for the whole layer (SyntheticPlan.TempBytes); the
// delta rule's, at most gpu.GatedDeltaRuleChunkedBackwardScratch (the recompute's forward
// saves its part of it for the backward, gpu.GatedDeltaRuleAutoSave;
// GatedDeltaRuleBackwardScratch where the chunked kernels do not fit); and the head's
// logits slice. The net's own bytes are
// Net.WeightBytes + Net.StateBytes.
func StudentWorkBytes(c arch.Config, nb, t int) uint64 {
	var s stWork
	var n uint64
	for _, sp := range studentSpecs(c, &s) {
		n += 4 * uint64(nb*t) * uint64(sp.width)
	}
	return n - 2*4*uint64(nb*t) + 8 // loss and gss are [1], not [rows]
}

// recordLayerBackward records the backward of layer L from the activations in s
// (recordLayer on x with keep, just before): given dOut = d loss/d output it writes
// dX = d loss/d x and accumulates the gains' and the metric's gradients
// (host.Net.LayerBackward).
func (n *Net) recordLayerBackward(r *gpu.Recorder, L *layer, s *stWork, x, dOut, dX *gpu.Buffer, nb, t int) error {
	c := n.Config
	rows, H := nb*t, c.HiddenSize
	eps := c.RMSNormEps
	return runSteps([]func() error{
		func() error { return s.back(r, L.down, s.act, dOut, s.dAct, rows) },
		func() error { return gpu.SwiGLUBackward(r, s.gate, s.up, s.dAct, s.dGate, s.dUp) },
		func() error { return s.back(r, L.gate, s.xn2, s.dGate, s.dXn, rows) },
		func() error { return s.back(r, L.up, s.xn2, s.dUp, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
		func() error {
			return gpu.RMSNormBackward(r, s.resid, L.postNorm.buf, s.dXn, s.dResid, n.gainGrad(L.postNorm.buf), rows, H, eps, true)
		},
		func() error { return gpu.ResidualAdd(r, s.dResid, dOut) },
		func() error {
			if L.attn != nil {
				return n.recordAttentionBackward(r, L.attn, s, nb, t)
			}
			return n.recordDeltaNetBackward(r, L.delta, s, nb, t)
		},
		func() error {
			return gpu.RMSNormBackward(r, x, L.inNorm.buf, s.dXn, dX, n.gainGrad(L.inNorm.buf), rows, H, eps, true)
		},
		func() error { return gpu.ResidualAdd(r, dX, s.dResid) },
	})
}

// recordAttentionBackward: d loss/d s.xn1 into s.dXn from s.dResid.
func (n *Net) recordAttentionBackward(r *gpu.Recorder, a *attnWeights, s *stWork, nb, t int) error {
	rows, nh, hd := nb*t, n.Config.NumAttentionHeads, n.Config.HeadDim
	qd, kd, ad := n.attnShapes(nb, t)
	return runSteps([]func() error{
		func() error { return s.back(r, a.o, s.gated, s.dResid, s.dGated, rows) },
		func() error { return gpu.AttentionGateBackward(r, s.o, s.agate, s.dGated, s.dO, s.dAgate) },
		func() error {
			return gpu.AttentionBackwardAuto(r, s.qr, s.kr, s.v, s.o, s.alse, s.dO, s.dQR, s.dKR, s.dV, ad)
		},
		func() error {
			return gpu.QKNormRoPEBackward(r, s.q, a.qNorm.buf, s.dQR, s.dQ, n.gainGrad(a.qNorm.buf), qd)
		},
		func() error {
			return gpu.QKNormRoPEBackward(r, s.k, a.kNorm.buf, s.dKR, s.dK, n.gainGrad(a.kNorm.buf), kd)
		},
		func() error { return gpu.SplitQueryGateBackward(r, s.dQ, s.dAgate, s.dQG, rows, nh, hd) },
		func() error { return s.back(r, a.qg, s.xn1, s.dQG, s.dXn, rows) },
		func() error { return s.back(r, a.k, s.xn1, s.dK, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
		func() error { return s.back(r, a.v, s.xn1, s.dV, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
	})
}

// recordDeltaNetBackward: d loss/d s.xn1 into s.dXn from s.dResid.
func (n *Net) recordDeltaNetBackward(r *gpu.Recorder, d *deltaWeights, s *stWork, nb, t int) error {
	c, rows, g := n.Config, nb*t, deltaDims(n.Config)
	hk, hv, dk, dv, K, QK, VV := g.hk, g.hv, g.dk, g.dv, g.K, g.QK, g.VV
	return runSteps([]func() error{
		func() error { return s.back(r, d.out, s.normed, s.dResid, s.dNormed, rows) },
		func() error {
			return gpu.GatedRMSNormBackward(r, s.core, s.z, d.norm.buf, s.dNormed, s.dCore, s.dZ, n.gainGrad(d.norm.buf), rows, hv, dv, c.RMSNormEps)
		},
		func() error {
			return gpu.GatedDeltaRuleBackwardAutoSaved(r, s.deltaSaved, s.qn, s.kn, s.vc, s.g, s.beta, s.dCore, s.dQn, s.dKn, s.dVc, s.dG, s.dBeta, gpu.DeltaRuleDims{NB: nb, T: t, HK: hk, HV: hv, DK: dk, DV: dv})
		},
		func() error {
			return gpu.GatedDeltaGatesBackward(r, s.a, s.b, d.aLog.buf, d.dtBias.buf, s.dG, s.dBeta, s.dA, s.dB, rows, hv)
		},
		func() error { return gpu.L2NormBackward(r, s.qc, s.dQn, s.dQc, rows*hk, dk, 1/math.Sqrt(float64(dk))) },
		func() error { return gpu.L2NormBackward(r, s.kc, s.dKn, s.dKc, rows*hk, dk, 1) },
		func() error {
			return gpu.CausalConv1dSiLUBackwardSplit(r, s.mixed, d.conv.buf, []gpu.ColumnBlock{{Buf: s.dQc, Cols: QK}, {Buf: s.dKc, Cols: QK}, {Buf: s.dVc, Cols: VV}}, s.dMixed, nb, t, K)
		},
		func() error { return s.back(r, d.qkv, s.xn1, s.dMixed, s.dXn, rows) },
		func() error { return s.back(r, d.z, s.xn1, s.dZ, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
		func() error { return s.back(r, d.b, s.xn1, s.dB, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
		func() error { return s.back(r, d.a, s.xn1, s.dA, s.dT, rows) },
		func() error { return gpu.ResidualAdd(r, s.dXn, s.dT) },
	})
}

// StepStats is what Step returns.
type StepStats struct {
	// Loss is the step's loss: KL, or with a hidden-state loss (StepHidden) KL + λ·Hidden.
	Loss float64
	// KL is mean_t KL(p_T,topk ‖ p_S) over the step's nb·t tokens (natural log), the mean of
	// KLPerToken taken in float64.
	KL float64
	// Hidden is the hidden-state loss L_hidden (unweighted; HiddenLoss), the mean of
	// HiddenPerLayer, and HiddenPerLayer [len(Layers)] each selected layer's mean over the
	// tokens of its per-token loss (f32 from the GPU, averaged in float64); 0 and nil without
	// the term.
	Hidden         float64
	HiddenPerLayer []float64
	// KLPerToken [nb·t] is each token's KL (row = window·t + position), f32 from the GPU.
	KLPerToken []float32
	// Finite is false when the loss or any accumulated gradient is not finite: checked by
	// the f32 sum of squares of every gradient buffer (GradSumSquares), so gradients whose
	// squares overflow f32 (|g| ≳ 1.8e19 in total) also count as not finite.
	Finite bool
	// Tokens is the number of tokens the loss is over (nb·t).
	Tokens int
}

// checkTopK validates the teacher's top-k for the windows: top.NB == nb, top.T == work.T,
// 1 ≤ K ≤ vocab, IDs and Probs of NB·T·K values, ids in the student's vocabulary and distinct
// per token, probabilities finite and ≥ 0 with a positive sum per token.
func (n *Net) checkTopK(op string, w *Work, top *TopK, nb int) error {
	if top == nil {
		return fmt.Errorf("nvgkit.%s: nil top-k", op)
	}
	V := n.Config.VocabSize
	if top.NB != nb {
		return fmt.Errorf("nvgkit.%s: the top-k holds %d windows, but %d windows of ids were given", op, top.NB, nb)
	}
	if top.T != w.T {
		return fmt.Errorf("nvgkit.%s: the top-k is for windows of %d tokens, the work's windows have t = %d", op, top.T, w.T)
	}
	if top.K < 1 || top.K > V {
		return fmt.Errorf("nvgkit.%s: top-k K = %d must be in [1, the student's vocabulary %d]", op, top.K, V)
	}
	want := top.NB * top.T * top.K
	if len(top.IDs) != want || len(top.Probs) != want {
		return fmt.Errorf("nvgkit.%s: top-k IDs has %d and Probs %d values, want NB·T·K = %d·%d·%d = %d",
			op, len(top.IDs), len(top.Probs), top.NB, top.T, top.K, want)
	}
	K := top.K
	seen := make(map[int32]int, K)
	for row := 0; row < nb*w.T; row++ {
		clear(seen)
		var sum float64
		for j := 0; j < K; j++ {
			id, p := top.IDs[row*K+j], top.Probs[row*K+j]
			if id < 0 || int(id) >= V {
				return fmt.Errorf("nvgkit.%s: teacher id [token %d, %d] = %d is outside the student's vocabulary [0, %d) (teacher and student geometries differ?)", op, row, j, id, V)
			}
			if j0, dup := seen[id]; dup {
				return fmt.Errorf("nvgkit.%s: teacher id %d appears twice in token %d's top-k (entries %d and %d)", op, id, row, j0, j)
			}
			seen[id] = j
			if !(p >= 0) || math.IsInf(float64(p), 0) {
				return fmt.Errorf("nvgkit.%s: teacher probability [token %d, %d] = %g is not finite and ≥ 0", op, row, j, p)
			}
			sum += float64(p)
		}
		if !(sum > 0) {
			return fmt.Errorf("nvgkit.%s: teacher probabilities of token %d sum to %g, want > 0", op, row, sum)
		}
	}
	return nil
}

// uploadTopK writes the top-k into the work's id and probability buffers, padded to the
// work's windows by repeating the last window's rows.
func (w *Work) uploadTopK(top *TopK) error {
	s := w.st
	k, rows := top.K, w.NB*w.T
	if s.topK != k || s.ids == nil {
		s.ids.Release()
		s.pT.Release()
		s.ids, s.pT, s.topK = nil, nil, 0
		var err error
		if s.ids, err = w.dev.NewBuffer("work.topk ids", gpu.U32, rows, k); err != nil {
			return memRemedy(err)
		}
		if s.pT, err = w.dev.NewBuffer("work.topk probs", gpu.F32, rows, k); err != nil {
			s.ids.Release()
			s.ids = nil
			return memRemedy(err)
		}
		s.topK = k
	}
	ids := make([]uint32, rows*k)
	p := make([]float32, rows*k)
	real := top.NB * top.T * k
	for i := range ids {
		src := i
		if i >= real {
			src = real - w.T*k + (i-real)%(w.T*k)
		}
		ids[i] = uint32(top.IDs[src])
		p[i] = top.Probs[src]
	}
	if err := w.dev.WriteUint32(s.ids, ids); err != nil {
		return err
	}
	return w.dev.WriteFloat32(s.pT, p)
}

// studentForward embeds flat into ckpt[0] and runs every layer, one submit per layer.
func (n *Net) studentForward(w *Work, flat []int) error {
	return n.studentForwardTo(w, flat, len(n.layers))
}

// studentForwardTo embeds flat into ckpt[0] and runs layers 0 … upto−1 (upto ≥ 1, or 0 with
// no layers), one submit per layer, leaving ckpt[upto] the last one's output.
func (n *Net) studentForwardTo(w *Work, flat []int, upto int) error {
	s := w.st
	for i, L := range n.layers[:upto] {
		r := n.dev.Begin()
		if i == 0 {
			if err := gpu.Embedding(r, n.embed, flat, s.ckpt[0]); err != nil {
				r.Discard()
				return err
			}
		}
		a := &s.acts
		if k := s.keptActs(i); k != nil {
			a = k
		}
		if err := n.recordLayer(r, L, a, s.ckpt[i], s.ckpt[i+1], w.NB, w.T, false); err != nil {
			r.Discard()
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err := r.Submit(); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	if len(n.layers) == 0 {
		return n.dev.Run(func(r *gpu.Recorder) error { return gpu.Embedding(r, n.embed, flat, s.ckpt[0]) })
	}
	return nil
}

// recordHead records the final norm and the KL loss with its gradient dh (zeroed first).
func (n *Net) recordHead(r *gpu.Recorder, w *Work) error {
	c := n.Config
	s := w.st
	rows := w.NB * w.T
	last := s.ckpt[len(n.layers)]
	if err := gpu.RMSNorm(r, last, n.finalNorm, s.hN, rows, c.HiddenSize, c.RMSNormEps, true); err != nil {
		return err
	}
	if err := gpu.Zero(r, s.dh); err != nil {
		return err
	}
	return gpu.KLLossBackward(r, s.hN, n.head, s.ids, s.pT, gpu.LogitsDims{Rows: rows, Hidden: c.HiddenSize, Vocab: c.VocabSize, K: s.topK}, w.klScale(), gpu.KLOptions{}, s.dh, s.kl, s.loss)
}

// prepare validates a Student call and uploads its top-k; it returns the flattened ids and
// the number of real windows.
func (n *Net) prepare(op string, w *Work, ids [][]int, top *TopK) ([]int, int, error) {
	if err := n.requireStudent(op); err != nil {
		return nil, 0, err
	}
	flat, nb, err := n.windows(op, w, ids, 0, 0)
	if err != nil {
		return nil, 0, err
	}
	if err := n.checkTopK(op, w, top, nb); err != nil {
		return nil, 0, err
	}
	if err := w.uploadTopK(top); err != nil {
		return nil, 0, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return flat, nb, nil
}

// LossOnly runs a Student's forward over ids (1 ≤ len(ids) ≤ work.NB windows of exactly
// work.T tokens; fewer windows are computed as padding and dropped, as TeacherTopK) and
// returns the distillation loss mean_t KL(p_T,topk ‖ p_S) over the given windows' tokens
// (float64 mean of the per-token f32 KL) and klPerToken [len(ids)·T]. top is the teacher's
// top-k for exactly these windows (TeacherTopK's result: top.NB = len(ids), top.T = work.T);
// p_T is top.Probs renormalised over the k; p_S is the student's softmax over the whole
// vocabulary, computed in slices (gpu.KLLossBackward; its dh pass runs too, into scratch).
// Gradients are not touched. Errors, before anything is submitted: a nil/released net or
// work, a Teacher net, a work of another net kind or architecture, no windows, more windows
// than the work holds, a window whose length is not work.T, an id outside the vocabulary, or
// a top-k whose NB, T, K or lengths disagree, with an id outside the student's vocabulary or
// repeated within a token, or probabilities not finite, negative or summing to 0 — each
// naming the value; then any GPU error.
func LossOnly(net *Net, work *Work, ids [][]int, top *TopK) (loss float64, klPerToken []float32, err error) {
	st, err := LossOnlyHidden(net, work, ids, top, HiddenLoss{}, nil)
	return st.Loss, st.KLPerToken, err
}

// LossOnlyHidden is LossOnly with the hidden-state loss h (off when h.Kind is ""): the loss
// KL + λ·Hidden with its parts in the StepStats (Finite: the loss is finite; Tokens: the
// given windows' tokens), hs the teacher's hidden states of exactly these windows at
// h.Layers. Errors: LossOnly's, a bad h (HiddenLoss.Validate) and hs missing or not matching
// the windows, T, hidden size or layers.
func LossOnlyHidden(net *Net, work *Work, ids [][]int, top *TopK, h HiddenLoss, hs *HiddenStates) (_ StepStats, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "LossOnly"
	flat, nb, err := net.prepare(op, work, ids, top)
	if err != nil {
		return StepStats{}, err
	}
	ha, err := net.hiddenTerm(op, work, h, hs, nb)
	if err != nil {
		return StepStats{}, err
	}
	if err := net.studentForward(work, flat); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if err := net.dev.Run(func(r *gpu.Recorder) error { return net.recordHead(r, work) }); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: head: %w", op, err)
	}
	if ha != nil {
		for _, l := range h.Layers {
			err := work.uploadHidden(ha, l)
			if err == nil {
				err = net.dev.Run(func(r *gpu.Recorder) error { return net.recordHiddenLoss(r, work, ha, l, nil) })
			}
			if err != nil {
				return StepStats{}, fmt.Errorf("nvgkit.%s: hidden-state loss of layer %d: %w", op, l, err)
			}
		}
	}
	kl, err := net.dev.ReadFloat32(work.st.kl)
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	real := nb * work.T
	kl = kl[:real:real]
	st := StepStats{KL: meanF64(kl), KLPerToken: kl, Tokens: real}
	st.Loss = st.KL
	if ha != nil {
		if err := work.hiddenParts(ha, &st, nb); err != nil {
			return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
	}
	st.Finite = finite(st.Loss)
	return st, nil
}

// finite reports whether x is neither NaN nor ±Inf.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func meanF64(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

// Step runs one student step (DESIGN.md §6) over ids — exactly work.NB windows of work.T
// tokens (a Step over fewer windows would weight the padding; make a Work of that size) —
// against the teacher's top-k top of those windows (top.NB = work.NB, top.T = work.T):
//
//  1. the forward, one submit per layer, keeping every layer's input (checkpoints);
//  2. the final norm and the loss mean_t KL(p_T,topk ‖ p_S) with its gradient d loss/d h
//     by gpu.KLLossBackward over vocabulary slices (the nb·t × vocab logits never exist);
//  3. layer by layer in reverse, one submit per layer: the layer's forward recomputed from
//     its checkpoint (or, in a work made with KeepActivations, the forward's kept
//     activations, bit-identical), then its backward (host.Net.LayerBackward's chain, f32 on the GPU),
//     ACCUMULATING (+=) into the gradient buffers of every BLR path's h, ℓ, g and of every
//     RMSNorm gain (ZeroGrads clears them; nothing else does);
//  4. the sum of squares of every gradient buffer, read back with the per-token KL.
//
// d loss/d input embeddings is left in the work (EmbedGrads). The frozen weights (sign
// bits, dense projections, embedding, head, conv, A_log, dt_bias) get no gradient.
// Errors, before anything is submitted: those of LossOnly, and a number of windows other
// than work.NB; then any GPU error.
func Step(net *Net, work *Work, ids [][]int, top *TopK) (StepStats, error) {
	return StepHidden(net, work, ids, top, HiddenLoss{}, nil)
}

// StepHidden is Step with the hidden-state loss h (off when h.Kind is ""; then it is Step,
// dispatch for dispatch): before layer l's backward (step 3), for each l in h.Layers, the
// teacher's hidden state of layer l (hs, uploaded then) is compared with the student's layer
// output (its checkpoint l+1) by gpu.HiddenLoss, which adds λ/|Layers| times the KL's
// per-token gradient scale (1/(nb·t), or SetLossScale's) times ∂e/∂h_S to the residual
// gradient at that output. The StepStats hold the parts: Loss = KL + λ·Hidden. Errors: Step's,
// a bad h (HiddenLoss.Validate), and hs missing or not of these windows' shape and layers.
func StepHidden(net *Net, work *Work, ids [][]int, top *TopK, h HiddenLoss, hs *HiddenStates) (_ StepStats, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "Step"
	if err := work.check(op, net); err != nil {
		return StepStats{}, err
	}
	if len(ids) != work.NB {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %d windows, but a step takes exactly the work's nb = %d windows (nb·t must match the Work)", op, len(ids), work.NB)
	}
	flat, _, err := net.prepare(op, work, ids, top)
	if err != nil {
		return StepStats{}, err
	}
	ha, err := net.hiddenTerm(op, work, h, hs, work.NB)
	if err != nil {
		return StepStats{}, err
	}
	net.st.ssValid = false // the gradients change from here on, even if the step fails
	s := work.st
	s.embed = nil
	own := s.acts
	defer func() { s.acts = own }() // the recompute's kept t1 and c die with each layer's submit
	if err := net.studentForward(work, flat); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	c := net.Config
	rows := work.NB * work.T
	dCur, dNext := s.d0, s.d1
	err = net.dev.Run(func(r *gpu.Recorder) error {
		if err := net.recordHead(r, work); err != nil {
			return err
		}
		return gpu.RMSNormBackward(r, s.ckpt[len(net.layers)], net.finalNorm, s.dh, dCur, net.gainGrad(net.finalNorm), rows, c.HiddenSize, c.RMSNormEps, true)
	})
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: head: %w", op, err)
	}
	for l := len(net.layers) - 1; l >= 0; l-- {
		L := net.layers[l]
		_, matched := ha.selects(l)
		if matched {
			// The queue writes the teacher's state before the submit that reads it.
			if err := work.uploadHidden(ha, l); err != nil {
				return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d hidden-state loss: %w", op, l, err)
			}
		}
		r := net.dev.Begin()
		if matched {
			if err := net.recordHiddenLoss(r, work, ha, l, dCur); err != nil {
				r.Discard()
				return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d hidden-state loss: %w", op, l, err)
			}
		}
		if k := s.keptActs(l); k != nil {
			s.acts = *k
		} else if err := net.recordLayer(r, L, &s.acts, s.ckpt[l], nil, work.NB, work.T, true); err != nil {
			r.Discard()
			return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d recompute: %w", op, l, err)
		}
		if err := net.recordLayerBackward(r, L, s, s.ckpt[l], dCur, dNext, work.NB, work.T); err != nil {
			r.Discard()
			return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d backward: %w", op, l, err)
		}
		err = r.Submit()
		s.acts = own
		if err != nil {
			return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d: %w", op, l, err)
		}
		dCur, dNext = dNext, dCur
	}
	s.embed = dCur
	ss, err := net.gradSumSquares()
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	kl, err := net.dev.ReadFloat32(s.kl)
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	st := StepStats{KL: meanF64(kl), KLPerToken: kl, Tokens: rows}
	st.Loss = st.KL
	if ha != nil {
		if err := work.hiddenParts(ha, &st, work.NB); err != nil {
			return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
	}
	st.Finite = finite(st.Loss) && finite(ss)
	return st, nil
}

// EmbedGrads returns d loss/d input embeddings [work.NB·work.T·H] (row = window·t +
// position, f32) of the last Step on work: the gradient that leaves layer 0 (it costs no
// extra compute; the fixtures' grad.embeds). Errors: a nil or released work, a Teacher's
// work, or no Step since NewWork (or since a failed Step).
func EmbedGrads(work *Work) ([]float32, error) {
	if work == nil || work.released {
		return nil, errors.New("nvgkit.EmbedGrads: nil or released work")
	}
	if work.st == nil {
		return nil, errors.New("nvgkit.EmbedGrads: the work was made for a teacher net")
	}
	if work.st.embed == nil {
		return nil, errors.New("nvgkit.EmbedGrads: no Step has completed on this work")
	}
	return work.dev.ReadFloat32(work.st.embed)
}

// StudentNLL is NLL for a Student net: the summed next-token negative log-likelihood
// (natural log) over windows of work.T+1 tokens (inputs w[:T], targets w[1:]) and the number
// of predicted tokens. It runs LossOnly against a one-hot "teacher" (K = 1, the target with
// probability 1), whose KL(p_T ‖ p_S) is exactly −log p_S(target); per-token values are f32
// from the GPU, summed in float64. Windows go work.NB at a time; progress, when not nil, is
// called after each group. Errors: no windows, a window whose length is not work.T+1, and
// LossOnly's errors (naming the first window of the group). A non-finite sum is returned
// as it is; FirstNonFinite(net, work, windows) names the layer where it starts.
func StudentNLL(net *Net, work *Work, windows [][]int, progress func(done, total int)) (sum float64, count int, err error) {
	return StudentNLLContext(context.Background(), net, work, windows, progress)
}

// StudentNLLContext is StudentNLL stopped by ctx: before each group of work.NB windows it
// returns, when ctx is done, an error wrapping context.Cause(ctx).
func StudentNLLContext(ctx context.Context, net *Net, work *Work, windows [][]int, progress func(done, total int)) (sum float64, count int, err error) {
	defer func() { err = memRemedy(err) }()
	if work == nil {
		return 0, 0, errors.New("nvgkit.StudentNLL: nil work")
	}
	if len(windows) == 0 {
		return 0, 0, errors.New("nvgkit.StudentNLL: no windows")
	}
	T := work.T
	for i, w := range windows {
		if len(w) != T+1 {
			return 0, 0, fmt.Errorf("nvgkit.StudentNLL: window %d has %d tokens, want t+1 = %d", i, len(w), T+1)
		}
	}
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("nvgkit.StudentNLL: stopped after %d of %d windows: %w", g0, len(windows), context.Cause(ctx))
		}
		group := windows[g0:min(g0+work.NB, len(windows))]
		ids := make([][]int, len(group))
		top := &TopK{NB: len(group), T: T, K: 1, IDs: make([]int32, 0, len(group)*T), Probs: make([]float32, len(group)*T)}
		for b, w := range group {
			ids[b] = w[:T]
			for _, id := range w[1:] {
				top.IDs = append(top.IDs, int32(id))
			}
		}
		for i := range top.Probs {
			top.Probs[i] = 1
		}
		_, kl, err := LossOnly(net, work, ids, top)
		if err != nil {
			return 0, 0, fmt.Errorf("nvgkit.StudentNLL: windows %d…: %w", g0, err)
		}
		for _, v := range kl {
			sum += float64(v)
		}
		count += len(kl)
		if progress != nil {
			progress(g0+len(group), len(windows))
		}
	}
	return sum, count, nil
}
