package arch

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nvg-project/nvg/internal/jsondup"
)

// Layer kinds of Config.LayerTypes, as HF names them.
const (
	LinearAttention = "linear_attention" // GatedDeltaNet mixer
	FullAttention   = "full_attention"   // gated softmax attention mixer
)

// Config is the architecture of a Qwen3.5-family text model (HF transformers `qwen3_5`),
// with the field names of HF's config.json. DESIGN.md §3 gives the math each size enters.
type Config struct {
	ModelType           string   `json:"model_type"`
	VocabSize           int      `json:"vocab_size"`
	HiddenSize          int      `json:"hidden_size"`       // H
	NumHiddenLayers     int      `json:"num_hidden_layers"` // decoder layers
	IntermediateSize    int      `json:"intermediate_size"` // I, SwiGLU width
	NumAttentionHeads   int      `json:"num_attention_heads"`
	NumKeyValueHeads    int      `json:"num_key_value_heads"`
	HeadDim             int      `json:"head_dim"`
	LinearNumKeyHeads   int      `json:"linear_num_key_heads"`   // Hk
	LinearNumValueHeads int      `json:"linear_num_value_heads"` // Hv
	LinearKeyHeadDim    int      `json:"linear_key_head_dim"`    // dk
	LinearValueHeadDim  int      `json:"linear_value_head_dim"`  // dv
	LinearConvKernelDim int      `json:"linear_conv_kernel_dim"` // depthwise conv taps
	LayerTypes          []string `json:"layer_types"`            // one of LinearAttention, FullAttention per layer
	RMSNormEps          float64  `json:"rms_norm_eps"`
	RopeTheta           float64  `json:"rope_theta"`
	PartialRotaryFactor float64  `json:"partial_rotary_factor"`
	TieWordEmbeddings   bool     `json:"tie_word_embeddings"`
	// FullAttentionInterval is used only when config.json has no layer_types: layer i is
	// full attention when (i+1) % FullAttentionInterval == 0.
	FullAttentionInterval int `json:"full_attention_interval,omitempty"`
	EOSTokenID            int `json:"eos_token_id"`
}

// rawConfig is config.json as HF writes it: the text fields at the top level
// (model_type qwen3_5_text) or nested under text_config (vision-language checkpoints),
// RoPE settings in rope_parameters or at the top level.
type rawConfig struct {
	Config
	RopeParameters *struct {
		RopeTheta           float64 `json:"rope_theta"`
		PartialRotaryFactor float64 `json:"partial_rotary_factor"`
		RopeType            string  `json:"rope_type"`
	} `json:"rope_parameters"`
	TextConfig json.RawMessage `json:"text_config"`
	// tie_word_embeddings of a vision-language checkpoint may sit at the top level.
	TopTie *bool `json:"tie_word_embeddings"`
	// eos_token_id is an int or a list of ints in HF configs; this field shadows
	// Config.EOSTokenID (same JSON name, shallower field).
	EOS json.RawMessage `json:"eos_token_id"`
	// hidden_act must be silu (SwiGLU); nvg implements no other activation.
	HiddenAct string `json:"hidden_act"`
	// Mixture-of-experts fields: their presence means a model nvg does not implement.
	NumExperts int `json:"num_experts"`
}

// defaultFullAttentionInterval is HF's default when config.json has neither layer_types
// nor full_attention_interval (transformers qwen3_5 configuration).
const defaultFullAttentionInterval = 4

// maxLayers bounds num_hidden_layers.
const maxLayers = 4096

