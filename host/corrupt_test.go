package host

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

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
		path := tinytest.Poisoned(t, tc.tensor, tc.elem, tc.bits)
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
