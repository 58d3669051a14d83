package arch

import (
	"fmt"
	"strconv"
)

// Role says what a checkpoint tensor does in the model.
type Role int

const (
	// Embedding is model.embed_tokens.weight [vocab, H].
	Embedding Role = iota
	// Head is lm_head.weight [vocab, H] (absent when tie_word_embeddings).
	Head
	// Norm is an RMSNorm gain: the layer norms, the final norm, q_norm/k_norm [head_dim]
	// and the GatedDeltaNet's gated norm [dv].
	Norm
	// Projection is a linear layer's weight [out_features, in_features] (y = W·x).
	Projection
	// Conv is the GatedDeltaNet's depthwise causal conv1d weight [C, 1, K].
	Conv
	// Decay is a GatedDeltaNet decay parameter: A_log or dt_bias [Hv].
	Decay
)

// String is the role's lower-case name ("embedding", "head", "norm", "projection", "conv",
// "decay").
func (r Role) String() string {
	switch r {
	case Embedding:
		return "embedding"
	case Head:
		return "head"
	case Norm:
		return "norm"
	case Projection:
		return "projection"
	case Conv:
		return "conv"
	case Decay:
		return "decay"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Tensor is one checkpoint tensor of the architecture.
type Tensor struct {
	// Name is the HF checkpoint name, e.g. "model.layers.3.mlp.up_proj.weight".
	Name string
	// Shape is the checkpoint shape, row-major (a projection is [out_features, in_features]).
	Shape []int
	Role  Role
	// BLR reports whether the student stores the tensor in binary low-rank form
	// (DESIGN.md §4): the decoder layers' projections except in_proj_a and in_proj_b.
	BLR bool
	// Trainable reports whether distillation trains the tensor itself (the RMSNorm gains).
	// A BLR tensor trains its metric vectors instead (MetricName); everything else is frozen.
	Trainable bool
}

// Attention is a gated full-attention mixer's tensors (HF Qwen3_5Attention, prefix
// "model.layers.N.self_attn."): nh query heads, nkv KV heads of head_dim hd. q_proj holds
// query and output gate interleaved per head ([nh·hd·2, H], DESIGN.md §3).
type Attention struct {
	QProj Tensor // [nh·hd·2, H]
	KProj Tensor // [nkv·hd, H]
	VProj Tensor // [nkv·hd, H]
	OProj Tensor // [H, nh·hd]
	QNorm Tensor // [hd]
	KNorm Tensor // [hd]
}

// GatedDeltaNet is a linear-attention mixer's tensors (HF Qwen3_5GatedDeltaNet, prefix
// "model.layers.N.linear_attn."): Hk key heads of dk, Hv value heads of dv,
// C = 2·Hk·dk + Hv·dv conv channels (q, k, v in that order), K conv taps.
type GatedDeltaNet struct {
	InProjQKV Tensor // [C, H]
	InProjZ   Tensor // [Hv·dv, H]
	InProjB   Tensor // [Hv, H]
	InProjA   Tensor // [Hv, H]
	Conv1d    Tensor // [C, 1, K]
	DtBias    Tensor // [Hv]
	ALog      Tensor // [Hv]
	Norm      Tensor // [dv]
	OutProj   Tensor // [H, Hv·dv]
}

// MLP is a SwiGLU feed-forward's tensors (HF Qwen3_5MLP, prefix "model.layers.N.mlp."):
// down(silu(gate(x)) ⊙ up(x)) with intermediate size I.
type MLP struct {
	GateProj Tensor // [I, H]
	UpProj   Tensor // [I, H]
	DownProj Tensor // [H, I]
}

// DecoderLayer is one decoder layer's tensors (HF Qwen3_5DecoderLayer): exactly one of
// SelfAttn and LinearAttn is set, by Type.
type DecoderLayer struct {
	Index                  int
	Type                   string // LinearAttention or FullAttention
	InputLayernorm         Tensor // [H]
	SelfAttn               *Attention
	LinearAttn             *GatedDeltaNet
	PostAttentionLayernorm Tensor // [H]
	MLP                    MLP
}

// Layout is every tensor of a model (HF Qwen3_5ForCausalLM's text part).
type Layout struct {
	EmbedTokens Tensor // model.embed_tokens.weight [vocab, H]
	Layers      []DecoderLayer
	Norm        Tensor  // model.norm.weight [H]
	LMHead      *Tensor // lm_head.weight [vocab, H]; nil when tie_word_embeddings
}

// LayerPrefix is the checkpoint-name prefix of decoder layer i: "model.layers.<i>.".
func LayerPrefix(i int) string { return "model.layers." + strconv.Itoa(i) + "." }

func proj(name string, out, in int, blr bool) Tensor {
	return Tensor{Name: name, Shape: []int{out, in}, Role: Projection, BLR: blr}
}

func norm(name string, n int) Tensor {
	return Tensor{Name: name, Shape: []int{n}, Role: Norm, Trainable: true}
}

// Layer returns decoder layer i's tensors with their shapes from c. c must be valid
// (Config.Validate) and 0 ≤ i < NumHiddenLayers; Layer panics otherwise, as an index out of
// range does.
func (c Config) Layer(i int) DecoderLayer {
	if i < 0 || i >= len(c.LayerTypes) {
		panic(fmt.Sprintf("arch.Config.Layer: layer %d out of range [0, %d)", i, len(c.LayerTypes)))
	}
	H, I := c.HiddenSize, c.IntermediateSize
	p := LayerPrefix(i)
	L := DecoderLayer{
		Index:                  i,
		Type:                   c.LayerTypes[i],
		InputLayernorm:         norm(p+"input_layernorm.weight", H),
		PostAttentionLayernorm: norm(p+"post_attention_layernorm.weight", H),
		MLP: MLP{
			GateProj: proj(p+"mlp.gate_proj.weight", I, H, true),
			UpProj:   proj(p+"mlp.up_proj.weight", I, H, true),
			DownProj: proj(p+"mlp.down_proj.weight", H, I, true),
		},
	}
	if c.IsFullAttention(i) {
		nh, nkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
		q := p + "self_attn."
		L.SelfAttn = &Attention{
			QProj: proj(q+"q_proj.weight", nh*hd*2, H, true),
			KProj: proj(q+"k_proj.weight", nkv*hd, H, true),
			VProj: proj(q+"v_proj.weight", nkv*hd, H, true),
			OProj: proj(q+"o_proj.weight", H, nh*hd, true),
			QNorm: norm(q+"q_norm.weight", hd),
			KNorm: norm(q+"k_norm.weight", hd),
		}
		return L
	}
	hk, hv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	C := 2*hk*dk + hv*dv
	q := p + "linear_attn."
	L.LinearAttn = &GatedDeltaNet{
		InProjQKV: proj(q+"in_proj_qkv.weight", C, H, true),
		InProjZ:   proj(q+"in_proj_z.weight", hv*dv, H, true),
		InProjB:   proj(q+"in_proj_b.weight", hv, H, false),
		InProjA:   proj(q+"in_proj_a.weight", hv, H, false),
		Conv1d:    Tensor{Name: q + "conv1d.weight", Shape: []int{C, 1, c.LinearConvKernelDim}, Role: Conv},
		DtBias:    Tensor{Name: q + "dt_bias", Shape: []int{hv}, Role: Decay},
		ALog:      Tensor{Name: q + "A_log", Shape: []int{hv}, Role: Decay},
		Norm:      norm(q+"norm.weight", dv),
		OutProj:   proj(q+"out_proj.weight", H, hv*dv, true),
	}
	return L
}

// Tensors returns the layer's tensors in checkpoint order: input_layernorm, the mixer's
// (in its struct's field order), post_attention_layernorm, the MLP's.
func (L DecoderLayer) Tensors() []Tensor {
	ts := []Tensor{L.InputLayernorm}
	if a := L.SelfAttn; a != nil {
		ts = append(ts, a.QProj, a.KProj, a.VProj, a.OProj, a.QNorm, a.KNorm)
	}
	if d := L.LinearAttn; d != nil {
		ts = append(ts, d.InProjQKV, d.InProjZ, d.InProjB, d.InProjA, d.Conv1d, d.DtBias, d.ALog, d.Norm, d.OutProj)
	}
	return append(ts, L.PostAttentionLayernorm, L.MLP.GateProj, L.MLP.UpProj, L.MLP.DownProj)
}

// Layout returns every tensor of the model with its shape from c (c must be valid).
func (c Config) Layout() Layout {
	H, V := c.HiddenSize, c.VocabSize
	l := Layout{
		EmbedTokens: Tensor{Name: "model.embed_tokens.weight", Shape: []int{V, H}, Role: Embedding},
		Norm:        norm("model.norm.weight", H),
	}
	for i := range c.LayerTypes {
		l.Layers = append(l.Layers, c.Layer(i))
	}
	if !c.TieWordEmbeddings {
		l.LMHead = &Tensor{Name: "lm_head.weight", Shape: []int{V, H}, Role: Head}
	}
	return l
}

// Tensors returns every tensor in checkpoint order: the embedding, each layer's
// (DecoderLayer.Tensors), the final norm, the head when untied.
func (l Layout) Tensors() []Tensor {
	ts := []Tensor{l.EmbedTokens}
	for _, L := range l.Layers {
		ts = append(ts, L.Tensors()...)
	}
	ts = append(ts, l.Norm)
	if l.LMHead != nil {
		ts = append(ts, *l.LMHead)
	}
	return ts
}

// Shapes maps every tensor name of c's model to its shape (a fresh map; c must be valid).
func (c Config) Shapes() map[string][]int {
	s := map[string][]int{}
	for _, t := range c.Layout().Tensors() {
		s[t.Name] = t.Shape
	}
	return s
}

// Metric scales of a BLR path (DESIGN.md §4): W_p = diag(h)·U·diag(ℓ)·V·diag(g).
const (
	ScaleH = "h" // output scale [out_features]
	ScaleL = "l" // ℓ, the rank scale [rank]
	ScaleG = "g" // input scale [in_features]
)

// MetricName is the trainable (and gradient) name of one metric scale of a BLR tensor:
// "<tensor>.p<path>.<scale>", e.g. "model.layers.0.mlp.up_proj.weight.p0.h"; path is
// 0-based and scale one of ScaleH, ScaleL, ScaleG.
func MetricName(tensor string, path int, scale string) string {
	return tensor + ".p" + strconv.Itoa(path) + "." + scale
}

// TrainableNames returns the names of everything a student of c with the given number of
// BLR paths trains, in checkpoint order: per layer, tensor by tensor, a Trainable gain's
// name or a BLR tensor's metric scales h, ℓ, g per path (MetricName); the final norm last.
// These are the keys of the gradients too (host.StudentGrads, nvgkit's trainables), which
// may hold them in another order.
func (c Config) TrainableNames(paths int) []string {
	var names []string
	for _, L := range c.Layout().Layers {
		for _, t := range L.Tensors() {
			if t.Trainable {
				names = append(names, t.Name)
			}
			if t.BLR {
				for p := 0; p < paths; p++ {
					names = append(names, MetricName(t.Name, p, ScaleH), MetricName(t.Name, p, ScaleL), MetricName(t.Name, p, ScaleG))
				}
			}
		}
	}
	return append(names, "model.norm.weight")
}
