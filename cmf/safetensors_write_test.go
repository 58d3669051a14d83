package cmf

import (
	"path/filepath"
	"testing"
)

func TestWriteSafetensorsRoundTrip(t *testing.T) {
	a, err := NewFloatTensor("a", F32, []int{2, 3}, []float64{1, 2, 3, 4, 5, -6.5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewInt64Tensor("b", []int{3}, []int{7, -1, 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewFloatTensor("c", F64, []int{1}, []float64{0.125})
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(p, []*Tensor{a, b, c}, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["k"] != "v" {
		t.Fatalf("metadata %v", f.Metadata)
	}
	want := map[string][]float64{"a": {1, 2, 3, 4, 5, -6.5}, "b": {7, -1, 1 << 40}, "c": {0.125}}
	for name, w := range want {
		got, err := f.Tensor(name).Float64()
		if err != nil {
			t.Fatal(err)
		}
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], w[i])
			}
		}
	}
	blr, _ := NewTensor("w", BLR, []int{8, 8}, make([]byte, 20))
	if err := WriteSafetensors(p, []*Tensor{blr}, nil); err == nil {
		t.Fatal("BLR tensor in a plain safetensors file: want an error")
	}
	if err := WriteSafetensors(p, []*Tensor{a, a}, nil); err == nil {
		t.Fatal("duplicate names: want an error")
	}
}
