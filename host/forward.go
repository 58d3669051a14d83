package host

import (
	"fmt"
	"math"
)

// LayerActs are the values computed by one decoder layer on nb windows of t tokens, every
// one [nb·t, …] row-major, kept for the backward and for GPU parity tests. Exactly one of
// Attn and Delta is non-nil.
type LayerActs struct {
	X      []float64 // input residual stream [nb·t, H]
	Norm1  []float64 // RMSNorm(X, input_layernorm) [nb·t, H]
	Mixer  []float64 // mixer output (after o_proj / out_proj) [nb·t, H]
	Resid  []float64 // X + Mixer [nb·t, H]
	Norm2  []float64 // RMSNorm(Resid, post_attention_layernorm) [nb·t, H]
	Gate   []float64 // gate_proj(Norm2) [nb·t, I]
	Up     []float64 // up_proj(Norm2) [nb·t, I]
	Act    []float64 // SwiGLU(Gate, Up) [nb·t, I]
	MLP    []float64 // down_proj(Act) [nb·t, H]
	Out    []float64 // Resid + MLP, the layer output [nb·t, H]
	Attn   *AttentionActs
	Delta  *DeltaNetActs
	NB, T  int // windows and tokens per window
	Layer  int // decoder layer index
	IsFull bool
}

// AttentionActs are the gated full-attention intermediates (nh query heads, nkv KV heads,
// head size hd).
type AttentionActs struct {
	QG     []float64 // q_proj(Norm1) [nb·t, nh, 2·hd]
	Q      []float64 // query part of QG [nb·t, nh, hd]
	Gate   []float64 // gate part of QG [nb·t, nh, hd]
	K, V   []float64 // k_proj, v_proj outputs [nb·t, nkv, hd]
	QR, KR []float64 // QKNormRoPE of Q and K
	O      []float64 // Attention output [nb·t, nh, hd]
	LSE    []float64 // Attention log-sum-exp [nb·t, nh]
	Gated  []float64 // AttentionGate(O, Gate) [nb·t, nh·hd], the o_proj input
}

// DeltaNetActs are the GatedDeltaNet intermediates (Hk key heads of dk, Hv value heads of dv,
// C = 2·Hk·dk + Hv·dv conv channels).
type DeltaNetActs struct {
	QKV     []float64 // in_proj_qkv(Norm1) [nb·t, C]
	Conv    []float64 // CausalConv1dSiLU(QKV) [nb·t, C]
	Q, K    []float64 // L2Norm of the q and k channels (q scaled by dk^−½) [nb·t, Hk, dk]
	V       []float64 // v channels of Conv [nb·t, Hv, dv]
	Z       []float64 // in_proj_z(Norm1) [nb·t, Hv, dv]
	A, B    []float64 // in_proj_a, in_proj_b outputs [nb·t, Hv]
	G, Beta []float64 // GatedDeltaGates [nb·t, Hv]
	Core    []float64 // GatedDeltaRule output [nb·t, Hv, dv]
	Normed  []float64 // GatedRMSNorm(Core, Z) [nb·t, Hv·dv], the out_proj input
}

// Layer runs decoder layer l alone on x [nb·t, H] (nb windows of t tokens) and returns its
// output [nb·t, H]. Errors: l out of range, non-positive nb or t, len(x) ≠ nb·t·H.
func (n *Net) Layer(l int, x []float64, nb, t int) ([]float64, error) {
	a, err := n.LayerActs(l, x, nb, t)
	if err != nil {
		return nil, err
	}
	return a.Out, nil
}

// LayerActs runs decoder layer l on x [nb·t, H] like Layer and returns every intermediate
// value. Errors as Layer.
func (n *Net) LayerActs(l int, x []float64, nb, t int) (*LayerActs, error) {
	if l < 0 || l >= len(n.Layers) {
		return nil, fmt.Errorf("host.Net.Layer: layer %d is outside [0, %d)", l, len(n.Layers))
	}
	if nb <= 0 || t <= 0 {
		return nil, fmt.Errorf("host.Net.Layer: nb = %d windows and t = %d tokens must be positive", nb, t)
	}
	H := n.Config.HiddenSize
	if len(x) != nb*t*H {
		return nil, fmt.Errorf("host.Net.Layer: x has %d values, want nb·t·H = %d·%d·%d = %d", len(x), nb, t, H, nb*t*H)
	}
	return n.layer(l, x, nb, t)
}

