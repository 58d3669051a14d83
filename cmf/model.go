package cmf

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"io"
	"slices"
	"sort"
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
// defines (arch.Config.Shapes), t's logical shape must be the expected one, and a BLR
// tensor is only allowed for a 2-D weight matrix. Errors name the tensor and both shapes.
func (m *Model) Set(t *Tensor) error {
	if t == nil {
		return fmt.Errorf("%s: Set: nil tensor", m.sourceName())
	}
	if t.Name == "" {
		return fmt.Errorf("%s: Set: tensor has no name", m.sourceName())
	}
	if want, ok := m.Config.Shapes()[t.Name]; ok {
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

func checkShape(t *Tensor, want []int) error {
	if !slices.Equal(t.Shape, want) {
		return fmt.Errorf("tensor %s: shape %v, want %v", t.Name, t.Shape, want)
	}
	switch t.DType {
	case F32, F16, BF16, F64:
	case BLR, F8E4M3, I8:
		if len(want) != 2 {
			return fmt.Errorf("tensor %s: dtype %s is only for 2-D weight matrices, this one has shape %v", t.Name, t.DType, want)
		}
		if t.DType != BLR && t.Quant == nil {
			return fmt.Errorf("tensor %s: dtype %s without scales: not a quantized weight nvg reads", t.Name, t.DType)
		}
		if t.Quant != nil {
			return checkQuantAt(t, "tensor "+t.Name)
		}
	default:
		return fmt.Errorf("tensor %s: dtype %s, want a float dtype (F32, F16, BF16, F64), blr or a quantized weight (F8_E4M3, I8 with scales)", t.Name, t.DType)
	}
	return nil
}

// Validate checks the model against its architecture: the config is valid
// (arch.Config.Validate), every tensor of m.Config.Shapes() is present with that (logical) shape
// and a float or (for 2-D weights) BLR dtype, and there are no other tensors (a stray
// tensor usually means a name-mapping mistake). All problems are reported, each naming the
// tensor (and its file, when file-backed) and the expected and actual shape (at most 20,
// then a count).
func (m *Model) Validate() error {
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("%s: %w", m.sourceName(), err)
	}
	want := m.Config.Shapes()
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
	// Bytes is the stored size per dtype; a quantized tensor's scales count under its own
	// dtype (F8_E4M3, I8). Model.Quantization gives the quantized tensors' details.
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
// The kind of a tensor is where its architecture (arch.Config.Layout) puts it; a tensor the
// architecture does not name counts under Other. It reads no tensor data.
func (m *Model) ParamCounts() ParamCounts {
	p := ParamCounts{Bytes: map[DType]int64{}}
	kind := p.byName(m.Config.Layout())
	for name, t := range m.Tensors {
		n, _ := numElements(t.Shape)
		p.Bytes[t.DType] += t.QuantBytes()
		if c, ok := kind[name]; ok {
			*c += n
		} else {
			p.Other += n
		}
	}
	return p
}

// byName maps every tensor name of l to the count of p it adds to: the RMSNorm gains
// (arch.Norm) to Norms, the other tensors of a layer to its mixer's count or to MLP.
func (p *ParamCounts) byName(l arch.Layout) map[string]*int64 {
	kind := map[string]*int64{l.EmbedTokens.Name: &p.Embedding, l.Norm.Name: &p.Norms}
	if l.LMHead != nil {
		kind[l.LMHead.Name] = &p.Head
	}
	for _, L := range l.Layers {
		mixer := &p.GatedDeltaNet
		if L.SelfAttn != nil {
			mixer = &p.Attention
		}
		for _, t := range L.Tensors() {
			c := mixer
			if t.Role == arch.Norm {
				c = &p.Norms
			}
			kind[t.Name] = c
		}
		for _, t := range []arch.Tensor{L.MLP.GateProj, L.MLP.UpProj, L.MLP.DownProj} {
			kind[t.Name] = &p.MLP
		}
	}
	return kind
}
