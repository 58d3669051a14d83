package ui

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/session"
)

// PlotTraining marks the start of each phase after the first in both panels and labels it
// in the top one; phases out of order are an error naming the phase. HistoryCurves takes
// the phases from the history's steps.
func TestPlotTrainingPhases(t *testing.T) {
	var c TrainingCurves
	for i := 1; i <= 200; i++ {
		c.Steps, c.Loss = append(c.Steps, i), append(c.Loss, 2*math.Exp(-float64(i)/60)+0.3)
	}
	c.EvalSteps, c.EvalPPL = []int{0, 100, 200}, []float64{900, 40, 30}
	c.Phases = []session.Phase{{Kind: "kl", First: 1, Last: 150}, {Kind: "finish", First: 151, Last: 200}}
	f, err := PlotTraining(c)
	if err != nil {
		t.Fatal(err)
	}
	if xs, labels := phaseMarks(c.Phases); !reflect.DeepEqual(xs, []float64{150.5}) || !reflect.DeepEqual(labels, []string{"→ finish"}) {
		t.Errorf("phase marks at %v labelled %q, want the finish's at 150.5", xs, labels)
	}
	// The marks are drawn: the image differs from the same curves without phases.
	one := c
	one.Phases = nil
	g, err := PlotTraining(one)
	if err != nil {
		t.Fatal(err)
	}
	a, err := RenderPNG(f, 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RenderPNG(g, 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		t.Error("the phases left the training plot unchanged")
	}
	checkPNG(t, "training-phases", f, 800, 600)
	bad := c
	bad.Phases = []session.Phase{{Kind: "kl", First: 1, Last: 150}, {Kind: "finish", First: 150, Last: 200}}
	_, err = PlotTraining(bad)
	wantErr(t, "overlapping phases", err, "phase 1 (finish, steps 150…200)")
	h := session.History{Steps: []session.StepStats{{Step: 1, Loss: 1, Phase: "kl"}, {Step: 2, Loss: 1, Phase: "kl"}, {Step: 3, Loss: 1, Phase: "finish"}}}
	if got, want := HistoryCurves(h).Phases, []session.Phase{{Kind: "kl", First: 1, Last: 2}, {Kind: "finish", First: 3, Last: 3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("HistoryCurves phases %+v, want %+v", got, want)
	}
}

// LayerReconstruction averages a report's errors per decoder layer (tensors of no layer left
// out); the table and the chart show the series some layer has; bad values are errors
// naming the tensor.
func TestLayerReconstruction(t *testing.T) {
	reps := []session.TensorReport{
		{Name: "model.layers.1.mlp.up_proj.weight", Layer: 1, RelErr: 0.5, WeightedRelErr: 0.2, InitRelErr: 0.4, InitWeightedRelErr: 0.7},
		{Name: "model.layers.0.mlp.up_proj.weight", Layer: 0, RelErr: 0.8, WeightedRelErr: 0.3, InitRelErr: 0.6, InitWeightedRelErr: 0.9},
		{Name: "model.layers.1.mlp.down_proj.weight", Layer: 1, RelErr: 0.7, WeightedRelErr: 0.4, InitRelErr: 0.6, InitWeightedRelErr: 0.9},
		{Name: "lm_head.weight", Layer: -1, RelErr: 9},
	}
	got := LayerReconstruction(reps)
	want := []LayerErrors{{Layer: 0, Tensors: 1, RelErr: 0.8, WeightedRelErr: 0.3, InitRelErr: 0.6, InitWeightedRelErr: 0.9},
		{Layer: 1, Tensors: 2, RelErr: 0.6, WeightedRelErr: 0.30000000000000004, InitRelErr: 0.5, InitWeightedRelErr: 0.8}}
	if len(got) != 2 {
		t.Fatalf("LayerReconstruction = %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Layer != w.Layer || g.Tensors != w.Tensors || math.Abs(g.RelErr-w.RelErr) > 1e-15 || math.Abs(g.WeightedRelErr-w.WeightedRelErr) > 1e-15 ||
			math.Abs(g.InitRelErr-w.InitRelErr) > 1e-15 || math.Abs(g.InitWeightedRelErr-w.InitWeightedRelErr) > 1e-15 {
			t.Errorf("layer %d: %+v, want %+v", i, g, w)
		}
	}
	var b strings.Builder
	if err := WriteLayerReconstruction(&b, reps); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "plain, Dual-SVID start") || !strings.Contains(lines[0], "input-weighted") ||
		strings.Join(strings.Fields(lines[2]), " ") != "1 2 0.5000 0.6000 0.8000 0.3000" {
		t.Errorf("table:\n%s", b.String())
	}
	// A Dual-SVID report without calibration: the plain error alone.
	plain := []session.TensorReport{{Name: "a", Layer: 0, RelErr: 0.5}, {Name: "b", Layer: 2, RelErr: 0.25}}
	b.Reset()
	if err := WriteLayerReconstruction(&b, plain); err != nil {
		t.Fatal(err)
	}
	if s := b.String(); strings.Contains(s, "weighted") || strings.Contains(s, "start") || !strings.Contains(s, "0.2500") {
		t.Errorf("plain table:\n%s", s)
	}
	for _, r := range [][]session.TensorReport{reps, plain} {
		c, err := PlotLayerReconstruction(r)
		if err != nil {
			t.Fatal(err)
		}
		checkPNG(t, "layer-reconstruction", c, 700, 450)
	}
	bad := append([]session.TensorReport(nil), reps...)
	bad[2].InitWeightedRelErr = math.Inf(1)
	_, err := PlotLayerReconstruction(bad)
	wantErr(t, "Inf", err, "tensor model.layers.1.mlp.down_proj.weight: an error of +Inf")
	_, err = PlotLayerReconstruction(reps[3:])
	wantErr(t, "no layer", err, "no tensor of a decoder layer")
}
