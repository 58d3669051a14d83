package ui

import (
	"math"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/session"
)

func TestHistoryCurves(t *testing.T) {
	h := session.History{
		Steps:      []session.StepStats{{Step: 1, Loss: 3}, {Step: 2, Loss: math.NaN()}, {Step: 3, Loss: 2}},
		Evals:      []session.EvalResult{{Step: 0, StudentPPL: 900}, {Step: 3, StudentPPL: 300}, {Step: 3, StudentPPL: math.Inf(1)}},
		TeacherPPL: 40,
	}
	c := HistoryCurves(h)
	if len(c.Steps) != 3 || c.Steps[2] != 3 || c.Loss[0] != 3 || !math.IsNaN(c.Loss[1]) ||
		len(c.EvalSteps) != 2 || c.EvalPPL[1] != 300 || c.TeacherPPL != 40 {
		t.Errorf("HistoryCurves = %+v", c)
	}
	f, err := PlotHistory(h)
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "history", f, 700, 500)
	if _, err := PlotHistory(session.History{}); err == nil {
		t.Error("PlotHistory of an empty history: no error")
	}
}

func TestPlotGradNorms(t *testing.T) {
	nan := math.NaN()
	g := session.GradNorms{Layers: []int{0, 1}, Kinds: []string{"input_layernorm", "q_proj", "up_proj"},
		Norms: [][]float64{{0.1, 0.2}, {nan, 0.5}, {0.3, 0.4}}}
	m, gains, err := PlotGradNorms("step 3", g)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || gains == nil || !strings.HasPrefix(m.Title.Text, "step 3: BLR") || !strings.HasSuffix(gains.Title.Text, "RMSNorm gains") {
		t.Fatalf("charts %v %v", m, gains)
	}
	checkPNG(t, "gradnorms-metric", m, 600, 300)
	g.Kinds, g.Norms = g.Kinds[1:], g.Norms[1:]
	if m, gains, err := PlotGradNorms("x", g); err != nil || m == nil || gains != nil {
		t.Errorf("no gain kinds: %v %v %v", m, gains, err)
	}
	_, _, err = PlotGradNorms("x", session.GradNorms{})
	wantErr(t, "empty", err, "0 layers")
}

func TestPlotGradCheck(t *testing.T) {
	r := session.GradCheckResult{Spec: session.GradCheckSpec{}.Resolved(), Rows: []session.GradCheckRow{
		{Name: "model.layers.0.linear_attn.in_proj_qkv.weight.p0.h", Index: 3, ErrGPUHost: 2e-6, ErrFDHost: 1e-8, ErrFDGPU: 3e-3},
		{Name: "model.layers.3.self_attn.q_norm.weight", Index: 1, ErrGPUHost: 0, ErrFDHost: math.NaN(), ErrFDGPU: 1e-2},
	}}
	c, err := PlotGradCheck(r)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := RenderSVG(c, 900, 500)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"L0 in_proj_qkv p0.h[3]", "L3 self_attn.q_norm[1]", "GPU vs host ≤ 1e-04", "1e-11"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("gradient check plot lacks %q", want)
		}
	}
	checkPNG(t, "gradcheck", c, 900, 500)
	_, err = PlotGradCheck(session.GradCheckResult{})
	wantErr(t, "empty", err, "no rows")
}