func (n *Net) layer(l int, x []float64, nb, t int) (*LayerActs, error) {
	c := n.Config
	L := n.Layers[l]
	rows, H := nb*t, c.HiddenSize
	a := &LayerActs{X: x, NB: nb, T: t, Layer: l, IsFull: L.Attn != nil}
	var err error
	a.Norm1 = rmsNorm(x, rows, H, L.InputNorm, c.RMSNormEps, true)
	if L.Attn != nil {
		a.Attn, a.Mixer, err = n.attention(L.Attn, a.Norm1, nb, t)
	} else {
		a.Delta, a.Mixer, err = n.deltaNet(L.Delta, a.Norm1, nb, t)
	}
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	if a.Resid, err = ResidualAdd(x, a.Mixer); err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	a.Norm2 = rmsNorm(a.Resid, rows, H, L.PostNorm, c.RMSNormEps, true)
	a.Gate = L.GateProj.Apply(a.Norm2, rows)
	a.Up = L.UpProj.Apply(a.Norm2, rows)
	if a.Act, err = SwiGLU(a.Gate, a.Up); err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	a.MLP = L.DownProj.Apply(a.Act, rows)
	if a.Out, err = ResidualAdd(a.Resid, a.MLP); err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	return a, nil
}

// attention is the gated full-attention mixer on xn [nb·t, H].
func (n *Net) attention(w *AttentionWeights, xn []float64, nb, t int) (*AttentionActs, []float64, error) {
	c := n.Config
	rows, nh, nkv, hd := nb*t, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	a := &AttentionActs{}
	var err error
	a.QG = w.QProj.Apply(xn, rows)
	if a.Q, a.Gate, err = SplitQueryGate(a.QG, rows, nh, hd); err != nil {
		return nil, nil, err
	}
	a.K = w.KProj.Apply(xn, rows)
	a.V = w.VProj.Apply(xn, rows)
	if a.QR, err = QKNormRoPE(a.Q, rows, nh, hd, w.QNorm, c.RMSNormEps, c.RotaryDim(), c.RopeTheta, t); err != nil {
		return nil, nil, err
	}
	if a.KR, err = QKNormRoPE(a.K, rows, nkv, hd, w.KNorm, c.RMSNormEps, c.RotaryDim(), c.RopeTheta, t); err != nil {
		return nil, nil, err
	}
	if a.O, a.LSE, err = Attention(a.QR, a.KR, a.V, nb, t, nh, nkv, hd); err != nil {
		return nil, nil, err
	}
	if a.Gated, err = AttentionGate(a.O, a.Gate); err != nil {
		return nil, nil, err
	}
	return a, w.OProj.Apply(a.Gated, rows), nil
}

// deltaNet is the GatedDeltaNet mixer on xn [nb·t, H].
func (n *Net) deltaNet(w *DeltaNetWeights, xn []float64, nb, t int) (*DeltaNetActs, []float64, error) {
	c := n.Config
	rows := nb * t
	hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	C := 2*hk*dk + hv*dv
	a := &DeltaNetActs{}
	var err error
	a.QKV = w.InProjQKV.Apply(xn, rows)
	if a.Conv, err = CausalConv1dSiLU(a.QKV, nb, t, C, w.Conv, K); err != nil {
		return nil, nil, err
	}
	qr := make([]float64, rows*hk*dk)
	kr := make([]float64, rows*hk*dk)
	a.V = make([]float64, rows*hv*dv)
	for r := 0; r < rows; r++ {
		row := a.Conv[r*C : (r+1)*C]
		copy(qr[r*hk*dk:(r+1)*hk*dk], row[:hk*dk])
		copy(kr[r*hk*dk:(r+1)*hk*dk], row[hk*dk:2*hk*dk])
		copy(a.V[r*hv*dv:(r+1)*hv*dv], row[2*hk*dk:])
	}
	if a.Q, err = L2Norm(qr, rows*hk, dk, 1/math.Sqrt(float64(dk))); err != nil {
		return nil, nil, err
	}
	if a.K, err = L2Norm(kr, rows*hk, dk, 1); err != nil {
		return nil, nil, err
	}
	a.Z = w.InProjZ.Apply(xn, rows)
	a.B = w.InProjB.Apply(xn, rows)
	a.A = w.InProjA.Apply(xn, rows)
	if a.G, a.Beta, err = GatedDeltaGates(a.A, a.B, rows, hv, w.ALog, w.DtBias); err != nil {
		return nil, nil, err
	}
	if a.Core, _, err = GatedDeltaRule(a.Q, a.K, a.V, a.G, a.Beta, nb, t, hk, hv, dk, dv, false); err != nil {
		return nil, nil, err
	}
	if a.Normed, err = GatedRMSNorm(a.Core, a.Z, rows, hv, dv, w.Norm, c.RMSNormEps); err != nil {
		return nil, nil, err
	}
	return a, w.OutProj.Apply(a.Normed, rows), nil
}

