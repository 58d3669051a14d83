package host

import (
	"fmt"
	"math"
	"sort"

	"github.com/nvg-project/nvg/arch"
)

// StudentGrads is the result of Net.StudentLossGrad: the distillation loss of a student
// step and the gradients of everything the student trains (DESIGN.md §6).
//
// Grads is keyed by parameter name:
//
//   - an RMSNorm gain by its HF tensor name, e.g. "model.norm.weight",
//     "model.layers.3.input_layernorm.weight", "model.layers.3.post_attention_layernorm.weight",
//     "model.layers.3.self_attn.q_norm.weight", "model.layers.3.self_attn.k_norm.weight",
//     "model.layers.0.linear_attn.norm.weight" (the gated norm); each the shape of the gain
//     ([H], [hd] or [dv]). The HF fixtures store the same values as "grad." + name. The
//     gradient is d loss/d w of the stored w (for the zero-centred norms, also d loss/d (1+w));
//   - the metric of every BLR linear by its tensor name, the path p (0-based) and the scale:
//     "<tensor>.p<p>.h" [m], "<tensor>.p<p>.l" [r] (ℓ) and "<tensor>.p<p>.g" [n], e.g.
//     "model.layers.0.mlp.up_proj.weight.p0.h" (arch.MetricName builds them).
//
// Dense projections, the embedding, the head, the conv, A_log and dt_bias are frozen and
// have no entry.
type StudentGrads struct {
	Loss       float64              // KL + λ·Hidden (without a hidden-state term: KL)
	KL         float64              // mean over the nb·t tokens of KL(p_T ‖ p_S)
	Hidden     float64              // the hidden-state loss L_hidden, unweighted (HiddenTerm); 0 without one
	KLPerToken []float64            // [nb·t], token r = window·t + position
	Embeds     []float64            // d loss / d input embeddings [nb·t, H]
	Grads      map[string][]float64 // see the type's doc
}

