package cmf

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Model is a Qwen3.5 text model: its architecture and its tensors by HF text name
// (`model.embed_tokens.weight`, `model.layers.N.…`, `model.norm.weight`, `lm_head.weight`
// when untied). Tensors may be file-backed (read lazily on Tensor.Bytes) or in memory.
// A Model is not safe for concurrent mutation (Set, Delete); concurrent reads of
// file-backed tensors are safe.
type Model struct {
	Config  arch.Config
	Tensors map[string]*Tensor
	// Source is the path the model was opened from (directory or file), "" if built in memory.
	Source  string
	closers []io.Closer
}

// NewModel returns an empty in-memory model of architecture cfg, to be filled with Set
// (for example by the compressor, which then writes it with WriteCMF). The config is not
// checked here; Validate and WriteCMF check it.
func NewModel(cfg arch.Config) *Model {
	return &Model{Config: cfg, Tensors: map[string]*Tensor{}}
}

// Set adds t to the model under t.Name, replacing any tensor of that name (a replaced
// file-backed tensor stays readable until Close). If the name is one the architecture
// defines (see ExpectedShapes), t's logical shape must be the expected one, and a BLR
// tensor is only allowed for a 2-D weight matrix. Errors name the tensor and both shapes.
func (m *Model) Set(t *Tensor) error {
	if t == nil {
		return fmt.Errorf("%s: Set: nil tensor", m.sourceName())
	}
	if t.Name == "" {
		return fmt.Errorf("%s: Set: tensor has no name", m.sourceName())
	}
	if want, ok := ExpectedShapes(m.Config)[t.Name]; ok {
		if err := checkShape(t, want); err != nil {
			return fmt.Errorf("%s: %w", m.sourceName(), err)
		}
	}
	if m.Tensors == nil {
		m.Tensors = map[string]*Tensor{}
	}
	m.Tensors[t.Name] = t
	return nil
}

// Delete removes the named tensor if present.
func (m *Model) Delete(name string) { delete(m.Tensors, name) }

// Tensor returns the named tensor or an error naming it and the model's source.
func (m *Model) Tensor(name string) (*Tensor, error) {
	t, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %s is missing", m.sourceName(), name)
	}
	return t, nil
}

// Names returns the tensor names sorted.
func (m *Model) Names() []string {
	names := make([]string, 0, len(m.Tensors))
	for n := range m.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close closes every file the model's tensors read from; file-backed tensors fail to read
// afterwards. Closing twice is harmless.
func (m *Model) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	m.closers = nil
	return errors.Join(errs...)
}

func (m *Model) sourceName() string {
	if m.Source == "" {
		return "model"
	}
	return m.Source
}

// ExpectedShapes returns every tensor the architecture cfg needs, by HF text name, with its
// (logical) shape (row-major, PyTorch [out, in] for linear weights):
//
//	model.embed_tokens.weight              [vocab, H]
//	model.norm.weight                      [H]
//	lm_head.weight                         [vocab, H]   only when tie_word_embeddings is false
//	model.layers.N.input_layernorm.weight  [H]
//	model.layers.N.post_attention_layernorm.weight [H]
//	model.layers.N.mlp.{gate,up}_proj.weight [I, H];  mlp.down_proj.weight [H, I]
//
// and per GatedDeltaNet layer (C = 2·Hk·dk + Hv·dv, K = linear_conv_kernel_dim)
//
//	linear_attn.in_proj_qkv.weight [C, H]     linear_attn.in_proj_z.weight [Hv·dv, H]
//	linear_attn.in_proj_a.weight   [Hv, H]    linear_attn.in_proj_b.weight [Hv, H]
//	linear_attn.conv1d.weight      [C, 1, K]  linear_attn.A_log [Hv]  linear_attn.dt_bias [Hv]
//	linear_attn.norm.weight        [dv]       linear_attn.out_proj.weight [H, Hv·dv]
//
// or per full-attention layer (nh heads, nkv KV heads, hd head_dim; q_proj holds query and
// gate interleaved per head, DESIGN.md §3)
//
//	self_attn.q_proj.weight [nh·hd·2, H]  self_attn.{k,v}_proj.weight [nkv·hd, H]
//	self_attn.o_proj.weight [H, nh·hd]    self_attn.{q,k}_norm.weight [hd]
//
// cfg is assumed valid (arch.Config.Validate); the map is freshly allocated.
func ExpectedShapes(cfg arch.Config) map[string][]int {
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	s := map[string][]int{
		"model.embed_tokens.weight": {V, H},
		"model.norm.weight":         {H},
	}
	if !cfg.TieWordEmbeddings {
		s["lm_head.weight"] = []int{V, H}
	}
	for i := range cfg.LayerTypes {
		p := "model.layers." + strconv.Itoa(i) + "."
		s[p+"input_layernorm.weight"] = []int{H}
		s[p+"post_attention_layernorm.weight"] = []int{H}
		s[p+"mlp.gate_proj.weight"] = []int{I, H}
		s[p+"mlp.up_proj.weight"] = []int{I, H}
		s[p+"mlp.down_proj.weight"] = []int{H, I}
		if cfg.IsFullAttention(i) {
			nh, nkv, hd := cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim
			s[p+"self_attn.q_proj.weight"] = []int{nh * hd * 2, H}
			s[p+"self_attn.k_proj.weight"] = []int{nkv * hd, H}
			s[p+"self_attn.v_proj.weight"] = []int{nkv * hd, H}
			s[p+"self_attn.o_proj.weight"] = []int{H, nh * hd}
			s[p+"self_attn.q_norm.weight"] = []int{hd}
			s[p+"self_attn.k_norm.weight"] = []int{hd}
		} else {
			hk, hv, dk, dv := cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
			c := 2*hk*dk + hv*dv
			s[p+"linear_attn.in_proj_qkv.weight"] = []int{c, H}
			s[p+"linear_attn.in_proj_z.weight"] = []int{hv * dv, H}
			s[p+"linear_attn.in_proj_a.weight"] = []int{hv, H}
			s[p+"linear_attn.in_proj_b.weight"] = []int{hv, H}
			s[p+"linear_attn.conv1d.weight"] = []int{c, 1, cfg.LinearConvKernelDim}
			s[p+"linear_attn.A_log"] = []int{hv}
			s[p+"linear_attn.dt_bias"] = []int{hv}
			s[p+"linear_attn.norm.weight"] = []int{dv}
			s[p+"linear_attn.out_proj.weight"] = []int{H, hv * dv}
		}
	}
	return s
}

