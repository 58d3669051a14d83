package host

import (
	"fmt"
	"math"
	"slices"

	"github.com/nvg-project/nvg/arch"

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

// loader collects the tensors the architecture names and checks their shapes.
type loader struct{ m *cmf.Model }

// vec returns the float values of the checkpoint tensor a, which must have a's shape and a
// float dtype, every value finite.
func (ld loader) vec(a arch.Tensor) ([]float64, error) {
	name, shape := a.Name, a.Shape
	t, err := ld.m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(t.Shape, shape) {
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

// lin returns the projection a ([out, in]) as a Linear (dense or BLR).
func (ld loader) lin(a arch.Tensor) (Linear, error) {
	name, out, in := a.Name, a.Shape[0], a.Shape[1]
	t, err := ld.m.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(t.Shape, []int{out, in}) {
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
	l := c.Layout()
	n := &Net{Config: c}
	var err error
	if n.Embed, err = ld.vec(l.EmbedTokens); err != nil {
		return nil, err
	}
	if n.FinalNorm, err = ld.vec(l.Norm); err != nil {
		return nil, err
	}
	if l.LMHead == nil {
		if n.Head, err = NewDense(n.Embed, c.VocabSize, c.HiddenSize); err != nil {
			return nil, err
		}
	} else if n.Head, err = ld.lin(*l.LMHead); err != nil {
		return nil, err
	}
	for i, T := range l.Layers {
		L := &DecoderLayer{Index: i}
		if L.InputNorm, err = ld.vec(T.InputLayernorm); err != nil {
			return nil, err
		}
		if L.PostNorm, err = ld.vec(T.PostAttentionLayernorm); err != nil {
			return nil, err
		}
		if L.GateProj, err = ld.lin(T.MLP.GateProj); err != nil {
			return nil, err
		}
		if L.UpProj, err = ld.lin(T.MLP.UpProj); err != nil {
			return nil, err
		}
		if L.DownProj, err = ld.lin(T.MLP.DownProj); err != nil {
			return nil, err
		}
		if t := T.SelfAttn; t != nil {
			a := &AttentionWeights{}
			if a.QProj, err = ld.lin(t.QProj); err != nil {
				return nil, err
			}
			if a.KProj, err = ld.lin(t.KProj); err != nil {
				return nil, err
			}
			if a.VProj, err = ld.lin(t.VProj); err != nil {
				return nil, err
			}
			if a.OProj, err = ld.lin(t.OProj); err != nil {
				return nil, err
			}
			if a.QNorm, err = ld.vec(t.QNorm); err != nil {
				return nil, err
			}
			if a.KNorm, err = ld.vec(t.KNorm); err != nil {
				return nil, err
			}
			L.Attn = a
		} else {
			t := T.LinearAttn
			d := &DeltaNetWeights{}
			if d.InProjQKV, err = ld.lin(t.InProjQKV); err != nil {
				return nil, err
			}
			if d.InProjZ, err = ld.lin(t.InProjZ); err != nil {
				return nil, err
			}
			if d.InProjB, err = ld.lin(t.InProjB); err != nil {
				return nil, err
			}
			if d.InProjA, err = ld.lin(t.InProjA); err != nil {
				return nil, err
			}
			if d.OutProj, err = ld.lin(t.OutProj); err != nil {
				return nil, err
			}
			if d.Conv, err = ld.vec(t.Conv1d); err != nil {
				return nil, err
			}
			if d.ALog, err = ld.vec(t.ALog); err != nil {
				return nil, err
			}
			if d.DtBias, err = ld.vec(t.DtBias); err != nil {
				return nil, err
			}
			if d.Norm, err = ld.vec(t.Norm); err != nil {
				return nil, err
			}
			L.Delta = d
		}
		n.Layers = append(n.Layers, L)
	}
	return n, nil
}
