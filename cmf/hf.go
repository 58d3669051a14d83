package cmf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

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