// Names returns the keys of g.Grads in sorted order.
func (g *StudentGrads) Names() []string {
	names := make([]string, 0, len(g.Grads))
	for k := range g.Grads {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// addGrad accumulates v into grads[name].
func addGrad(grads map[string][]float64, name string, v []float64) {
	if g, ok := grads[name]; ok {
		for i := range g {
			g[i] += v[i]
		}
		return
	}
	grads[name] = append([]float64(nil), v...)
}

// linBack runs LinearBackward and records the metric gradients of a BLR linear under name.
func linBack(grads map[string][]float64, name string, l Linear, x []float64, rows int, dy []float64) ([]float64, error) {
	dx, paths, err := LinearBackward(l, x, rows, dy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for p, g := range paths {
		addGrad(grads, arch.MetricName(name, p, arch.ScaleH), g.H)
		addGrad(grads, arch.MetricName(name, p, arch.ScaleL), g.L)
		addGrad(grads, arch.MetricName(name, p, arch.ScaleG), g.G)
	}
	return dx, nil
}

func addInto(dst, src []float64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// LayerBackward is the backward of decoder layer a.Layer from its forward values a (as
// Net.LayerActs returns them; the student step recomputes them from the layer's
// checkpointed input): given dOut = d loss / d a.Out [nb·t, H], it returns
// d loss / d a.X [nb·t, H] and adds, into grads (keys as StudentGrads.Grads), the
// gradients of the layer's RMSNorm gains and of the metric of its BLR linears.
// Errors: a nil a or grads, a.Layer out of range, a layer kind that disagrees with the
// net's, or lengths that disagree, named with the layer.
func (n *Net) LayerBackward(a *LayerActs, dOut []float64, grads map[string][]float64) ([]float64, error) {
	if a == nil || grads == nil {
		return nil, fmt.Errorf("host.Net.LayerBackward: nil activations or gradient map")
	}
	if a.Layer < 0 || a.Layer >= len(n.Layers) {
		return nil, fmt.Errorf("host.Net.LayerBackward: layer %d is outside [0, %d)", a.Layer, len(n.Layers))
	}
	L := n.Layers[a.Layer]
	if (L.Attn != nil) != (a.Attn != nil) || (L.Delta != nil) != (a.Delta != nil) {
		return nil, fmt.Errorf("host.Net.LayerBackward: layer %d: activations are of another mixer kind than the layer", a.Layer)
	}
	H := n.Config.HiddenSize
	rows := a.NB * a.T
	if rows <= 0 || len(a.X) != rows*H || len(dOut) != rows*H {
		return nil, fmt.Errorf("host.Net.LayerBackward: layer %d: X has %d and dOut %d values, want nb·t·H = %d·%d·%d", a.Layer, len(a.X), len(dOut), a.NB, a.T, H)
	}
	dx, err := n.layerBackward(L, a, dOut, grads)
	if err != nil {
		return nil, fmt.Errorf("host.Net.LayerBackward: layer %d: %w", a.Layer, err)
	}
	return dx, nil
}

func (n *Net) layerBackward(L *DecoderLayer, a *LayerActs, dOut []float64, grads map[string][]float64) ([]float64, error) {
	c := n.Config
	rows, H := a.NB*a.T, c.HiddenSize
	if a.Layer >= len(c.LayerTypes) || c.IsFullAttention(a.Layer) != (L.Attn != nil) {
		return nil, fmt.Errorf("layer %d: the net's config does not describe this layer", a.Layer)
	}
	T := c.Layer(a.Layer) // the checkpoint names the gradients are keyed by
	// MLP: Out = Resid + down(SwiGLU(gate(Norm2), up(Norm2))).
	dAct, err := linBack(grads, T.MLP.DownProj.Name, L.DownProj, a.Act, rows, dOut)
	if err != nil {
		return nil, err
	}
	dGate, dUp, err := SwiGLUBackward(a.Gate, a.Up, dAct)
	if err != nil {
		return nil, err
	}
	dNorm2, err := linBack(grads, T.MLP.GateProj.Name, L.GateProj, a.Norm2, rows, dGate)
	if err != nil {
		return nil, err
	}
	d, err := linBack(grads, T.MLP.UpProj.Name, L.UpProj, a.Norm2, rows, dUp)
	if err != nil {
		return nil, err
	}
	addInto(dNorm2, d)
	dResid, dw, err := RMSNormBackward(a.Resid, rows, H, L.PostNorm, c.RMSNormEps, true, dNorm2)
	if err != nil {
		return nil, err
	}
	addGrad(grads, T.PostAttentionLayernorm.Name, dw)
	addInto(dResid, dOut)
	// Mixer: Resid = X + mixer(Norm1).
	var dNorm1 []float64
	if L.Attn != nil {
		dNorm1, err = n.attentionBackward(L.Attn, T.SelfAttn, a, dResid, grads)
	} else {
		dNorm1, err = n.deltaNetBackward(L.Delta, T.LinearAttn, a, dResid, grads)
	}
	if err != nil {
		return nil, err
	}
	dX, dw, err := RMSNormBackward(a.X, rows, H, L.InputNorm, c.RMSNormEps, true, dNorm1)
	if err != nil {
		return nil, err
	}
	addGrad(grads, T.InputLayernorm.Name, dw)
	addInto(dX, dResid)
	return dX, nil
}

// attentionBackward returns d loss / d Norm1 of the gated attention mixer for dMixer.
func (n *Net) attentionBackward(w *AttentionWeights, names *arch.Attention, la *LayerActs, dMixer []float64, grads map[string][]float64) ([]float64, error) {
	c := n.Config
	a := la.Attn
	nb, t := la.NB, la.T
	rows, nh, nkv, hd := nb*t, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	dGated, err := linBack(grads, names.OProj.Name, w.OProj, a.Gated, rows, dMixer)
	if err != nil {
		return nil, err
	}
	dO, dGate, err := AttentionGateBackward(a.O, a.Gate, dGated)
	if err != nil {
		return nil, err
	}
	dQR, dKR, dV, err := AttentionBackward(a.QR, a.KR, a.V, a.O, a.LSE, dO, nb, t, nh, nkv, hd)
	if err != nil {
		return nil, err
	}
	dQ, dqn, err := QKNormRoPEBackward(a.Q, rows, nh, hd, w.QNorm, c.RMSNormEps, c.RotaryDim(), c.RopeTheta, t, dQR)
	if err != nil {
		return nil, err
	}
	addGrad(grads, names.QNorm.Name, dqn)
	dK, dkn, err := QKNormRoPEBackward(a.K, rows, nkv, hd, w.KNorm, c.RMSNormEps, c.RotaryDim(), c.RopeTheta, t, dKR)
	if err != nil {
		return nil, err
	}
	addGrad(grads, names.KNorm.Name, dkn)
	// Interleave per head back into q_proj's layout [rows, nh, 2·hd].
	dQG := make([]float64, rows*nh*2*hd)
	for rh := 0; rh < rows*nh; rh++ {
		copy(dQG[rh*2*hd:], dQ[rh*hd:(rh+1)*hd])
		copy(dQG[rh*2*hd+hd:], dGate[rh*hd:(rh+1)*hd])
	}
	dx, err := linBack(grads, names.QProj.Name, w.QProj, la.Norm1, rows, dQG)
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		l    Linear
		dy   []float64
	}{{names.KProj.Name, w.KProj, dK}, {names.VProj.Name, w.VProj, dV}} {
		d, err := linBack(grads, s.name, s.l, la.Norm1, rows, s.dy)
		if err != nil {
			return nil, err
		}
		addInto(dx, d)
	}
	return dx, nil
}

// deltaNetBackward returns d loss / d Norm1 of the GatedDeltaNet mixer for dMixer.
func (n *Net) deltaNetBackward(w *DeltaNetWeights, names *arch.GatedDeltaNet, la *LayerActs, dMixer []float64, grads map[string][]float64) ([]float64, error) {
	c := n.Config
	a := la.Delta
	nb, t := la.NB, la.T
	rows := nb * t
	hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	C := 2*hk*dk + hv*dv
	dNormed, err := linBack(grads, names.OutProj.Name, w.OutProj, a.Normed, rows, dMixer)
	if err != nil {
		return nil, err
	}
	dCore, dZ, dnw, err := GatedRMSNormBackward(a.Core, a.Z, rows, hv, dv, w.Norm, c.RMSNormEps, dNormed)
	if err != nil {
		return nil, err
	}
	addGrad(grads, names.Norm.Name, dnw)
	dQ, dK, dV, dG, dBeta, err := GatedDeltaRuleBackward(a.Q, a.K, a.V, a.G, a.Beta, dCore, nb, t, hk, hv, dk, dv)
	if err != nil {
		return nil, err
	}
	dA, dB, err := GatedDeltaGatesBackward(a.A, a.B, rows, hv, w.ALog, w.DtBias, dG, dBeta)
	if err != nil {
		return nil, err
	}
	// The q and k channels of Conv before their L2 norms.
	qr := make([]float64, rows*hk*dk)
	kr := make([]float64, rows*hk*dk)
	for r := 0; r < rows; r++ {
		row := a.Conv[r*C : (r+1)*C]
		copy(qr[r*hk*dk:], row[:hk*dk])
		copy(kr[r*hk*dk:], row[hk*dk:2*hk*dk])
	}
	dqr, err := L2NormBackward(qr, rows*hk, dk, 1/math.Sqrt(float64(dk)), dQ)
	if err != nil {
		return nil, err
	}
	dkr, err := L2NormBackward(kr, rows*hk, dk, 1, dK)
	if err != nil {
		return nil, err
	}
	dConv := make([]float64, rows*C)
	for r := 0; r < rows; r++ {
		row := dConv[r*C : (r+1)*C]
		copy(row, dqr[r*hk*dk:(r+1)*hk*dk])
		copy(row[hk*dk:], dkr[r*hk*dk:(r+1)*hk*dk])
		copy(row[2*hk*dk:], dV[r*hv*dv:(r+1)*hv*dv])
	}
	dQKV, err := CausalConv1dSiLUBackward(a.QKV, nb, t, C, w.Conv, K, dConv)
	if err != nil {
		return nil, err
	}
	dx, err := linBack(grads, names.InProjQKV.Name, w.InProjQKV, la.Norm1, rows, dQKV)
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		l    Linear
		dy   []float64
	}{{names.InProjZ.Name, w.InProjZ, dZ}, {names.InProjB.Name, w.InProjB, dB}, {names.InProjA.Name, w.InProjA, dA}} {
		d, err := linBack(grads, s.name, s.l, la.Norm1, rows, s.dy)
		if err != nil {
			return nil, err
		}
		addInto(dx, d)
	}
	return dx, nil
}

// HiddenTerm is the hidden-state term of a student step's loss (DESIGN.md §6 "Hidden-state
// loss"): the step's loss becomes
//
//	KL + Weight·L_hidden,   L_hidden = (1/|Layers|)·Σ_{l ∈ Layers} (1/rows)·Σ_r e_{l,r},
//
// with e_{l,r} HiddenLoss (normalised MSE, or 1 − cos when Cosine) of token r of the
// student's residual stream after decoder layer l against Targets[i] (l = Layers[i]), the
// teacher's. The zero HiddenTerm (no layers) is no term.
type HiddenTerm struct {
	// Cosine selects the cosine distance; false the normalised MSE.
	Cosine bool
	// Weight is λ (finite, ≥ 0).
	Weight float64
	// Layers are the decoder layers whose outputs are matched, ascending and distinct.
	Layers []int
	// Targets[i] [nb·t·H] is the teacher's hidden state after decoder layer Layers[i] (row r
	// = window·t + position).
	Targets [][]float64
}

// check validates h for a net of L layers over rows tokens of hidden size H.
func (h *HiddenTerm) check(op string, L, rows, H int) error {
	if h == nil || len(h.Layers) == 0 {
		return nil
	}
	if !(h.Weight >= 0) || math.IsInf(h.Weight, 0) {
		return fmt.Errorf("host.Net.%s: hidden-state weight %g, want a finite value ≥ 0", op, h.Weight)
	}
	if len(h.Targets) != len(h.Layers) {
		return fmt.Errorf("host.Net.%s: %d hidden-state targets for %d layers", op, len(h.Targets), len(h.Layers))
	}
	for i, l := range h.Layers {
		if l < 0 || l >= L || (i > 0 && l <= h.Layers[i-1]) {
			return fmt.Errorf("host.Net.%s: hidden-state layers %v: want ascending, distinct layers in [0, %d)", op, h.Layers, L)
		}
		if len(h.Targets[i]) != rows*H {
			return fmt.Errorf("host.Net.%s: hidden-state target of layer %d has %d values, want nb·t·H = %d", op, l, len(h.Targets[i]), rows*H)
		}
	}
	return nil
}

// hiddenParts runs the forward over the ids (flat, nb windows of t tokens) keeping each
// layer's input when ckpt is not nil (ckpt[l], l < L), and returns the last layer's output;
// with the term h it also returns L_hidden (unweighted) and, when grads is not nil, fills
// grads[l] with Weight·∂L_hidden/∂(output of layer l) for the layers of h.
func (n *Net) hiddenParts(flat []int, nb, t int, h *HiddenTerm, ckpt [][]float64, grads map[int][]float64) (x []float64, hidden float64, err error) {
	c := n.Config
	rows, H := nb*t, c.HiddenSize
	if x, err = Embedding(n.Embed, c.VocabSize, H, flat); err != nil {
		return nil, 0, err
	}
	sel := 0
	for l := range n.Layers {
		if ckpt != nil {
			ckpt[l] = x
		}
		a, err := n.layer(l, x, nb, t)
		if err != nil {
			return nil, 0, err
		}
		x = a.Out
		if h == nil || sel >= len(h.Layers) || h.Layers[sel] != l {
			continue
		}
		e, g, err := HiddenLoss(x, h.Targets[sel], rows, H, h.Cosine)
		if err != nil {
			return nil, 0, err
		}
		for _, v := range e {
			hidden += v
		}
		if grads != nil {
			scale := h.Weight / float64(len(h.Layers)*rows)
			for i := range g {
				g[i] *= scale
			}
			grads[l] = g
		}
		sel++
	}
	if h != nil && len(h.Layers) > 0 {
		hidden /= float64(len(h.Layers) * rows)
	}
	return x, hidden, nil
}

// StudentLossGrad runs one student step's forward and backward on the host (DESIGN.md §6):
// the forward over ids (nb windows of t tokens) keeping only each layer's input
// (checkpoints), the head and KLLoss a block of rows at a time (at most ~2M logits per
// block; the nb·t × vocab logits are never all held), then the final norm's backward and,
// layer by layer in reverse, the layer's forward recomputed from its checkpoint and its
// LayerBackward. The loss is the mean over the nb·t tokens of KL(p_T ‖ p_S) (see KLLoss).
//
// topkIDs and topkProb are [nb·t, k] row-major (token r = window·t + position): the
// teacher's top-k ids and probabilities, renormalised here over the k. It returns the loss,
// the per-token KL, d loss / d input embeddings and the gradients of every RMSNorm gain and
// every BLR metric scale, keyed as StudentGrads documents.
// Errors: as Forward for ids; k outside [1, vocab]; teacher rows as KLLoss; any Linear
// without a backward (see LinearBackward).
func (n *Net) StudentLossGrad(ids [][]int, topkIDs []int, topkProb []float64, k int) (*StudentGrads, error) {
	return n.StudentLossGradHidden(ids, topkIDs, topkProb, k, HiddenTerm{})
}

// StudentLossGradHidden is StudentLossGrad with the hidden-state term h: the loss is
// KL + h.Weight·L_hidden (StudentGrads.KL and .Hidden hold the parts), and before layer l's
// backward h.Weight·∂L_hidden/∂(output of layer l) is added to the residual gradient there.
// Errors: StudentLossGrad's, and h's weight, layers or target lengths (named).
func (n *Net) StudentLossGradHidden(ids [][]int, topkIDs []int, topkProb []float64, k int, h HiddenTerm) (*StudentGrads, error) {
	const op = "StudentLossGrad"
	flat, t, err := n.checkIDs(ids, op)
	if err != nil {
		return nil, err
	}
	c := n.Config
	nb := len(ids)
	rows, H, V := nb*t, c.HiddenSize, c.VocabSize
	if k < 1 {
		return nil, fmt.Errorf("host.Net.%s: k = %d must be at least 1", op, k)
	}
	pT, err := teacherTopK("Net."+op, topkIDs, topkProb, rows, V, k)
	if err != nil {
		return nil, err
	}
	if err := h.check(op, len(n.Layers), rows, H); err != nil {
		return nil, err
	}
	ckpt := make([][]float64, len(n.Layers))
	hGrads := map[int][]float64{}
	x, hidden, err := n.hiddenParts(flat, nb, t, &h, ckpt, hGrads)
	if err != nil {
		return nil, err
	}
	hN := rmsNorm(x, rows, H, n.FinalNorm, c.RMSNormEps, true)
	sg := &StudentGrads{KLPerToken: make([]float64, rows), Hidden: hidden, Grads: map[string][]float64{}}
	dh := make([]float64, rows*H)
	var dl []float64
	err = n.headBlocks(hN, rows, func(r0, nr int, logits []float64) error {
		if cap(dl) < nr*V {
			dl = make([]float64, nr*V)
		}
		dl = dl[:nr*V]
		klRows(logits, nr, V, topkIDs[r0*k:(r0+nr)*k], pT[r0*k:(r0+nr)*k], k, 1/float64(rows), sg.KLPerToken[r0:r0+nr], dl)
		d, _, err := LinearBackward(n.Head, hN[r0*H:(r0+nr)*H], nr, dl)
		if err != nil {
			return fmt.Errorf("host.Net.%s: head: %w", op, err)
		}
		copy(dh[r0*H:], d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, v := range sg.KLPerToken {
		sg.KL += v
	}
	sg.KL /= float64(rows)
	sg.Loss = sg.KL + h.Weight*hidden
	dx, dw := rmsNormBackward(x, rows, H, n.FinalNorm, c.RMSNormEps, true, dh)
	addGrad(sg.Grads, "model.norm.weight", dw)
	for l := len(n.Layers) - 1; l >= 0; l-- {
		if g, ok := hGrads[l]; ok {
			addInto(dx, g)
		}
		a, err := n.layer(l, ckpt[l], nb, t)
		if err != nil {
			return nil, err
		}
		if dx, err = n.LayerBackward(a, dx, sg.Grads); err != nil {
			return nil, err
		}
		ckpt[l] = nil
	}
	sg.Embeds = dx
	return sg, nil
}

// StudentLoss is the forward half of StudentLossGrad: the mean over the nb·t tokens of
// KL(p_T ‖ p_S) and the per-token KL [nb·t], with the same arguments, blocks and errors
// (for finite-difference checks and evaluation).
func (n *Net) StudentLoss(ids [][]int, topkIDs []int, topkProb []float64, k int) (loss float64, perToken []float64, err error) {
	loss, _, _, perToken, err = n.StudentLossHidden(ids, topkIDs, topkProb, k, HiddenTerm{})
	return loss, perToken, err
}

// StudentLossHidden is the forward half of StudentLossGradHidden: the loss
// KL + h.Weight·hidden, its parts kl (the mean KL) and hidden (L_hidden, unweighted), and the
// per-token KL [nb·t]. Errors: StudentLossGradHidden's.
func (n *Net) StudentLossHidden(ids [][]int, topkIDs []int, topkProb []float64, k int, h HiddenTerm) (loss, kl, hidden float64, perToken []float64, err error) {
	const op = "StudentLoss"
	flat, t, err := n.checkIDs(ids, op)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	c := n.Config
	nb := len(ids)
	rows, V := nb*t, c.VocabSize
	if k < 1 {
		return 0, 0, 0, nil, fmt.Errorf("host.Net.%s: k = %d must be at least 1", op, k)
	}
	pT, err := teacherTopK("Net."+op, topkIDs, topkProb, rows, V, k)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	if err := h.check(op, len(n.Layers), rows, c.HiddenSize); err != nil {
		return 0, 0, 0, nil, err
	}
	x, hidden, err := n.hiddenParts(flat, nb, t, &h, nil, nil)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	hN := rmsNorm(x, rows, c.HiddenSize, n.FinalNorm, c.RMSNormEps, true)
	perToken = make([]float64, rows)
	var dl []float64
	err = n.headBlocks(hN, rows, func(r0, nr int, logits []float64) error {
		if cap(dl) < nr*V {
			dl = make([]float64, nr*V)
		}
		klRows(logits, nr, V, topkIDs[r0*k:(r0+nr)*k], pT[r0*k:(r0+nr)*k], k, 0, perToken[r0:r0+nr], dl[:nr*V])
		return nil
	})
	if err != nil {
		return 0, 0, 0, nil, err
	}
	for _, v := range perToken {
		kl += v
	}
	kl /= float64(rows)
	return kl + h.Weight*hidden, kl, hidden, perToken, nil
}
