package arch_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// TestLayoutMatchesTinyTeacher checks the tensor table against a real checkpoint written by
// HF transformers: the same names, no more and no fewer, with the same shapes.
func TestLayoutMatchesTinyTeacher(t *testing.T) {
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := map[string][]int{}
	for _, name := range m.Names() {
		tt, err := m.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = tt.Shape
	}
	got := m.Config.Shapes()
	if len(got) != len(want) {
		t.Errorf("Shapes has %d tensors, the checkpoint %d", len(got), len(want))
	}
	for name, s := range want {
		if !reflect.DeepEqual(got[name], s) {
			t.Errorf("%s: arch shape %v, checkpoint %v", name, got[name], s)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: in the table, not in the checkpoint", name)
		}
	}
}

func TestLayerKindsAndRoles(t *testing.T) {
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config
	var blr, gains int
	for i := 0; i < c.NumHiddenLayers; i++ {
		L := c.Layer(i)
		if (L.SelfAttn != nil) != c.IsFullAttention(i) || (L.LinearAttn != nil) == c.IsFullAttention(i) {
			t.Fatalf("layer %d (%s): SelfAttn %v LinearAttn %v", i, L.Type, L.SelfAttn != nil, L.LinearAttn != nil)
		}
		for _, ts := range L.Tensors() {
			if !strings.HasPrefix(ts.Name, arch.LayerPrefix(i)) {
				t.Errorf("layer %d: tensor %s lacks the prefix %s", i, ts.Name, arch.LayerPrefix(i))
			}
			if ts.BLR && (ts.Role != arch.Projection || len(ts.Shape) != 2) {
				t.Errorf("%s: BLR but role %v shape %v", ts.Name, ts.Role, ts.Shape)
			}
			if ts.BLR {
				blr++
			}
			if ts.Trainable {
				gains++
			}
		}
	}
	// 8 layers: 6 GatedDeltaNet (in_proj_qkv, in_proj_z, out_proj + 3 MLP = 6 BLR, 3 gains)
	// and 2 full attention (q, k, v, o + 3 MLP = 7 BLR, 4 gains).
	nFull := 0
	for i := 0; i < c.NumHiddenLayers; i++ {
		if c.IsFullAttention(i) {
			nFull++
		}
	}
	nLin := c.NumHiddenLayers - nFull
	if wantBLR := 6*nLin + 7*nFull; blr != wantBLR {
		t.Errorf("%d BLR tensors, want %d", blr, wantBLR)
	}
	if wantGains := 3*nLin + 4*nFull; gains != wantGains {
		t.Errorf("%d trainable gains, want %d", gains, wantGains)
	}
	names := c.TrainableNames(2)
	if want := gains + 1 + 2*3*blr; len(names) != want {
		t.Errorf("TrainableNames(2): %d names, want %d", len(names), want)
	}
	if names[len(names)-1] != "model.norm.weight" {
		t.Errorf("last trainable %q, want model.norm.weight", names[len(names)-1])
	}
	if got := arch.MetricName("model.layers.0.mlp.up_proj.weight", 1, arch.ScaleL); got != "model.layers.0.mlp.up_proj.weight.p1.l" {
		t.Errorf("MetricName = %q", got)
	}
}
