package nvgkit_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// TestLoadNetNonFiniteWeights: copies of the tiny teacher whose header is intact but one
// weight is NaN or infinite open (values are read lazily) and then fail LoadNet, as a
// Teacher and as a Student, with one error naming the file, the tensor and the element,
// leaving no GPU buffer behind (host.Load's table is host.TestLoadNonFiniteWeights).
func TestLoadNetNonFiniteWeights(t *testing.T) {
	d := gputest.Open(t)
	cases := []struct {
		kind   nvgkit.NetKind
		tensor string
		elem   int
		bits   []byte // little-endian
		want   string
	}{
		{nvgkit.Teacher, "model.layers.1.mlp.down_proj.weight", 7, []byte{0xC0, 0x7F}, "element 7 = NaN is not finite in f16"},
		{nvgkit.Teacher, "model.layers.0.input_layernorm.weight", 5, []byte{0x80, 0x7F}, "element 5 = +Inf is not finite in f32"},
		{nvgkit.Teacher, "model.layers.0.linear_attn.A_log", 1, []byte{0, 0, 0xC0, 0x7F}, "element 1 = NaN is not finite in f32"},
		{nvgkit.Student, "model.embed_tokens.weight", 1000, []byte{0x80, 0xFF}, "element 1000 = -Inf is not finite in f16"},
	}
	before := liveMem(d)
	for _, tc := range cases {
		path := tinytest.Poisoned(t, tc.tensor, tc.elem, tc.bits)
		dir := filepath.Dir(path)
		m, err := cmf.Open(dir)
		if err != nil {
			t.Fatalf("%s: the header is intact, Open should succeed: %v", tc.tensor, err)
		}
		n, err := nvgkit.LoadNet(d, m, tc.kind)
		m.Close()
		if err == nil {
			n.Release()
			t.Errorf("%s: loaded", tc.tensor)
			continue
		}
		for _, w := range []string{path + ": tensor " + tc.tensor, tc.want} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.tensor, err, w)
			}
		}
		if after := liveMem(d); after.Buffers != before.Buffers || after.CurrentBytes != before.CurrentBytes {
			t.Errorf("%s: failed LoadNet left GPU buffers behind: %+v → %+v", tc.tensor, before, after)
		}
	}
}
