package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
)

// TestLinearInputs checks that LinearInputs reports every projection of every layer once, in
// layer order, with the input that projection multiplies: applying each named weight to the
// reported x must give the output the layer computed with it (LayerActs of the same layer
// on the same input, the layer inputs taken from Forward's hidden states).
func TestLinearInputs(t *testing.T) {
	n := tinyNet(t)
	ids := [][]int{{5, 17, 300, 2, 9, 41, 7}, {1, 2, 3, 4, 5, 6, 7}}
	tr, err := n.Forward(ids, ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	layout := n.Config.Layout()
	var want []string
	for _, ten := range layout.Tensors() {
		if ten.Role == arch.Projection {
			want = append(want, ten.Name)
		}
	}
	var got []string
	err = n.LinearInputs(ids, func(names []string, x []float64, r, cols int) error {
		for _, name := range names {
			if err := checkLinearInput(t, n, tr, ids, name, x, r, cols); err != nil {
				return err
			}
		}
		got = append(got, names...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported projections\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// f's error stops the pass, wrapped with the weights' names; bad ids are Forward's errors.
	stop := errors.New("stop")
	err = n.LinearInputs(ids, func([]string, []float64, int, int) error { return stop })
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "model.layers.0.linear_attn.in_proj_qkv.weight, model.layers.0.linear_attn.in_proj_z.weight") {
		t.Errorf("callback error: %v", err)
	}
	if err := n.LinearInputs([][]int{{n.Config.VocabSize}}, nil); err == nil || !strings.Contains(err.Error(), "outside [0, 8192)") {
		t.Errorf("bad id: %v", err)
	}
}

// checkLinearInput checks that the weight name applied to x gives the output the layer
// computed with it.
func checkLinearInput(t *testing.T, n *Net, tr *Trace, ids [][]int, name string, x []float64, r, cols int) error {
	t.Helper()
	layout := n.Config.Layout()
	rows := len(ids) * len(ids[0])
	var l int
	var suffix string
	for i := range layout.Layers {
		if p := arch.LayerPrefix(i); strings.HasPrefix(name, p) {
			l, suffix = i, strings.TrimPrefix(name, p)
		}
	}
	a, err := n.LayerActs(l, tr.Hidden[l], len(ids), len(ids[0]))
	if err != nil {
		return err
	}
	L := n.Layers[l]
	var lin Linear
	var out []float64
	switch suffix {
	case "self_attn.q_proj.weight":
		lin, out = L.Attn.QProj, a.Attn.QG
	case "self_attn.k_proj.weight":
		lin, out = L.Attn.KProj, a.Attn.K
	case "self_attn.v_proj.weight":
		lin, out = L.Attn.VProj, a.Attn.V
	case "self_attn.o_proj.weight":
		lin, out = L.Attn.OProj, a.Mixer
	case "linear_attn.in_proj_qkv.weight":
		lin, out = L.Delta.InProjQKV, a.Delta.QKV
	case "linear_attn.in_proj_z.weight":
		lin, out = L.Delta.InProjZ, a.Delta.Z
	case "linear_attn.in_proj_b.weight":
		lin, out = L.Delta.InProjB, a.Delta.B
	case "linear_attn.in_proj_a.weight":
		lin, out = L.Delta.InProjA, a.Delta.A
	case "linear_attn.out_proj.weight":
		lin, out = L.Delta.OutProj, a.Mixer
	case "mlp.gate_proj.weight":
		lin, out = L.GateProj, a.Gate
	case "mlp.up_proj.weight":
		lin, out = L.UpProj, a.Up
	case "mlp.down_proj.weight":
		lin, out = L.DownProj, a.MLP
	default:
		t.Fatalf("unexpected projection %s", name)
	}
	if r != rows || cols != lin.In() || len(x) != r*cols {
		t.Fatalf("%s: x is %d values as %d×%d, want %d×%d", name, len(x), r, cols, rows, lin.In())
	}
	if d := maxAbsDiff(lin.Apply(x, r), out); d > 1e-12*maxAbs(out) {
		t.Errorf("%s: the weight applied to the reported input differs from the layer's output by %g", name, d)
	}
	return nil
}
