package ui

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/nvg-project/nvg/nvgkit/session"
	"gonum.org/v1/plot"
)

// plotOut is where the rendered test PNGs go when NVG_PLOT_DIR is set (to look at them);
// otherwise a temporary directory.
func plotOut(t *testing.T) string {
	if d := os.Getenv("NVG_PLOT_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// checkPNG renders d at w×h, saves it through SavePlot and checks that the file decodes
// to exactly w×h pixels and is not blank (some pixels dark, as text and axes are).
func checkPNG(t *testing.T, name string, d Drawable, w, h int) {
	t.Helper()
	path := filepath.Join(plotOut(t), name+".png")
	if err := SavePlot(path, d, w, h); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s: PNG is %d×%d, want %d×%d", name, b.Dx(), b.Dy(), w, h)
	}
	dark := 0
	for y := 0; y < h; y += 2 {
		for x := 0; x < w; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r+g+b < 3*0x4000 {
				dark++
			}
		}
	}
	if dark < 100 {
		t.Fatalf("%s: only %d dark sampled pixels: blank plot?", name, dark)
	}
}

func wantErr(t *testing.T, what string, err error, sub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Errorf("%s: err %v, want one containing %q", what, err, sub)
	}
}

func TestPlotTraining(t *testing.T) {
	var steps []int
	var kl []float64
	for i := 0; i < 200; i++ {
		steps = append(steps, i)
		kl = append(kl, 2*math.Exp(-float64(i)/60)+0.3+0.1*math.Sin(float64(i)*1.7))
	}
	kl[50] = math.NaN() // a skipped step
	evalSteps := []int{0, 50, 100, 150, 199}
	ppl := []float64{40, 22, 15.5, 13, 12.2}
	f, err := PlotTraining(TrainingCurves{Steps: steps, Loss: kl, EvalSteps: evalSteps, EvalPPL: ppl})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Panels) != 2 || f.Panels[0].X.Min != 0 || f.Panels[1].X.Max != 199 {
		t.Fatalf("panels %d, x range %g..%g", len(f.Panels), f.Panels[0].X.Min, f.Panels[1].X.Max)
	}
	checkPNG(t, "training", f, 800, 600)
	// Only evaluations so far, or only training: still renders.
	if f, err := PlotTraining(TrainingCurves{EvalSteps: []int{10}, EvalPPL: []float64{30}}); err != nil {
		t.Fatal(err)
	} else {
		checkPNG(t, "training-eval-only", f, 400, 300)
	}
	if f, err := PlotTraining(TrainingCurves{Steps: []int{1, 2}, Loss: []float64{1, 0.5}}); err != nil {
		t.Fatal(err)
	} else {
		checkPNG(t, "training-train-only", f, 400, 300)
	}
	_, err = PlotTraining(TrainingCurves{Steps: steps, Loss: kl[:3], EvalSteps: evalSteps, EvalPPL: ppl})
	wantErr(t, "short loss", err, "200 steps but 3 loss values")
	_, err = PlotTraining(TrainingCurves{Steps: steps, Loss: kl, EvalSteps: evalSteps, EvalPPL: ppl[:2]})
	wantErr(t, "short evalPPL", err, "5 evalSteps but 2 evalPPL")
	_, err = PlotTraining(TrainingCurves{})
	wantErr(t, "empty", err, "no training and no evaluation")
	_, err = PlotTraining(TrainingCurves{EvalSteps: []int{1}, EvalPPL: []float64{0.5}})
	wantErr(t, "ppl < 1", err, "evalPPL[0] = 0.5 is not a perplexity")
}

func TestPlotLayerGradNorms(t *testing.T) {
	layers := []int{0, 1, 2, 3, 4, 5, 6, 7}
	kinds := []string{"in_proj_qkv", "out_proj", "q_proj", "o_proj", "down_proj"}
	nan := math.NaN()
	norms := [][]float64{
		{0.9, 0.8, 0.7, nan, 0.6, 0.5, 0.45, nan},
		{0.4, 0.35, 0.3, nan, 0.3, 0.25, 0.2, nan},
		{nan, nan, nan, 1.2, nan, nan, nan, 0.8},
		{nan, nan, nan, 0.6, nan, nan, nan, 0.5},
		{0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9},
	}
	p, err := PlotLayerGradNorms(layers, kinds, norms)
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "gradnorms", p, 900, 400)
	_, err = PlotLayerGradNorms(layers, kinds, norms[:4])
	wantErr(t, "rows", err, "5 kinds but norms has 4 rows")
	bad := append([][]float64{norms[0][:7]}, norms[1:]...)
	_, err = PlotLayerGradNorms(layers, kinds, bad)
	wantErr(t, "row length", err, "norms[0] (in_proj_qkv) has 7 values but there are 8 layers")
	neg := [][]float64{{-1}}
	_, err = PlotLayerGradNorms([]int{0}, []string{"q_proj"}, neg)
	wantErr(t, "negative", err, "norms[0][0] (q_proj, layer 0) = -1 is not a norm")
	_, err = PlotLayerGradNorms(nil, kinds, norms)
	wantErr(t, "no layers", err, "0 layers")
}

