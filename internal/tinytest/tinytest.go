// Package tinytest holds test fixtures built from the embedded tiny teacher
// (cmf/tinyteacher) that the tests of several packages share, so that each package does not
// carry its own copy of the safetensors patching.
package tinytest

import (
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

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
