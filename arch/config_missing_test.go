package arch

import (
	"strings"
	"testing"

	"github.com/nvg-project/nvg/testkit/jsontest"
)

// TestParseConfigMissingFields: a required field that config.json does not give (or gives as
// null) is reported as missing, by name; a zero or negative one as not positive. It used to
// say "must be positive, got 0" for both. The messages do not name the file: the caller does
// (cmf.TestConfigMessagesNameTheFileOnce), which made it "config.json: config.json: …".
func TestParseConfigMissingFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m map[string]any) map[string]any
		want string
	}{
		{"hidden_size absent", func(m map[string]any) map[string]any { delete(m, "hidden_size"); return m }, "hidden_size is missing"},
		{"hidden_size null", func(m map[string]any) map[string]any { m["hidden_size"] = nil; return m }, "hidden_size is missing"},
		{"hidden_size zero", func(m map[string]any) map[string]any { m["hidden_size"] = 0; return m }, "hidden_size must be positive, got 0"},
		{"vocab_size absent", func(m map[string]any) map[string]any { delete(m, "vocab_size"); return m }, "vocab_size is missing"},
		{"num_hidden_layers absent", func(m map[string]any) map[string]any { delete(m, "num_hidden_layers"); return m }, "num_hidden_layers is missing"},
		{"rms_norm_eps absent", func(m map[string]any) map[string]any { delete(m, "rms_norm_eps"); return m }, "rms_norm_eps is missing"},
		{"head_dim absent (attention layers)", func(m map[string]any) map[string]any { delete(m, "head_dim"); return m }, "head_dim is missing"},
		{"rope_theta absent", func(m map[string]any) map[string]any {
			delete(m, "rope_theta")
			delete(m, "rope_parameters")
			return m
		}, "rope_theta is missing (neither rope_parameters.rope_theta nor rope_theta is given)"},
		{"linear_key_head_dim absent, nested", func(m map[string]any) map[string]any {
			delete(m, "linear_key_head_dim")
			return map[string]any{"model_type": "qwen3_5", "text_config": m}
		}, "text_config: linear_key_head_dim is missing"},
		{"hidden_size negative, nested", func(m map[string]any) map[string]any {
			m["hidden_size"] = -3
			return map[string]any{"model_type": "qwen3_5", "text_config": m}
		}, "hidden_size must be positive, got -3"},
	} {
		_, err := ParseConfig(jsontest.Marshal(t, tc.edit(tinyConfigJSON(t))))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// A model without attention layers needs no attention fields.
	m := tinyConfigJSON(t)
	for _, k := range []string{"num_attention_heads", "num_key_value_heads", "head_dim"} {
		delete(m, k)
	}
	m["layer_types"] = []string{LinearAttention, LinearAttention}
	m["num_hidden_layers"] = 2
	if _, err := ParseConfig(jsontest.Marshal(t, m)); err != nil {
		t.Errorf("GatedDeltaNet-only config: %v", err)
	}
}

// TestParseConfigDuplicateKeys: a key given twice in one object of config.json — at the top,
// in text_config, in rope_parameters — is refused with its name and place; encoding/json
// would take the last value silently (a file that says hidden_size twice means one of two
// models).
func TestParseConfigDuplicateKeys(t *testing.T) {
	base := string(jsontest.Marshal(t, tinyConfigJSON(t)))
	for _, tc := range []struct{ doc, want string }{
		{strings.Replace(base, "{", `{"hidden_size": 512, `, 1), `duplicate key "hidden_size" at the top level`},
		{`{"model_type": "qwen3_5", "text_config": ` + strings.Replace(base, "{", `{"vocab_size": 1, `, 1) + `}`, `duplicate key "vocab_size" in text_config`},
		{strings.Replace(base, `"rope_parameters":{`, `"rope_parameters":{"rope_theta": 1, `, 1), `duplicate key "rope_theta" in rope_parameters`},
	} {
		if tc.doc == base {
			t.Fatalf("the edit for %q did not apply", tc.want)
		}
		_, err := ParseConfig([]byte(tc.doc))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want+" (a JSON object names it twice") {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
	if _, err := ParseConfig([]byte(base)); err != nil {
		t.Errorf("the config without duplicates: %v", err)
	}
}