func TestPlotHistogram(t *testing.T) {
	v := make([]float64, 1000)
	for i := range v {
		// A deterministic bell-ish shape: sum of three evenly spread sequences.
		v[i] = math.Mod(float64(i)*0.618, 1) + math.Mod(float64(i)*0.414, 1) + math.Mod(float64(i)*0.732, 1)
	}
	p, err := PlotHistogram("h of q_proj, layer 3", v, 30)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Title.Text, "n = 1000") {
		t.Errorf("title %q lacks the count", p.Title.Text)
	}
	checkPNG(t, "histogram", p, 640, 400)
	if p, err := PlotHistogram("constant", []float64{2, 2, 2}, 10); err != nil {
		t.Fatal(err)
	} else {
		checkPNG(t, "histogram-constant", p, 320, 240)
	}
	_, err = PlotHistogram("x", v, 0)
	wantErr(t, "bins", err, "bins = 0")
	_, err = PlotHistogram("x", nil, 10)
	wantErr(t, "empty", err, "no values")
	_, err = PlotHistogram("x", []float64{1, math.Inf(1)}, 10)
	wantErr(t, "inf", err, "values[1] = +Inf is not finite")
}

func TestPlotTopK(t *testing.T) {
	tokens := []string{" the", " a", "\n", "func", " err", "(", " :=", "return", "}", " nil"}
	tp := []float64{0.3, 0.2, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02}
	sp := []float64{0.25, 0.22, 0.1, 0.12, 0.05, 0.07, 0.06, 0.02, 0.04, 0.01}
	p, err := PlotTopK(tokens, tp, sp)
	if err != nil {
		t.Fatal(err)
	}
	var kl float64
	for i := range tp {
		kl += tp[i] * math.Log(tp[i]/sp[i])
	}
	if want := fmt.Sprintf("top-k KL %.3g nats", kl); !strings.Contains(p.Title.Text, want) {
		t.Errorf("title %q lacks %q", p.Title.Text, want)
	}
	checkPNG(t, "topk", p, 800, 450)
	_, err = PlotTopK(tokens, tp[:9], sp)
	wantErr(t, "lengths", err, "10 tokens but 9 teacher and 10 student")
	_, err = PlotTopK([]string{"a"}, []float64{1.5}, []float64{0.5})
	wantErr(t, "p > 1", err, "teacherP[0] = 1.5 is not a probability")
	_, err = PlotTopK([]string{"a"}, []float64{0.5}, []float64{math.NaN()})
	wantErr(t, "NaN", err, "studentP[0] = NaN is not a probability")
	_, err = PlotTopK(nil, nil, nil)
	wantErr(t, "empty", err, "no tokens")
}

func TestPlotReconstruction(t *testing.T) {
	var reps []session.TensorReport
	kinds := []string{"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj", "gate_proj", "up_proj", "down_proj"}
	for l := 0; l < 4; l++ {
		for i, k := range kinds {
			reps = append(reps, session.TensorReport{Name: "model.layers." + string(rune('0'+l)) + "." + k + ".weight", Kind: k,
				BitsPerWeight: 0.9 + 0.02*float64(i) + 0.01*float64(l), RelErr: 0.5 + 0.03*float64(i) - 0.02*float64(l)})
		}
	}
	p, err := PlotReconstruction(reps)
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "reconstruction", p, 800, 500)
	bad := append([]session.TensorReport(nil), reps...)
	bad[3].RelErr = math.NaN()
	_, err = PlotReconstruction(bad)
	wantErr(t, "NaN", err, "tensor "+reps[3].Name+": relative error NaN")
	bad[3].RelErr, bad[5].BitsPerWeight = 0.1, 0
	_, err = PlotReconstruction(bad)
	wantErr(t, "bpw 0", err, "tensor "+reps[5].Name+": bits per weight 0")
	_, err = PlotReconstruction(nil)
	wantErr(t, "empty", err, "no tensor reports")
}

