package arch

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/testkit/jsontest"
)

func tinyConfigJSON(t testing.TB) map[string]any {
	return jsontest.Object(t, "../cmf/tinyteacher/model/config.json")
}

func TestParseConfigTinyTeacher(t *testing.T) {
	c, err := ParseConfig(jsontest.Marshal(t, tinyConfigJSON(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ModelType: "qwen3_5_text", VocabSize: 8192, HiddenSize: 256, NumHiddenLayers: 8, IntermediateSize: 768,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 64, LinearNumKeyHeads: 1, LinearNumValueHeads: 2,
		LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernelDim: 4,
		LayerTypes: []string{LinearAttention, LinearAttention, LinearAttention, FullAttention, LinearAttention, LinearAttention, LinearAttention, FullAttention},
		RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25, TieWordEmbeddings: true, EOSTokenID: 0}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	// The arch JSON stored in CMF files parses back to the same config.
	c2, err := ParseConfig(c.JSON())
	if err != nil || !reflect.DeepEqual(c2, c) {
		t.Fatalf("JSON round trip: %v\n%+v", err, c2)
	}
}

// TestParseConfigNestedTextConfig is the layout of the released vision-language
// checkpoints: text fields under text_config, tie_word_embeddings and a list eos_token_id at
// the top level, full_attention_interval next to layer_types.
func TestParseConfigNestedTextConfig(t *testing.T) {
	text := tinyConfigJSON(t)
	delete(text, "tie_word_embeddings")
	delete(text, "eos_token_id")
	text["full_attention_interval"] = 4
	top := map[string]any{
		"model_type":          "qwen3_5",
		"architectures":       []string{"Qwen3_5ForConditionalGeneration"},
		"text_config":         text,
		"vision_config":       map[string]any{"hidden_size": 1152, "depth": 27},
		"tie_word_embeddings": false,
		"eos_token_id":        []int{7, 9},
	}
	c, err := ParseConfig(jsontest.Marshal(t, top))
	if err != nil {
		t.Fatal(err)
	}
	if c.TieWordEmbeddings || c.EOSTokenID != 7 || c.HiddenSize != 256 || c.RotaryDim() != 16 || c.FullAttentionInterval != 4 || !c.IsFullAttention(7) || c.ModelType != "qwen3_5_text" {
		t.Fatalf("%+v", c)
	}
	// The text config's own tie_word_embeddings wins over the top level's.
	text["tie_word_embeddings"] = true
	c, err = ParseConfig(jsontest.Marshal(t, top))
	if err != nil || !c.TieWordEmbeddings {
		t.Fatal(err, c.TieWordEmbeddings)
	}
}

func TestParseConfigLayerTypes(t *testing.T) {
	base := tinyConfigJSON(t)
	delete(base, "layer_types")
	base["num_hidden_layers"] = 6
	// From full_attention_interval.
	base["full_attention_interval"] = 3
	c, err := ParseConfig(jsontest.Marshal(t, base))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{LinearAttention, LinearAttention, FullAttention, LinearAttention, LinearAttention, FullAttention}
	if !reflect.DeepEqual(c.LayerTypes, want) {
		t.Fatalf("interval 3: %v", c.LayerTypes)
	}
	// Neither: HF's default interval 4.
	delete(base, "full_attention_interval")
	c, err = ParseConfig(jsontest.Marshal(t, base))
	if err != nil {
		t.Fatal(err)
	}
	want = []string{LinearAttention, LinearAttention, LinearAttention, FullAttention, LinearAttention, LinearAttention}
	if !reflect.DeepEqual(c.LayerTypes, want) {
		t.Fatalf("default: %v", c.LayerTypes)
	}
	// Both, disagreeing.
	full := tinyConfigJSON(t)
	full["full_attention_interval"] = 2
	if _, err := ParseConfig(jsontest.Marshal(t, full)); err == nil || !strings.Contains(err.Error(), "layer_types[1]") || !strings.Contains(err.Error(), "full_attention_interval 2") {
		t.Fatalf("disagreeing layer_types/interval: %v", err)
	}
}

// TestParseConfigFieldErrors: each bad field gives an error naming it.
func TestParseConfigFieldErrors(t *testing.T) {
	cases := []struct {
		field string
		set   func(m map[string]any)
	}{
		{"vocab_size", func(m map[string]any) { m["vocab_size"] = 0 }},
		{"hidden_size", func(m map[string]any) { m["hidden_size"] = -256 }},
		{"intermediate_size", func(m map[string]any) { delete(m, "intermediate_size") }},
		{"num_hidden_layers", func(m map[string]any) { m["num_hidden_layers"] = 7 }}, // layer_types has 8
		{"layer_types[2]", func(m map[string]any) { m["layer_types"].([]any)[2] = "sliding_attention" }},
		{"num_key_value_heads", func(m map[string]any) { m["num_key_value_heads"] = 3 }},
		{"head_dim", func(m map[string]any) { m["head_dim"] = 0 }},
		{"linear_num_key_heads", func(m map[string]any) { m["linear_num_key_heads"] = 3 }},
		{"linear_value_head_dim", func(m map[string]any) { m["linear_value_head_dim"] = 0 }},
		{"rms_norm_eps", func(m map[string]any) { m["rms_norm_eps"] = 0 }},
		{"partial_rotary_factor", func(m map[string]any) {
			m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 1.5
		}},
		{"rotary dimension", func(m map[string]any) {
			m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.01
		}},
		{"rope_type", func(m map[string]any) { m["rope_parameters"].(map[string]any)["rope_type"] = "yarn" }},
		{"rope_theta", func(m map[string]any) {
			delete(m["rope_parameters"].(map[string]any), "rope_theta")
		}},
		{"eos_token_id", func(m map[string]any) { m["eos_token_id"] = "x" }},
		{"full_attention_interval", func(m map[string]any) { m["full_attention_interval"] = -1 }},
		{"hidden_size", func(m map[string]any) { m["hidden_size"] = "256" }},
		{"text_config", func(m map[string]any) { m["text_config"] = 5 }},
		{"linear_conv_kernel_dim", func(m map[string]any) { m["linear_conv_kernel_dim"] = -4 }},
		{"vocab_size", func(m map[string]any) { m["vocab_size"] = 1 << 30 }},
	}
	for _, tc := range cases {
		m := tinyConfigJSON(t)
		tc.set(m)
		_, err := ParseConfig(jsontest.Marshal(t, m))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	if _, err := ParseConfig([]byte("[1,2]")); err == nil || err.Error() != `not a JSON object (it starts with "[1,2]")` {
		t.Errorf("non-object config: %v", err)
	}
}

// TestParseConfigRejectsOtherArchitectures: configs that would parse into a plausible
// Config but describe another model are refused, naming the field.
func TestParseConfigRejectsOtherArchitectures(t *testing.T) {
	base, err := os.ReadFile("../cmf/tinyteacher/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, val, want string }{
		{"model_type", `"llama"`, `model_type "llama" is not supported`},
		{"hidden_act", `"gelu"`, `hidden_act "gelu" is not supported`},
		{"num_experts", `64`, `num_experts = 64`},
	} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		m[c.key] = json.RawMessage(c.val)
		b, _ := json.Marshal(m)
		if _, err := ParseConfig(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %s: error %v, want one containing %q", c.key, c.val, err, c.want)
		}
	}
	if _, err := ParseConfig(base); err != nil {
		t.Fatalf("the tiny teacher's own config: %v", err)
	}
}