func TestPlotBarsLines(t *testing.T) {
	p, err := PlotBars("contribution", "layer", "nats", []string{"0", "1", "2"}, []float64{0.1, -0.02, math.NaN()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RenderPNG(p, 500, 300); err != nil {
		t.Fatal(err)
	}
	_, err = PlotBars("x", "", "", []string{"a"}, []float64{math.Inf(1)})
	wantErr(t, "inf", err, "values[0] (a) = +Inf")
	c, err := PlotLines("drift", "layer", "relative difference", []float64{0, 1, 2}, []string{"before", "after"}, [][]float64{{0, 0.2, 0.4}, {0, 0.1, math.NaN()}})
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "lines", c, 500, 300)
	_, err = PlotLines("x", "", "", []float64{0, 1}, []string{"a"}, [][]float64{{1}})
	wantErr(t, "length", err, "series 0 (a) has 1 values for 2 x")
}

// TestProbsOf checks the softmax against a direct float64 computation on small logits.
func TestProbsOf(t *testing.T) {
	logits := []float32{1, 2, 3, -1}
	p, err := ProbsOf(logits, []int{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	z := math.Exp(1) + math.Exp(2) + math.Exp(3) + math.Exp(-1)
	if math.Abs(p[0]-math.Exp(3)/z) > 1e-15 || math.Abs(p[1]-math.Exp(1)/z) > 1e-15 {
		t.Errorf("ProbsOf = %v", p)
	}
	_, err = ProbsOf(logits, []int{4})
	wantErr(t, "id", err, "id 4 outside the vocabulary of 4")
	_, err = ProbsOf([]float32{float32(math.NaN())}, []int{0})
	wantErr(t, "nan", err, "logits[0] = NaN")
}

func TestCompressionTable(t *testing.T) {
	reps := []session.TensorReport{
		{Name: "a", Kind: "up_proj", Shape: []int{4, 8}, Paths: 2, BitsPerWeight: 1, RelErr: 0.5},
		{Name: "b", Kind: "q_proj", Shape: []int{8, 8}, Paths: 1, BitsPerWeight: 0.5, RelErr: 0.6},
		{Name: "c", Kind: "up_proj", Shape: []int{4, 8}, Paths: 1, BitsPerWeight: 2, RelErr: 0.3},
	}
	tab := CompressionTable(reps)
	lines := strings.Split(strings.TrimSpace(tab), "\n")
	// q_proj first (attention before MLP); up_proj: 2 tensors, 1 two-path, (32+64)/64 = 1.5 bits,
	// mean error 0.4, max 0.5; overall (16·2·… ) = (32 + 32 + 64)/128 = 1.
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "q_proj") ||
		strings.Join(strings.Fields(lines[2]), " ") != "up_proj 2 1 1.5000 0.4000 0.5000" ||
		!strings.Contains(lines[3], "3 tensors at 1.0000 bits/weight") {
		t.Errorf("table:\n%s", tab)
	}
}

// PlotHistorySignFlips draws a Lab's flips per layer: one line per layer, the steps that
// carry flips only, raw for a short history and smoothed (the title says so) for a long
// one; a history without flips is an error naming TrainSigns.
func TestPlotSignFlips(t *testing.T) {
	h := session.History{Steps: []session.StepStats{{Step: 1}, {Step: 2, SignFlips: []int{4, 0, 9}}, {Step: 3, SignFlips: []int{6, 1, 0}}}}
	c, err := PlotHistorySignFlips(h)
	if err != nil {
		t.Fatal(err)
	}
	if c.Title.Text != "Signs flipped per layer per step" || c.Y.Max != 9 || c.X.Min != 2 || c.X.Max != 3 {
		t.Errorf("short history: title %q, x %g…%g, y max %g; want no smoothing, steps 2…3, y max 9", c.Title.Text, c.X.Min, c.X.Max, c.Y.Max)
	}
	svg, err := RenderSVG(c, 700, 400)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layer 0", "layer 1", "layer 2", "signs flipped"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("sign flip plot lacks %q", want)
		}
	}
	checkPNG(t, "signflips", c, 700, 400)
	// Steps alternating 0 and 30 flips: 59 steps are drawn as they are (peak 30); 80 steps are
	// smoothed over 80/20 = 4 steps (peak 15: the first two steps' mean, then every 4 steps').
	for _, c := range []struct {
		n     int
		title string
		peak  float64
	}{{59, "Signs flipped per layer per step", 30}, {80, "Signs flipped per layer per step (moving average of 4 steps)", 15}} {
		var long session.History
		for s := 1; s <= c.n; s++ {
			long.Steps = append(long.Steps, session.StepStats{Step: s, SignFlips: []int{30 * ((s + 1) % 2)}})
		}
		p, err := PlotHistorySignFlips(long)
		if err != nil {
			t.Fatal(err)
		}
		if p.Title.Text != c.title || p.Y.Max != c.peak {
			t.Errorf("%d steps: title %q, y max %g; want %q, %g", c.n, p.Title.Text, p.Y.Max, c.title, c.peak)
		}
	}
	_, err = PlotHistorySignFlips(session.History{Steps: []session.StepStats{{Step: 1}}})
	wantErr(t, "no flips", err, "TrainSigns")
	_, err = PlotSignFlips([]float64{1, 2}, [][]float64{{1}})
	wantErr(t, "ragged", err, "layer 0 has 1 values for 2 steps")
}