// TestPlotRenderHelpers checks the SVG size, the save helper's format choice and errors,
// and that the notebook helpers are no-ops with ErrNotNotebook outside GoNB.
func TestPlotRenderHelpers(t *testing.T) {
	p, err := PlotHistogram("x", []float64{1, 2, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := RenderSVG(p, 600, 300)
	if err != nil {
		t.Fatal(err)
	}
	// 600×300 px at 96 DPI is 450×225 pt.
	if !regexp.MustCompile(`<svg[^>]*width="450pt"[^>]*height="225pt"`).Match(svg) {
		t.Fatalf("SVG header: %.200s", svg)
	}
	dir := t.TempDir()
	if err := SavePlot(filepath.Join(dir, "p.SVG"), p, 600, 300); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "extension", SavePlot(filepath.Join(dir, "p.jpg"), p, 600, 300), `extension ".jpg"`)
	_, err = RenderPNG(p, 8, 300)
	wantErr(t, "tiny", err, "plot size 8×300")
	_, err = RenderPNG(nil, 100, 100)
	wantErr(t, "nil", err, "nil plot")
	var nilPlot *plot.Plot
	_, err = RenderPNG(nilPlot, 100, 100)
	wantErr(t, "typed nil", err, "nil plot")
	_, err = RenderPNG(&Figure{}, 100, 100)
	wantErr(t, "empty figure", err, "no panels")
	wantErr(t, "save into missing dir", SavePlot(filepath.Join(dir, "no", "p.png"), p, 100, 100), "save plot")
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Errorf("files left in %s: %v", dir, des)
	}
	if !gonbui.IsNotebook {
		if err := DisplayPNG(p, 100, 100); !errors.Is(err, ErrNotNotebook) {
			t.Errorf("DisplayPNG outside a notebook: %v", err)
		}
		if err := DisplaySVG(p, 100, 100); !errors.Is(err, ErrNotNotebook) {
			t.Errorf("DisplaySVG outside a notebook: %v", err)
		}
	}
}