func checkShape(t *Tensor, want []int) error {
	if !slices.Equal(t.Shape, want) {
		return fmt.Errorf("tensor %s: shape %v, want %v", t.Name, t.Shape, want)
	}
	switch t.DType {
	case F32, F16, BF16, F64:
	case BLR:
		if len(want) != 2 {
			return fmt.Errorf("tensor %s: dtype blr is only for 2-D weight matrices, this one has shape %v", t.Name, want)
		}
	default:
		return fmt.Errorf("tensor %s: dtype %s, want a float dtype (F32, F16, BF16, F64) or blr", t.Name, t.DType)
	}
	return nil
}

// Validate checks the model against its architecture: the config is valid
// (arch.Config.Validate), every tensor of ExpectedShapes is present with that (logical) shape
// and a float or (for 2-D weights) BLR dtype, and there are no other tensors (a stray
// tensor usually means a name-mapping mistake). All problems are reported, each naming the
// tensor (and its file, when file-backed) and the expected and actual shape (at most 20,
// then a count).
func (m *Model) Validate() error {
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("%s: %w", m.sourceName(), err)
	}
	want := ExpectedShapes(m.Config)
	var problems []string
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t, ok := m.Tensors[n]
		if !ok || t == nil {
			problems = append(problems, fmt.Sprintf("tensor %s is missing (want shape %v)", n, want[n]))
			continue
		}
		if err := checkShape(t, want[n]); err != nil {
			if t.file != "" {
				problems = append(problems, t.file+": "+err.Error())
			} else {
				problems = append(problems, err.Error())
			}
		}
	}
	for _, n := range m.Names() {
		if _, ok := want[n]; !ok {
			if n == "lm_head.weight" && m.Config.TieWordEmbeddings {
				problems = append(problems, "tensor lm_head.weight is present but tie_word_embeddings is true")
				continue
			}
			problems = append(problems, fmt.Sprintf("tensor %s is not part of the architecture", n))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	const maxShown = 20
	count, more := fmt.Sprintf("%d problems", len(problems)), ""
	if len(problems) == 1 {
		count = "1 problem"
	}
	if len(problems) > maxShown {
		more = fmt.Sprintf("\n  … and %d more", len(problems)-maxShown)
		problems = problems[:maxShown]
	}
	return fmt.Errorf("%s: invalid model (%s):\n  %s%s", m.sourceName(), count, strings.Join(problems, "\n  "), more)
}

// ParamCounts is the number of (logical) parameters per tensor kind and the stored bytes
// per dtype of a model, as printed by `nvg info`. A BLR tensor counts m·n parameters (the
// weight it stands for) and its payload bytes under BLR. A tied head counts 0 under Head.
type ParamCounts struct {
	Embedding     int64 // model.embed_tokens.weight
	Attention     int64 // self_attn.* except q_norm/k_norm
	GatedDeltaNet int64 // linear_attn.* except the gated norm
	MLP           int64 // mlp.*
	Norms         int64 // every RMSNorm gain: input/post-attention/final, q_norm, k_norm, linear_attn.norm
	Head          int64 // lm_head.weight (untied only)
	Other         int64 // tensors outside the architecture
	// Bytes is the stored size per dtype.
	Bytes map[DType]int64
}

// Total is the sum of all parameter counts.
func (p ParamCounts) Total() int64 {
	return p.Embedding + p.Attention + p.GatedDeltaNet + p.MLP + p.Norms + p.Head + p.Other
}

// TotalBytes is the sum of Bytes over dtypes.
func (p ParamCounts) TotalBytes() int64 {
	var n int64
	for _, b := range p.Bytes {
		n += b
	}
	return n
}

// ParamCounts counts the model's parameters by tensor kind and its stored bytes by dtype.
// It reads no tensor data.
func (m *Model) ParamCounts() ParamCounts {
	p := ParamCounts{Bytes: map[DType]int64{}}
	for name, t := range m.Tensors {
		n, _ := numElements(t.Shape)
		p.Bytes[t.DType] += t.NumBytes()
		switch {
		case name == "model.embed_tokens.weight":
			p.Embedding += n
		case name == "lm_head.weight":
			p.Head += n
		case name == "model.norm.weight" || strings.HasSuffix(name, "layernorm.weight") ||
			strings.HasSuffix(name, ".q_norm.weight") || strings.HasSuffix(name, ".k_norm.weight") ||
			strings.HasSuffix(name, ".linear_attn.norm.weight"):
			p.Norms += n
		case strings.Contains(name, ".self_attn."):
			p.Attention += n
		case strings.Contains(name, ".linear_attn."):
			p.GatedDeltaNet += n
		case strings.Contains(name, ".mlp."):
			p.MLP += n
		default:
			p.Other += n
		}
	}
	return p
}
