package host

import (
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"math"

	"github.com/nvg-project/nvg/cmf"
)

// Net is a Qwen3.5 text model with every weight in float64 (DESIGN.md §3), loaded by Load.
type Net struct {
	Config    arch.Config
	Embed     []float64 // model.embed_tokens.weight [vocab, H] row-major
	FinalNorm []float64 // model.norm.weight [H], zero-centred gain (1 + w)
	// Head gives the logits h·Wᵀ [rows, vocab]: lm_head.weight, or a Dense over Embed when
	// tie_word_embeddings.
	Head   Linear
	Layers []*DecoderLayer
}

// DecoderLayer holds the weights of one decoder layer. Exactly one of Attn and Delta is
// non-nil, per Config.LayerTypes.
type DecoderLayer struct {
	Index     int
	InputNorm []float64 // input_layernorm.weight [H], gain (1 + w)
	PostNorm  []float64 // post_attention_layernorm.weight [H], gain (1 + w)
	Attn      *AttentionWeights
	Delta     *DeltaNetWeights
	GateProj  Linear // mlp.gate_proj [I, H]
	UpProj    Linear // mlp.up_proj [I, H]
	DownProj  Linear // mlp.down_proj [H, I]
}

// AttentionWeights are the weights of a gated full-attention mixer (self_attn.*).
type AttentionWeights struct {
	QProj Linear    // q_proj [nh·hd·2, H]: per head hd query values then hd gate values
	KProj Linear    // k_proj [nkv·hd, H]
	VProj Linear    // v_proj [nkv·hd, H]
	OProj Linear    // o_proj [H, nh·hd]
	QNorm []float64 // q_norm.weight [hd], gain (1 + w)
	KNorm []float64 // k_norm.weight [hd], gain (1 + w)
}

// DeltaNetWeights are the weights of a GatedDeltaNet mixer (linear_attn.*).
type DeltaNetWeights struct {
	InProjQKV Linear    // in_proj_qkv [2·Hk·dk + Hv·dv, H], channels [q | k | v]
	InProjZ   Linear    // in_proj_z [Hv·dv, H]
	InProjB   Linear    // in_proj_b [Hv, H]
	InProjA   Linear    // in_proj_a [Hv, H]
	OutProj   Linear    // out_proj [H, Hv·dv]
	Conv      []float64 // conv1d.weight [C, 1, K], C = 2·Hk·dk + Hv·dv
	ALog      []float64 // A_log [Hv]
	DtBias    []float64 // dt_bias [Hv]
	Norm      []float64 // norm.weight [dv], plain gain w of the gated norm
}

// loader collects tensors by name and checks their shapes.
type loader struct{ m *cmf.Model }

func (ld loader) vec(name string, shape ...int) ([]float64, error) {
	t, err := ld.m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !sameShape(t.Shape, shape) {
		return nil, fmt.Errorf("tensor %s: shape %v, want %v", name, t.Shape, shape)
	}
	if !t.DType.Float() {
		return nil, fmt.Errorf("tensor %s: dtype %s is not a float dtype", name, t.DType)
	}
	v, err := t.Float64()
	if err != nil {
		return nil, err
	}
	for i, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%s: element %d is %g (not finite)", t.Where(), i, x)
		}
	}
	return v, nil
}

