// Package tinytest holds test fixtures built from the embedded tiny teacher
// (cmf/tinyteacher) and from models like it that the tests of several packages share, so
// that each package does not carry its own copy.
package tinytest

import (
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// Poisoned writes a copy of the tiny teacher (config.json and model.safetensors) into a new
// temporary directory of t with element i of tensor name replaced by the little-endian
// bits (2 bytes for a BF16 or F16 tensor, 4 for F32), and returns the copy's
// model.safetensors path. The header is untouched, so the copy opens: only the values are
// bad. A tensor that is missing, an element outside it or bits of the wrong size fail t.
func Poisoned(t testing.TB, name string, i int, bits []byte) string {
	t.Helper()
	raw, err := fs.ReadFile(tinyteacher.FS(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := fs.ReadFile(tinyteacher.FS(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hlen], &h); err != nil {
		t.Fatal(err)
	}
	var e struct {
		DType       string  `json:"dtype"`
		DataOffsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(h[name], &e); err != nil || len(e.DataOffsets) != 2 {
		t.Fatalf("tensor %s of the tiny teacher: %v (entry %s)", name, err, h[name])
	}
	size := map[string]int{"BF16": 2, "F16": 2, "F32": 4}[e.DType]
	if size != len(bits) {
		t.Fatalf("%s is %s: %d-byte elements, got %d bytes", name, e.DType, size, len(bits))
	}
	off := int64(i * size)
	if i < 0 || off+int64(size) > e.DataOffsets[1]-e.DataOffsets[0] {
		t.Fatalf("%s has no element %d", name, i)
	}
	out := append([]byte(nil), raw...)
	copy(out[8+int64(hlen)+e.DataOffsets[0]+off:], bits)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// SubModel returns m restricted to its decoder layers layers, renumbered 0, 1, … in that
// order, with the tensors outside the layers (embedding, final norm, head); the tensors are
// m's (no data is copied), the layers' under their new names. The result passes
// Model.Validate; a tensor name with a bad layer number or an invalid result fails t.
func SubModel(t testing.TB, m *cmf.Model, layers []int) *cmf.Model {
	t.Helper()
	c := m.Config
	c.NumHiddenLayers = len(layers)
	c.LayerTypes = nil
	for _, l := range layers {
		c.LayerTypes = append(c.LayerTypes, m.Config.LayerTypes[l])
	}
	out := cmf.NewModel(c)
	for name, tn := range m.Tensors {
		if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
			dot := strings.IndexByte(rest, '.')
			l, err := strconv.Atoi(rest[:max(dot, 0)])
			if err != nil {
				t.Fatalf("tensor %s: %v", name, err)
			}
			i := slices.Index(layers, l)
			if i < 0 {
				continue
			}
			nt := *tn
			nt.Name = "model.layers." + strconv.Itoa(i) + rest[dot:]
			tn = &nt
		}
		if err := out.Set(tn); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	return out
}

// FirstLayers is SubModel of m's first n decoder layers.
func FirstLayers(t testing.TB, m *cmf.Model, n int) *cmf.Model {
	t.Helper()
	layers := make([]int, n)
	for i := range layers {
		layers[i] = i
	}
	return SubModel(t, m, layers)
}