// ParseConfig parses an HF config.json of the Qwen3.5 text family, flat or with a nested
// text_config (vision-language checkpoints; tie_word_embeddings and eos_token_id may then
// sit at the top level), and validates the result (see Config.Validate). RoPE settings
// come from rope_parameters when present (rope_type must be "default"), else from the top
// level; partial_rotary_factor defaults to 1 and linear_conv_kernel_dim to 4. layer_types
// wins over full_attention_interval, but when both are given they must agree; with neither,
// HF's default interval 4 applies. eos_token_id may be an integer or a list (the first is
// kept). A key named twice in one object (anywhere in the file) is refused, naming the key
// and where it is, rather than taking the last value as encoding/json would.
//
// Errors name the offending field, and not the file: the caller, which knows the file's
// path (or that the JSON is a CMF file's arch metadata), puts it in front. A required field
// that is absent or null (the sizes, rms_norm_eps, and the attention or GatedDeltaNet fields
// the layer kinds need) is reported as "hidden_size is missing" ("text_config: hidden_size
// is missing" when nested), apart from one that is zero or negative ("hidden_size must be
// positive, got 0").
func ParseConfig(data []byte) (Config, error) {
	if err := jsondup.Check(data); err != nil {
		return Config{}, err
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return Config{}, fmt.Errorf("not a JSON object (it starts with %q)", t[:min(len(t), 16)])
	}
	var top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, err
	}
	raw := top
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		raw = rawConfig{}
		if err := json.Unmarshal(top.TextConfig, &raw); err != nil {
			return Config{}, fmt.Errorf("text_config: %w", err)
		}
	}
	c := raw.Config
	if err := checkSupported(top.ModelType, raw); err != nil {
		return Config{}, err
	}
	// Which fields the text config names: an absent (or null) size is "missing", which
	// Validate's "must be positive, got 0" would misreport.
	where, obj := "", data
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		where, obj = "text_config: ", top.TextConfig
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(obj, &keys); err != nil {
		return Config{}, fmt.Errorf("%s%w", where, err)
	}
	has := func(name string) bool { v, ok := keys[name]; return ok && string(v) != "null" }
	required := func(names ...string) error {
		for _, n := range names {
			if !has(n) {
				return fmt.Errorf("%s%s is missing", where, n)
			}
		}
		return nil
	}
	if err := required("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "rms_norm_eps"); err != nil {
		return Config{}, err
	}
	// rawConfig.TopTie shadows Config.TieWordEmbeddings (same JSON name, shallower field),
	// so the value lands there: take the text config's own, else the top level's.
	switch {
	case raw.TopTie != nil:
		c.TieWordEmbeddings = *raw.TopTie
	case top.TopTie != nil:
		c.TieWordEmbeddings = *top.TopTie
	}
	eos := raw.EOS
	if len(eos) == 0 {
		eos = top.EOS
	}
	if len(eos) > 0 && string(eos) != "null" {
		var one int
		var list []int
		switch {
		case json.Unmarshal(eos, &one) == nil:
			c.EOSTokenID = one
		case json.Unmarshal(eos, &list) == nil && len(list) > 0:
			c.EOSTokenID = list[0]
		default:
			return Config{}, fmt.Errorf("eos_token_id %s is neither an integer nor a non-empty list of integers", eos)
		}
	}
	if p := raw.RopeParameters; p != nil {
		if p.RopeType != "" && p.RopeType != "default" {
			return Config{}, fmt.Errorf("rope_parameters.rope_type %q is not supported (only \"default\")", p.RopeType)
		}
		if p.RopeTheta != 0 {
			c.RopeTheta = p.RopeTheta
		}
		if p.PartialRotaryFactor != 0 {
			c.PartialRotaryFactor = p.PartialRotaryFactor
		}
	}
	if c.PartialRotaryFactor == 0 {
		c.PartialRotaryFactor = 1
	}
	if c.LinearConvKernelDim == 0 {
		c.LinearConvKernelDim = 4
	}
	if c.FullAttentionInterval < 0 {
		return Config{}, fmt.Errorf("full_attention_interval must be positive, got %d", c.FullAttentionInterval)
	}
	if len(c.LayerTypes) == 0 {
		interval := c.FullAttentionInterval
		if interval == 0 {
			interval = defaultFullAttentionInterval
		}
		if c.NumHiddenLayers < 0 || c.NumHiddenLayers > maxLayers {
			return Config{}, fmt.Errorf("num_hidden_layers %d is out of range", c.NumHiddenLayers)
		}
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = LinearAttention
			if (i+1)%interval == 0 {
				c.LayerTypes[i] = FullAttention
			}
		}
	} else if c.FullAttentionInterval > 0 {
		// Both given (as in the released checkpoints): they must agree.
		for i, t := range c.LayerTypes {
			if want := (i+1)%c.FullAttentionInterval == 0; (t == FullAttention) != want && (t == FullAttention || t == LinearAttention) {
				return Config{}, fmt.Errorf("layer_types[%d] is %q but full_attention_interval %d says otherwise", i, t, c.FullAttentionInterval)
			}
		}
	}
	for _, t := range c.LayerTypes {
		var err error
		switch t {
		case FullAttention:
			err = required("num_attention_heads", "num_key_value_heads", "head_dim")
			if err == nil && c.RopeTheta == 0 && !has("rope_theta") {
				err = fmt.Errorf("%srope_theta is missing (neither rope_parameters.rope_theta nor rope_theta is given)", where)
			}
		case LinearAttention:
			err = required("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
		}
		if err != nil {
			return Config{}, err
		}
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks that every size is positive and consistent: head counts divide as GQA and
// GVA need (num_attention_heads a multiple of num_key_value_heads, linear_num_value_heads a
// multiple of linear_num_key_heads), len(layer_types) == num_hidden_layers with known kinds,
// the rotary dimension is even and within head_dim. The error names the field.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}

// validate is Validate without the "config: " prefix (ParseConfig's caller names the file).
func (c Config) validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"intermediate_size", c.IntermediateSize},
		{"linear_conv_kernel_dim", c.LinearConvKernelDim},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
		}
	}
	if len(c.LayerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("layer_types has %d entries but num_hidden_layers is %d", len(c.LayerTypes), c.NumHiddenLayers)
	}
	var nFull, nLin int
	for i, t := range c.LayerTypes {
		switch t {
		case FullAttention:
			nFull++
		case LinearAttention:
			nLin++
		default:
			return fmt.Errorf("layer_types[%d] is %q, want %q or %q", i, t, LinearAttention, FullAttention)
		}
	}
	if nFull > 0 {
		for _, p := range []struct {
			name string
			v    int
		}{{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}} {
			if p.v <= 0 {
				return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
			}
		}
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
			return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
		}
		if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
			return fmt.Errorf("partial_rotary_factor %g must be in (0, 1]", c.PartialRotaryFactor)
		}
		if r := c.RotaryDim(); r < 2 || r%2 != 0 {
			return fmt.Errorf("rotary dimension head_dim·partial_rotary_factor = %d must be even and ≥ 2", r)
		}
		if !(c.RopeTheta > 0) {
			return fmt.Errorf("rope_theta must be positive, got %g", c.RopeTheta)
		}
	}
	if nLin > 0 {
		for _, p := range []struct {
			name string
			v    int
		}{{"linear_num_key_heads", c.LinearNumKeyHeads}, {"linear_num_value_heads", c.LinearNumValueHeads},
			{"linear_key_head_dim", c.LinearKeyHeadDim}, {"linear_value_head_dim", c.LinearValueHeadDim}} {
			if p.v <= 0 {
				return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
			}
		}
		if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearNumValueHeads, c.LinearNumKeyHeads)
		}
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return fmt.Errorf("rms_norm_eps must be in (0, 1), got %g", c.RMSNormEps)
	}
	// Real checkpoints have at most a few hundred layers; the bound keeps the per-layer
	// tables (Config.Shapes, Config.Layout) of a hostile config small.
	if c.NumHiddenLayers > maxLayers {
		return fmt.Errorf("num_hidden_layers %d is implausibly large (> %d)", c.NumHiddenLayers, maxLayers)
	}
	const maxDim = 1 << 20
	for _, p := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"head_dim", c.HeadDim}, {"num_attention_heads", c.NumAttentionHeads},
		{"linear_key_head_dim", c.LinearKeyHeadDim}, {"linear_value_head_dim", c.LinearValueHeadDim},
		{"linear_num_value_heads", c.LinearNumValueHeads}, {"linear_conv_kernel_dim", c.LinearConvKernelDim}} {
		if p.v > maxDim {
			return fmt.Errorf("%s %d is implausibly large (> %d)", p.name, p.v, maxDim)
		}
	}
	return nil
}

