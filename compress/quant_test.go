package compress

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

// TestCompressQuantizedTeacher compresses an 8-bit teacher (the small model's projections in
// q8, whose code × scale is exact in float32): the student equals the one compressed from
// the teacher's dense view (same payloads bit for bit), and the tensors it shares are dense
// F32 views — in_proj_a's values are the dequantized weights, not 8-bit codes.
func TestCompressQuantizedTeacher(t *testing.T) {
	teacher := smallCompressModel(t, rand.New(rand.NewPCG(61, 62)))
	q8, err := cmf.QuantizeModel(teacher, cmf.QuantQ8)
	if err != nil {
		t.Fatal(err)
	}
	const a = "model.layers.1.linear_attn.in_proj_a.weight"
	if q8.Tensors[a].Quant == nil {
		t.Fatalf("%s is not quantized in the q8 teacher", a)
	}
	sq, rq, err := Model(q8, Options{Seed: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sd, _, err := Model(q8.Dequantized(), Options{Seed: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rq {
		pq, _ := sq.Tensors[r.Name].Bytes()
		pd, _ := sd.Tensors[r.Name].Bytes()
		if !bytes.Equal(pq, pd) || len(pq) == 0 {
			t.Errorf("%s: the 8-bit teacher's student differs from its dense view's", r.Name)
		}
	}
	for name, tn := range sq.Tensors {
		if tn.Quant != nil {
			t.Errorf("student tensor %s is %s (8-bit)", name, tn.DType)
		}
	}
	got, err := sq.Tensors[a].Float64()
	if err != nil {
		t.Fatal(err)
	}
	want, err := q8.Tensors[a].Float64()
	if err != nil {
		t.Fatal(err)
	}
	if sq.Tensors[a].DType != cmf.F32 || len(got) != len(want) {
		t.Fatalf("student %s: %s with %d values, want F32 with %d", a, sq.Tensors[a].DType, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("student %s[%d] = %g, the dequantized teacher's %g", a, i, got[i], want[i])
		}
	}
}
