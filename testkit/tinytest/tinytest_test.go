package tinytest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// TestPoisoned: the copy differs from the tiny teacher's file on disk in exactly the bytes of
// the element asked for, at the offset the header gives (read here independently), and its
// config.json is the teacher's.
func TestPoisoned(t *testing.T) {
	const dir = "../../cmf/tinyteacher/model"
	orig, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(orig)
	var h map[string]struct {
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(orig[8:8+hlen], &h); err != nil {
		t.Fatal(err)
	}
	const name = "model.layers.0.linear_attn.A_log" // F32
	p := Poisoned(t, name, 1, []byte{1, 2, 3, 4})
	got, err := os.ReadFile(p)
	if err != nil || len(got) != len(orig) {
		t.Fatalf("copy: %d bytes (%v), want %d", len(got), err, len(orig))
	}
	at := int(8 + int64(hlen) + h[name].DataOffsets[0] + 4)
	for i := range got {
		if want := orig[i]; i >= at && i < at+4 {
			want = byte(i - at + 1)
			if got[i] != want {
				t.Fatalf("byte %d = %d, want %d", i, got[i], want)
			}
		} else if got[i] != want {
			t.Fatalf("byte %d changed (the element is at %d)", i, at)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if c, err := os.ReadFile(filepath.Join(filepath.Dir(p), "config.json")); err != nil || !bytes.Equal(c, cfg) {
		t.Fatalf("config.json of the copy differs (%v)", err)
	}
}

// TestSubModel: layers 3 and 0 of the tiny teacher become layers 0 and 1 with their types,
// holding the very tensors of the original layers; the rest is the teacher's.
func TestSubModel(t *testing.T) {
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	s := SubModel(t, m, []int{3, 0})
	if s.Config.NumHiddenLayers != 2 || !slices.Equal(s.Config.LayerTypes, []string{m.Config.LayerTypes[3], m.Config.LayerTypes[0]}) {
		t.Fatalf("config: %d layers %v", s.Config.NumHiddenLayers, s.Config.LayerTypes)
	}
	perLayer := map[int]int{}
	outside := 0
	for name := range m.Tensors {
		var l int
		if _, err := fmt.Sscanf(name, "model.layers.%d.", &l); err == nil {
			perLayer[l]++
		} else {
			outside++
		}
	}
	if len(s.Tensors) != outside+perLayer[3]+perLayer[0] {
		t.Fatalf("%d tensors, want %d outside the layers + %d + %d", len(s.Tensors), outside, perLayer[3], perLayer[0])
	}
	for _, c := range []struct{ from, to string }{
		{"model.layers.3.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"},
		{"model.layers.0.linear_attn.A_log", "model.layers.1.linear_attn.A_log"},
		{"model.embed_tokens.weight", "model.embed_tokens.weight"},
	} {
		a, b := m.Tensors[c.from], s.Tensors[c.to]
		if a == nil || b == nil {
			t.Fatalf("%s → %s: missing", c.from, c.to)
		}
		ab, err1 := a.Bytes()
		bb, err2 := b.Bytes()
		if err1 != nil || err2 != nil || b.Name != c.to || !slices.Equal(a.Shape, b.Shape) || !bytes.Equal(ab, bb) {
			t.Errorf("%s → %s: not the same tensor", c.from, c.to)
		}
	}
	if f := FirstLayers(t, m, 2); f.Config.NumHiddenLayers != 2 || f.Tensors["model.layers.1.linear_attn.A_log"] == nil || f.Tensors["model.layers.2.linear_attn.A_log"] != nil {
		t.Errorf("FirstLayers(2): %d layers", f.Config.NumHiddenLayers)
	}
}

// TestRelL2: ‖(3, 4) − (0, 5)‖ / ‖(0, 5)‖ = √10 / 5 for float32 and float64 values;
// CheckRelL2 passes within tol.
func TestRelL2(t *testing.T) {
	want := math.Sqrt(10) / 5
	if got := RelL2([]float32{3, 4}, []float64{0, 5}); math.Abs(got-want) > 1e-15 {
		t.Errorf("float32: %g, want %g", got, want)
	}
	if got := CheckRelL2(t, "float64", []float64{3, 4}, []float64{0, 5}, 0.7); math.Abs(got-want) > 1e-15 {
		t.Errorf("float64: %g, want %g", got, want)
	}
}