// IsFullAttention reports whether decoder layer i is a gated full-attention layer
// (otherwise it is a GatedDeltaNet layer).
func (c Config) IsFullAttention(i int) bool { return c.LayerTypes[i] == FullAttention }

// RotaryDim is the number of leading head dimensions that RoPE rotates:
// int(head_dim · partial_rotary_factor).
func (c Config) RotaryDim() int { return int(float64(c.HeadDim)*c.PartialRotaryFactor + 1e-9) }

// JSON returns the config as compact JSON with HF field names (rope settings flattened to
// rope_theta and partial_rotary_factor), as stored in a CMF file's "arch" metadata.
func (c Config) JSON() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of plain fields always marshals
	}
	return b
}

// checkSupported rejects configs of other architectures that would otherwise parse into a
// plausible Config and run as Qwen3.5 with wrong results: a model_type outside the Qwen3.5
// family (qwen3_5 at the top of a vision-language checkpoint, qwen3_5_text for the text
// model), a hidden_act other than silu, mixture-of-experts MLPs.
func checkSupported(topType string, raw rawConfig) error {
	for _, mt := range []struct{ field, v string }{{"model_type", topType}, {"text_config.model_type", raw.ModelType}} {
		if mt.v != "" && mt.v != "qwen3_5" && mt.v != "qwen3_5_text" {
			return fmt.Errorf("%s %q is not supported (want qwen3_5 or qwen3_5_text)", mt.field, mt.v)
		}
	}
	if raw.HiddenAct != "" && raw.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (want silu: the MLP is SwiGLU)", raw.HiddenAct)
	}
	if raw.NumExperts > 0 {
		return fmt.Errorf("num_experts = %d: mixture-of-experts models are not supported", raw.NumExperts)
	}
	return nil
}
