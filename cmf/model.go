package cmf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// Model is a Qwen3.5 text model: its architecture and its tensors by HF text name
// (`model.embed_tokens.weight`, `model.layers.N.…`, `model.norm.weight`, `lm_head.weight`
// when untied). Tensors may be file-backed (read lazily) or in memory.
type Model struct {
	Config  Config
	Tensors map[string]*Tensor
	// Source is the path the model was opened from (directory or file), "" if built in memory.
	Source  string
	closers []io.Closer
}

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

// Close closes every file the model's tensors read from.
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

// Open opens a model: an HF checkpoint directory (config.json + model.safetensors).
// Tensor data are read lazily; call Close when done.
func Open(path string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a model directory", path)
	}
	cfgBytes, err := os.ReadFile(filepath.Join(path, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("%s: no config.json: %w", path, err)
	}
	cfg, err := ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf, err := OpenSafetensors(filepath.Join(path, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Tensors: map[string]*Tensor{}, Source: path, closers: []io.Closer{sf}}
	for _, t := range sf.Tensors {
		m.Tensors[t.Name] = t
	}
	return m, nil
}
