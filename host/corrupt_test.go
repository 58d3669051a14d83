package host

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

// poisonedTeacher writes a copy of the tiny teacher (config + safetensors) into a new
// directory with element i of tensor name replaced by the little-endian bits `bits` (2 bytes
// for BF16/F16, 4 for F32) and returns the copy's safetensors path. The header is untouched,
// so the file opens: only the values are bad.
func poisonedTeacher(t *testing.T, name string, i int, bits []byte) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(tinyDir, "model.safetensors"))
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
	if err := json.Unmarshal(h[name], &e); err != nil {
		t.Fatal(err)
	}
	size := map[string]int{"BF16": 2, "F16": 2, "F32": 4}[e.DType]
	if size != len(bits) {
		t.Fatalf("%s is %s: %d-byte elements, got %d bytes", name, e.DType, size, len(bits))
	}
	off := 8 + int64(hlen) + e.DataOffsets[0] + int64(i*size)
	out := append([]byte(nil), raw...)
	copy(out[off:], bits)
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// NaN and ±Inf bit patterns, little-endian.
var (
	bf16NaN    = []byte{0xC0, 0x7F}
	bf16PosInf = []byte{0x80, 0x7F}
	bf16NegInf = []byte{0x80, 0xFF}
	f32NaN     = []byte{0x00, 0x00, 0xC0, 0x7F}
)

// TestLoadNonFiniteWeights: copies of the tiny teacher whose header is intact but one
// weight is NaN or infinite open (values are read lazily) and then fail host.Load with one
// error naming the file, the tensor and the element — for projections (which had no check:
// a NaN weight loaded silently and poisoned every output), norm gains, the embedding and
// the f32 A_log. The GPU path (nvgkit.LoadNet) has the same table in nvgkit.
func TestLoadNonFiniteWeights(t *testing.T) {
	cases := []struct {
		tensor string
		elem   int
		bits   []byte
		want   string
	}{
		{"model.layers.3.mlp.down_proj.weight", 7, bf16NaN, "element 7 is NaN"},
		{"model.layers.0.input_layernorm.weight", 5, bf16PosInf, "element 5 is +Inf"},
		{"model.embed_tokens.weight", 1000, bf16NegInf, "element 1000 is -Inf"},
		{"model.layers.0.linear_attn.A_log", 1, f32NaN, "element 1 is NaN"},
	}
	for _, tc := range cases {
		path := poisonedTeacher(t, tc.tensor, tc.elem, tc.bits)
		m, err := cmf.Open(filepath.Dir(path))
		if err != nil {
			t.Fatalf("%s: the header is intact, Open should succeed: %v", tc.tensor, err)
		}
		_, err = Load(m)
		m.Close()
		if err == nil {
			t.Errorf("%s: loaded", tc.tensor)
			continue
		}
		for _, w := range []string{path + ": tensor " + tc.tensor + ": ", tc.want, "not finite"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.tensor, err, w)
			}
		}
	}
}