func (ld loader) lin(name string, out, in int) (Linear, error) {
	t, err := ld.m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !sameShape(t.Shape, []int{out, in}) {
		return nil, fmt.Errorf("tensor %s: shape %v, want [%d %d]", name, t.Shape, out, in)
	}
	l, err := linearFromTensor(t)
	if err != nil {
		return nil, err
	}
	if l.Out() != out || l.In() != in {
		return nil, fmt.Errorf("tensor %s: linear is [%d, %d], want [%d, %d]", name, l.Out(), l.In(), out, in)
	}
	return l, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Load converts every weight of m to float64 (projections through linearFromTensor) after
// validating m.Config and every tensor's shape. Errors name the missing or malformed tensor.
// The returned Net does not reference m's files: m may be closed afterwards.
func Load(m *cmf.Model) (*Net, error) {
	if m == nil {
		return nil, fmt.Errorf("host.Load: nil model")
	}
	c := m.Config
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("host.Load: %w", err)
	}
	ld := loader{m}
	H, V, I := c.HiddenSize, c.VocabSize, c.IntermediateSize
	n := &Net{Config: c}
	var err error
	if n.Embed, err = ld.vec("model.embed_tokens.weight", V, H); err != nil {
		return nil, err
	}
	if n.FinalNorm, err = ld.vec("model.norm.weight", H); err != nil {
		return nil, err
	}
	if c.TieWordEmbeddings {
		if n.Head, err = NewDense(n.Embed, V, H); err != nil {
			return nil, err
		}
	} else if n.Head, err = ld.lin("lm_head.weight", V, H); err != nil {
		return nil, err
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		L := &DecoderLayer{Index: i}
		if L.InputNorm, err = ld.vec(p+"input_layernorm.weight", H); err != nil {
			return nil, err
		}
		if L.PostNorm, err = ld.vec(p+"post_attention_layernorm.weight", H); err != nil {
			return nil, err
		}
		if L.GateProj, err = ld.lin(p+"mlp.gate_proj.weight", I, H); err != nil {
			return nil, err
		}
		if L.UpProj, err = ld.lin(p+"mlp.up_proj.weight", I, H); err != nil {
			return nil, err
		}
		if L.DownProj, err = ld.lin(p+"mlp.down_proj.weight", H, I); err != nil {
			return nil, err
		}
		if c.IsFullAttention(i) {
			a := &AttentionWeights{}
			nh, nkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
			q := p + "self_attn."
			if a.QProj, err = ld.lin(q+"q_proj.weight", nh*hd*2, H); err != nil {
				return nil, err
			}
			if a.KProj, err = ld.lin(q+"k_proj.weight", nkv*hd, H); err != nil {
				return nil, err
			}
			if a.VProj, err = ld.lin(q+"v_proj.weight", nkv*hd, H); err != nil {
				return nil, err
			}
			if a.OProj, err = ld.lin(q+"o_proj.weight", H, nh*hd); err != nil {
				return nil, err
			}
			if a.QNorm, err = ld.vec(q+"q_norm.weight", hd); err != nil {
				return nil, err
			}
			if a.KNorm, err = ld.vec(q+"k_norm.weight", hd); err != nil {
				return nil, err
			}
			L.Attn = a
		} else {
			d := &DeltaNetWeights{}
			hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
			C := 2*hk*dk + hv*dv
			q := p + "linear_attn."
			if d.InProjQKV, err = ld.lin(q+"in_proj_qkv.weight", C, H); err != nil {
				return nil, err
			}
			if d.InProjZ, err = ld.lin(q+"in_proj_z.weight", hv*dv, H); err != nil {
				return nil, err
			}
			if d.InProjB, err = ld.lin(q+"in_proj_b.weight", hv, H); err != nil {
				return nil, err
			}
			if d.InProjA, err = ld.lin(q+"in_proj_a.weight", hv, H); err != nil {
				return nil, err
			}
			if d.OutProj, err = ld.lin(q+"out_proj.weight", H, hv*dv); err != nil {
				return nil, err
			}
			if d.Conv, err = ld.vec(q+"conv1d.weight", C, 1, K); err != nil {
				return nil, err
			}
			if d.ALog, err = ld.vec(q+"A_log", hv); err != nil {
				return nil, err
			}
			if d.DtBias, err = ld.vec(q+"dt_bias", hv); err != nil {
				return nil, err
			}
			if d.Norm, err = ld.vec(q+"norm.weight", dv); err != nil {
				return nil, err
			}
			L.Delta = d
		}
		n.Layers = append(n.Layers, L)
	}
	return n, nil
}