// TestPlotReadability checks the readability fixes: the adaptive moving-average window,
// the log perplexity axis with its headroom and teacher line, distinct tick labels, a
// distinct colour per tensor kind and the histogram's headroom.
func TestPlotReadability(t *testing.T) {
	svgText := func(d Drawable) string {
		t.Helper()
		b, err := RenderSVG(d, 800, 600)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// A short run: a moving average over 3 steps (MovingAverageWindow), never "(1 steps)".
	steps := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	kl := []float64{5, 4.5, 4, 3.6, 3.3, 3, 2.8, 2.6, 2.5, 2.4}
	f, err := PlotTraining(TrainingCurves{Steps: steps, Loss: kl, EvalSteps: []int{0, 5, 9}, EvalPPL: []float64{2345, 600, 160}, TeacherPPL: 95})
	if err != nil {
		t.Fatal(err)
	}
	s := svgText(f)
	if !strings.Contains(s, "moving average (3 steps)") || !strings.Contains(s, "train KL per step") || !strings.Contains(s, "teacher (95)") {
		t.Errorf("short-run legend: moving average %v, train KL %v, teacher %v",
			strings.Contains(s, "moving average (3 steps)"), strings.Contains(s, "train KL"), strings.Contains(s, "teacher (95)"))
	}
	top, bot := f.Panels[0], f.Panels[1]
	if _, ok := bot.Y.Scale.(plot.LogScale); !ok {
		t.Errorf("perplexity axis scale %T, want plot.LogScale", bot.Y.Scale)
	}
	if !(bot.Y.Min <= 95 && bot.Y.Max > 2345*1.5) {
		t.Errorf("perplexity axis %g..%g: no headroom over 2345 or teacher 95 outside", bot.Y.Min, bot.Y.Max)
	}
	if !(top.Y.Max > 5*1.05) {
		t.Errorf("loss axis top %g: no headroom over 5", top.Y.Max)
	}
	labels := map[string]bool{}
	for _, tk := range bot.Y.Tick.Marker.Ticks(bot.Y.Min, bot.Y.Max) {
		if tk.Label != "" {
			labels[tk.Label] = true
		}
	}
	for _, want := range []string{"100", "200", "500", "1000", "2000"} {
		if !labels[want] {
			t.Errorf("log ticks %v lack %q", labels, want)
		}
	}
	checkPNG(t, "training-short-teacher", f, 800, 600)
	// A long run: a moving average over n/20 steps.
	var ls []int
	var lk []float64
	for i := range 400 {
		ls, lk = append(ls, i), append(lk, 1/float64(i+1))
	}
	if f, err := PlotTraining(TrainingCurves{Steps: ls, Loss: lk}); err != nil {
		t.Fatal(err)
	} else if s := svgText(f); !strings.Contains(s, "moving average (20 steps)") {
		t.Error("long run: no moving average over 20 steps in the legend")
	}
	_, err = PlotTraining(TrainingCurves{Steps: steps, Loss: kl, TeacherPPL: 0.5})
	wantErr(t, "teacher < 1", err, "TeacherPPL = 0.5 is not a perplexity")

	// Tick labels: distinct after rounding, no needless decimals.
	for _, r := range [][2]float64{{1.05, 1.15}, {0.9, 1.2}, {0, 199}, {1.0831, 1.0879}, {-3, 3}} {
		seen := map[string]bool{}
		for _, tk := range (tidyTicks{}).Ticks(r[0], r[1]) {
			if tk.Label == "" {
				continue
			}
			if seen[tk.Label] {
				t.Errorf("range %v: tick label %q repeats", r, tk.Label)
			}
			seen[tk.Label] = true
		}
		needless := len(seen) > 0 // every label with a trailing 0 decimal: one decimal too many
		for l := range seen {
			needless = needless && strings.Contains(l, ".") && strings.HasSuffix(l, "0")
		}
		if needless {
			t.Errorf("range %v: needless decimals in %v", r, seen)
		}
		if len(seen) < 3 {
			t.Errorf("range %v: only %d labelled ticks", r, len(seen))
		}
	}

	// Every one of 15 kinds gets its own colour.
	cols := map[color.RGBA]bool{}
	for k := range 15 {
		cols[plotColor(k).(color.RGBA)] = true
	}
	if len(cols) != 15 {
		t.Errorf("15 kinds share %d colours", len(cols))
	}

	// Histogram: the tallest bar ends below the axis top.
	v := []float64{1, 1, 1, 1, 2, 3}
	p, err := PlotHistogram("x", v, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !(p.Y.Max > 4*1.05) {
		t.Errorf("histogram axis top %g for a tallest bar of 4", p.Y.Max)
	}
	// Reconstruction: headroom over the highest error.
	reps := []session.TensorReport{{Name: "a.q_proj.weight", Kind: "q_proj", BitsPerWeight: 1.08, RelErr: 0.7}, {Name: "b.q_proj.weight", Kind: "q_proj", BitsPerWeight: 1.12, RelErr: 0.5}}
	rc, err := PlotReconstruction(reps)
	if err != nil {
		t.Fatal(err)
	}
	if !(rc.Y.Max > 0.7) {
		t.Errorf("reconstruction axis top %g for an error of 0.7", rc.Y.Max)
	}
}

// A run whose loss goes past its only evaluation (a Lab stepped without EvalEvery: issue 34,
// the live chart's perplexity panel showed step 0 alone) is drawn as the loss panel alone,
// its title giving that evaluation; with no evaluation, the loss alone; a second evaluation
// brings the perplexity panel back.
func TestPlotTrainingStaleEvaluation(t *testing.T) {
	steps, loss := []int{1, 2, 3, 4, 5, 6, 7, 8}, []float64{3, 2.5, 2.2, 2, 1.9, 1.8, 1.75, 1.7}
	for _, c := range []struct {
		evalSteps []int
		ppl       []float64
		panels    int
		title     string
	}{
		{[]int{0}, []float64{2345}, 1, "Training loss (held-out perplexity 2345 at step 0, not evaluated since)"},
		{nil, nil, 1, "Training loss"},
		{[]int{8}, []float64{160}, 2, "Training loss"}, // evaluated after the last step: current
		{[]int{0, 8}, []float64{2345, 160}, 2, "Training loss"},
	} {
		f, err := PlotTraining(TrainingCurves{Steps: steps, Loss: loss, EvalSteps: c.evalSteps, EvalPPL: c.ppl, TeacherPPL: 17})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Panels) != c.panels || f.Panels[0].Title.Text != c.title || f.Panels[0].X.Min > 1 || f.Panels[0].X.Max != 8 {
			t.Errorf("evaluations at %v: %d panels, %q, x %g…%g; want %d, %q", c.evalSteps, len(f.Panels), f.Panels[0].Title.Text,
				f.Panels[0].X.Min, f.Panels[0].X.Max, c.panels, c.title)
		}
		checkPNG(t, fmt.Sprintf("training-evals-%d", len(c.ppl)), f, 400, 300)
	}
}