// ForwardOptions selects the optional outputs of Net.Forward.
type ForwardOptions struct {
	// TopK > 0 asks for the TopK ids and log-probabilities of every token (≤ vocab).
	TopK int
	// Logits0 asks for the full logits of window 0, [t, vocab].
	Logits0 bool
}

// Trace is the result of Net.Forward on nb windows of t tokens.
type Trace struct {
	NB, T int
	// Hidden[L], L = 0..num_layers, each [nb·t, H]: Hidden[0] the embeddings, Hidden[L] the
	// output of decoder layer L−1, except the last, Hidden[num_layers], which is the last
	// layer's output after the final norm (the head's input), as in the HF fixtures.
	Hidden [][]float64
	// LogSumExp [nb·t] of each token's logits (natural log).
	LogSumExp []float64
	// TopKIDs and TopKLogProbs [nb·t, k] when ForwardOptions.TopK = k > 0, descending,
	// ties by the lower id; nil otherwise.
	TopKIDs      []int
	TopKLogProbs []float64
	// Logits0 [t, vocab], the logits of window 0 when ForwardOptions.Logits0; nil otherwise.
	Logits0 []float64
}

// checkIDs validates nb windows of equal non-zero length with ids in [0, vocab) and
// returns them flattened.
func (n *Net) checkIDs(ids [][]int, what string) ([]int, int, error) {
	if len(ids) == 0 {
		return nil, 0, fmt.Errorf("host.Net.%s: no windows", what)
	}
	t := len(ids[0])
	if t == 0 {
		return nil, 0, fmt.Errorf("host.Net.%s: window 0 is empty", what)
	}
	V := n.Config.VocabSize
	flat := make([]int, 0, len(ids)*t)
	for b, w := range ids {
		if len(w) != t {
			return nil, 0, fmt.Errorf("host.Net.%s: window %d has %d tokens but window 0 has %d", what, b, len(w), t)
		}
		for i, id := range w {
			if id < 0 || id >= V {
				return nil, 0, fmt.Errorf("host.Net.%s: token %d of window %d is %d, outside [0, %d)", what, i, b, id, V)
			}
		}
		flat = append(flat, w...)
	}
	return flat, t, nil
}

