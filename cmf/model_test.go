package cmf

import (
	"strings"
	"testing"
)

func TestOpenTinyTeacher(t *testing.T) {
	m, err := Open("tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.HiddenSize != 256 || !m.Config.IsFullAttention(3) || m.Config.IsFullAttention(0) || m.Config.RotaryDim() != 16 {
		t.Fatalf("config %+v", m.Config)
	}
	e, err := m.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Float64()
	if err != nil || len(v) != 8192*256 {
		t.Fatal(err, len(v))
	}
}

func TestTieWordEmbeddingsParsed(t *testing.T) {
	m, err := Open("tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Config.TieWordEmbeddings {
		t.Fatal("tiny teacher config has tie_word_embeddings true, parsed false")
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNewModelSetValidate(t *testing.T) {
	src, err := Open("tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m := NewModel(src.Config)
	for _, n := range src.Names() {
		if err := m.Set(src.Tensors[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// A BLR replacement of a linear weight with the right logical shape is accepted.
	blr, err := NewTensor("model.layers.0.mlp.up_proj.weight", BLR, []int{768, 256}, []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(blr); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	bad, _ := NewFloatTensor("model.layers.0.mlp.up_proj.weight", F32, []int{256, 768}, make([]float64, 256*768))
	err = m.Set(bad)
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.up_proj.weight") || !strings.Contains(err.Error(), "[256 768]") || !strings.Contains(err.Error(), "[768 256]") {
		t.Fatalf("Set of a wrong shape: %v", err)
	}
	blrNorm, _ := NewTensor("model.norm.weight", BLR, []int{256}, []byte{1})
	if blrNorm != nil {
		if err := m.Set(blrNorm); err == nil {
			t.Fatal("BLR for a 1-D norm accepted")
		}
	}
	m.Delete("model.layers.7.self_attn.k_norm.weight")
	err = m.Validate()
	if err == nil || !strings.Contains(err.Error(), "model.layers.7.self_attn.k_norm.weight is missing (want shape [64])") {
		t.Fatalf("Validate without k_norm: %v", err)
	}
}

func TestParamCountsTinyTeacher(t *testing.T) {
	m, err := Open("tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := m.ParamCounts()
	// Hand count from the config (H=256, I=768, 6 GatedDeltaNet + 2 attention layers).
	const H, I, V = 256, 768, 8192
	mlp := int64(8 * 3 * H * I)
	attn := int64(2 * (512*H + 128*H + 128*H + H*256))
	gdn := int64(6 * (512*H + 256*H + 2*H + 2*H + 512*4 + 2 + 2 + H*256))
	norms := int64(8*2*H + H + 2*2*64 + 6*128)
	if p.Embedding != V*H || p.MLP != mlp || p.Attention != attn || p.GatedDeltaNet != gdn || p.Norms != norms || p.Head != 0 || p.Other != 0 {
		t.Fatalf("counts %+v; want mlp %d attn %d gdn %d norms %d", p, mlp, attn, gdn, norms)
	}
	// A_log and the gated norm are f32, everything else bf16.
	f32 := int64(6 * (2 + 128) * 4)
	if p.Bytes[F32] != f32 || p.Bytes[BF16] != 2*(p.Total()-f32/4) {
		t.Fatalf("bytes %v, total params %d", p.Bytes, p.Total())
	}
}