// Forward runs the model on ids, nb windows of t tokens each (positions 0..t−1 in every
// window, no state across windows), and returns the hidden states of every layer, the
// per-token log-sum-exp of the logits and the outputs asked for in opt. Logits are
// computed a block of rows at a time and never all kept.
// Errors: no windows, windows of unequal or zero length, an id outside [0, vocab),
// opt.TopK outside [0, vocab], a NaN logit when TopK is asked for.
func (n *Net) Forward(ids [][]int, opt ForwardOptions) (*Trace, error) {
	flat, t, err := n.checkIDs(ids, "Forward")
	if err != nil {
		return nil, err
	}
	c := n.Config
	if opt.TopK < 0 || opt.TopK > c.VocabSize {
		return nil, fmt.Errorf("host.Net.Forward: TopK = %d is outside [0, vocab = %d]", opt.TopK, c.VocabSize)
	}
	nb := len(ids)
	tr := &Trace{NB: nb, T: t}
	h, err := n.hidden(flat, nb, t, func(l int, x []float64) { tr.Hidden = append(tr.Hidden, x) })
	if err != nil {
		return nil, err
	}
	tr.Hidden = append(tr.Hidden, h)
	rows, V, k := nb*t, c.VocabSize, opt.TopK
	tr.LogSumExp = make([]float64, rows)
	if k > 0 {
		tr.TopKIDs = make([]int, rows*k)
		tr.TopKLogProbs = make([]float64, rows*k)
	}
	if opt.Logits0 {
		tr.Logits0 = make([]float64, t*V)
	}
	err = n.headBlocks(h, rows, func(r0, nr int, logits []float64) error {
		for i := 0; i < nr; i++ {
			tr.LogSumExp[r0+i] = logSumExp(logits[i*V : (i+1)*V])
		}
		if k > 0 {
			id, lp, err := TopK(logits, nr, V, k)
			if err != nil {
				return fmt.Errorf("host.Net.Forward: head rows %d..%d: %w", r0, r0+nr-1, err)
			}
			copy(tr.TopKIDs[r0*k:], id)
			copy(tr.TopKLogProbs[r0*k:], lp)
		}
		if opt.Logits0 && r0 < t {
			m := min(nr, t-r0)
			copy(tr.Logits0[r0*V:], logits[:m*V])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tr, nil
}

// hidden embeds flat (nb·t ids) and runs every layer; keep, when non-nil, receives the
// embeddings (l = 0) and the output of every layer but the last (l = 1..L−1). It returns
// the final-normed hidden state [nb·t, H].
func (n *Net) hidden(flat []int, nb, t int, keep func(l int, x []float64)) ([]float64, error) {
	c := n.Config
	x, err := Embedding(n.Embed, c.VocabSize, c.HiddenSize, flat)
	if err != nil {
		return nil, err
	}
	for l := range n.Layers {
		if keep != nil {
			keep(l, x)
		}
		a, err := n.layer(l, x, nb, t)
		if err != nil {
			return nil, err
		}
		x = a.Out
	}
	return rmsNorm(x, nb*t, c.HiddenSize, n.FinalNorm, c.RMSNormEps, true), nil
}

// headBlockLogits bounds the logits headBlocks holds at once (a variable so that tests can
// force several blocks on a small vocabulary).
var headBlockLogits = 1 << 21

// headBlocks applies the head to h [rows, H] a block of rows at a time (at most
// headBlockLogits ≈ 2M logits per block, at most 256 rows) and calls f with the first row,
// the row count and the block's logits [nr, vocab].
func (n *Net) headBlocks(h []float64, rows int, f func(r0, nr int, logits []float64) error) error {
	H, V := n.Config.HiddenSize, n.Config.VocabSize
	block := max(1, min(256, headBlockLogits/V))
	for r0 := 0; r0 < rows; r0 += block {
		nr := min(block, rows-r0)
		logits := n.Head.Apply(h[r0*H:(r0+nr)*H], nr)
		if err := f(r0, nr, logits); err != nil {
			return err
		}
	}
	return nil
}

// NLL returns the summed next-token negative log-likelihood (natural log) over windows of
// t+1 tokens each (inputs w[:t], targets w[1:]) and the number of predicted tokens, so
// perplexity = exp(sum/count). Windows are processed a few at a time; progress, if given,
// is called after each group with the windows done and the total.
// Errors: no windows, windows of unequal length or shorter than 2 tokens, ids outside
// [0, vocab).
func (n *Net) NLL(windows [][]int, progress ...func(done, total int)) (sum float64, count int, err error) {
	if len(windows) == 0 {
		return 0, 0, fmt.Errorf("host.Net.NLL: no windows")
	}
	if len(windows[0]) < 2 {
		return 0, 0, fmt.Errorf("host.Net.NLL: windows need at least 2 tokens (input and target), window 0 has %d", len(windows[0]))
	}
	if _, _, err := n.checkIDs(windows, "NLL"); err != nil {
		return 0, 0, err
	}
	t := len(windows[0]) - 1
	V := n.Config.VocabSize
	group := max(1, 2048/t)
	for b0 := 0; b0 < len(windows); b0 += group {
		nb := min(group, len(windows)-b0)
		flat := make([]int, 0, nb*t)
		targets := make([]int, 0, nb*t)
		for _, w := range windows[b0 : b0+nb] {
			flat = append(flat, w[:t]...)
			targets = append(targets, w[1:]...)
		}
		h, err := n.hidden(flat, nb, t, nil)
		if err != nil {
			return 0, 0, err
		}
		err = n.headBlocks(h, nb*t, func(r0, nr int, logits []float64) error {
			for i := 0; i < nr; i++ {
				row := logits[i*V : (i+1)*V]
				sum += logSumExp(row) - row[targets[r0+i]]
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		count += nb * t
		for _, p := range progress {
			if p != nil {
				p(b0+nb, len(windows))
			}
		}
	}
	return sum, count, nil
}
