package ui

import (
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestLogTicksLabelLastDecade: on a falling perplexity curve whose last (lowest) point
// sits in a decade without a 1, 2 or 5 tick (95 here: the axis starts in the 70s), the
// perplexity axis still labels a tick of that decade; before the fix its labels began at
// 100, leaving the last point's decade unlabelled.
func TestLogTicksLabelLastDecade(t *testing.T) {
	for _, ppl := range [][]float64{
		{3000, 800, 240, 95},
		{5000, 900, 130, 78},
		{40, 22, 15.5, 12.2},
		{2345, 600, 160},
	} {
		f, err := PlotTraining(TrainingCurves{EvalSteps: []int{0, 4, 8, 12}[:len(ppl)], EvalPPL: ppl})
		if err != nil {
			t.Fatal(err)
		}
		ax := f.Panels[1].Y
		last := ppl[len(ppl)-1]
		want := math.Floor(math.Log10(last))
		var labels []string
		ok := false
		for _, tk := range ax.Tick.Marker.Ticks(ax.Min, ax.Max) {
			if tk.Label == "" {
				continue
			}
			labels = append(labels, tk.Label)
			if math.Floor(math.Log10(tk.Value)+1e-9) == want && tk.Value <= last {
				ok = true
			}
		}
		if !ok {
			t.Errorf("ppl %v (axis %.3g…%.3g): labels %v have none in the last point's decade 1e%g at or below %g", ppl, ax.Min, ax.Max, labels, want, last)
		}
		if !(ax.Min <= last) {
			t.Errorf("ppl %v: axis starts at %g above the last point", ppl, ax.Min)
		}
		if len(labels) > 9 {
			t.Errorf("ppl %v: %d labels on the perplexity axis %v: crowded", ppl, len(labels), labels)
		}
	}
}

// TestMovingAverageDrawn: the moving average a run's chart promises is drawn for a short run
// too (12 steps, as notebook 03's: before the fix the window was n/20 = 0 → none), and its
// values are the trailing means computed directly here.
func TestMovingAverageDrawn(t *testing.T) {
	steps := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	loss := []float64{5, 4.2, 4.6, 3.9, math.NaN(), 3.5, 3.6, 3.1, 3.3, 2.9, 3.0, 2.7}
	raw, avg, win := trainingLines(steps, loss)
	if win != 3 || len(raw) != 11 || len(avg) != 11 {
		t.Fatalf("window %d, %d raw and %d average points; want 3, 11, 11", win, len(raw), len(avg))
	}
	var fin []float64
	for _, v := range loss {
		if !math.IsNaN(v) {
			fin = append(fin, v)
		}
	}
	for i := range fin {
		lo := max(0, i-2)
		s := 0.0
		for _, v := range fin[lo : i+1] {
			s += v
		}
		want := s / float64(i+1-lo)
		if math.Abs(avg[i].Y-want) > 1e-12 || avg[i].X != raw[i].X {
			t.Errorf("average point %d = (%g, %g), want (%g, %g)", i, avg[i].X, avg[i].Y, raw[i].X, want)
		}
	}
	f, err := PlotTraining(TrainingCurves{Steps: steps, Loss: loss})
	if err != nil {
		t.Fatal(err)
	}
	svg, err := RenderSVG(f, 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "moving average (3 steps)") {
		t.Error("12-step run: no moving average in the legend")
	}
	for n, w := range map[int]int{3: 0, 4: 3, 12: 3, 100: 5, 400: 20} {
		if got := MovingAverageWindow(n); got != w {
			t.Errorf("MovingAverageWindow(%d) = %d, want %d", n, got, w)
		}
	}
}

// TestTeacherLine: the teacher's perplexity is a dashed line of the perplexity panel, named
// with its value, inside the axis range.
func TestTeacherLine(t *testing.T) {
	f, err := PlotTraining(TrainingCurves{Steps: []int{1, 2, 3, 4}, Loss: []float64{3, 2, 1.5, 1.2}, EvalSteps: []int{0, 4}, EvalPPL: []float64{400, 120}, TeacherPPL: 31.7})
	if err != nil {
		t.Fatal(err)
	}
	svg, err := RenderSVG(f, 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "teacher (31.7)") || !strings.Contains(string(svg), "stroke-dasharray") {
		t.Error("no dashed teacher line named with its perplexity")
	}
	if ax := f.Panels[1].Y; !(ax.Min <= 31.7 && 31.7 <= ax.Max) {
		t.Errorf("teacher 31.7 outside the axis %g…%g", ax.Min, ax.Max)
	}
}

// chartLayout draws c on a w×h-pixel canvas and returns, in canvas points, the left edge of
// its legend, the X position of its data's right end and the canvas width.
func chartLayout(t *testing.T, c *Chart, w, h int) (legendLeft, dataRight, width vg.Length) {
	t.Helper()
	cv := vgimg.NewWith(vgimg.UseWH(pixels(w), pixels(h)), vgimg.UseDPI(PlotDPI))
	dc := draw.New(cv)
	saved := c.X.Max
	c.X.Max = math.Max(saved, c.legendMaxX(dc))
	d := c.DataCanvas(dc)
	trX, _ := c.Transforms(&d)
	dataRight = trX(c.DataMaxX)
	legendLeft = dc.Max.X - c.Legend.Rectangle(dc).Size().X
	c.X.Max = saved
	return legendLeft, dataRight, dc.Max.X - dc.Min.X
}

// TestLegendWidth: a Chart's legend stands right of the data without covering it, and takes
// the width of its text rather than a fixed third of the chart (before the fix, 28 % of the
// X range was reserved for any legend of more than two entries, 45 % in the reconstruction
// chart): at most 20 % of a 900-pixel chart for ten tensor kinds, and the data keep the rest.
func TestLegendWidth(t *testing.T) {
	kinds := []string{"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj", "gate_proj", "up_proj", "down_proj"}
	norms := make([][]float64, len(kinds))
	var pts []session.TensorReport
	for k := range kinds {
		norms[k] = []float64{1, 2, 3, 4, 5, 6, 7, 8}
		pts = append(pts, session.TensorReport{Name: fmt.Sprint(k), Kind: kinds[k], BitsPerWeight: 1 + 0.01*float64(k), RelErr: 0.5})
	}
	g, err := PlotLayerGradNorms([]int{0, 1, 2, 3, 4, 5, 6, 7}, kinds, norms)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := PlotReconstruction(pts)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := PlotTopK([]string{"a", "b", "c"}, []float64{0.5, 0.3, 0.2}, []float64{0.4, 0.4, 0.1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := PlotLines("l", "x", "y", []float64{0, 1, 2, 8}, []string{"compressed", "trained"}, [][]float64{{0, 0.9, 1, 1.25}, {0, 0.88, 1, 1.2}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Chart{"grad norms": g, "reconstruction": rc, "top-k": tk, "lines": ln} {
		for _, w := range []int{600, 900, 1400} {
			left, right, width := chartLayout(t, c, w, 400)
			frac := float64((width - left) / width)
			if left-right < vg.Points(8) { // a point's glyph (radius 2.5 pt) and some air
				t.Errorf("%s at %d px: data end at %.1f pt, less than 8 pt left of the legend's left edge %.1f pt", name, w, right, left)
			}
			if lim := 0.2 + 0.1*float64(900-min(w, 900))/300; frac > lim {
				t.Errorf("%s at %d px: legend takes %.0f %% of the width, want ≤ %.0f %%", name, w, 100*frac, 100*lim)
			}
			if float64((left-right)/width) > 0.05 {
				t.Errorf("%s at %d px: %.0f %% of the width empty between data and legend", name, w, 100*float64((left-right)/width))
			}
		}
		if name != "lines" { // a few thin lines: too few dark pixels for checkPNG's blank test
			checkPNG(t, "legend-"+strings.ReplaceAll(name, " ", "-"), c, 900, 400)
		}
	}
	// The caller's wider range is kept.
	g.X.Max = 20
	if m := g.legendMaxX(draw.New(vgimg.New(600, 400))); math.Max(g.X.Max, m) != 20 {
		t.Errorf("X.Max 20 set by the caller becomes %g", math.Max(g.X.Max, m))
	}
	_ = plot.New
}

// TestLive: a Live view in a notebook collects the loss of each new step once (repeated polls
// of one step add nothing), the evaluations, and sends HTML with the progress line and, once
// there are points, the chart as a PNG (TestLiveText: the same outside a notebook). A step
// without an evaluation (EvalPPL 0) shows the last one with its step.
func TestLive(t *testing.T) {
	inNotebook(t, true)
	l := NewLive("train", 300, 200, 12.5)
	var sent []string
	l.show = func(_, h string) { sent = append(sent, h) }
	l.every = 0
	l.Update(session.Progress{Phase: "eval", Done: 1, Total: 1, Step: 0, EvalPPL: 400})
	for s := 1; s <= 5; s++ {
		for range 2 { // a polling client reports each step twice
			l.Update(session.Progress{Phase: "train", Done: s, Total: 5, Step: s, Loss: 3 / float64(s)})
		}
	}
	l.Update(session.Progress{Phase: "eval", Done: 1, Total: 1, Step: 5, EvalPPL: 90})
	l.Finish("5 steps")
	c := l.Curves()
	if fmt.Sprint(c.Steps) != "[1 2 3 4 5]" || c.Loss[2] != 1 || fmt.Sprint(c.EvalSteps, c.EvalPPL) != "[0 5] [400 90]" || c.TeacherPPL != 12.5 {
		t.Errorf("curves %+v", c)
	}
	if len(sent) != 13 {
		t.Errorf("%d HTML updates, want 13", len(sent))
	}
	mid := sent[5]
	if !strings.Contains(mid, `<progress value="3" max="5"`) || !strings.Contains(mid, "step 3 · loss 1.0000 · perplexity 400.000 at step 0") || !strings.Contains(mid, "data:image/png;base64,") {
		t.Errorf("update for step 3: %.300s", mid)
	}
	if last := sent[len(sent)-1]; !strings.Contains(last, "<b>train</b> 5 steps") || !strings.Contains(last, "data:image/png;base64,") {
		t.Errorf("final update: %.300s", last)
	}
}

// TestLiveFrom: a Live view started from a Lab's history shows the steps and evaluations made
// before, then the new ones: an evaluation of the same perplexity as the one before is a new
// point (issue 34: reports carried the last perplexity, and Live told evaluations apart by
// their values).
func TestLiveFrom(t *testing.T) {
	h := session.History{Steps: []session.StepStats{{Step: 1, Loss: 2}}, Evals: []session.EvalResult{{Step: 0, StudentPPL: 900}, {Step: 1, StudentPPL: 500}}, TeacherPPL: 17}
	inNotebook(t, true)
	l := NewLive("x", 100, 100, 0).From(h)
	l.show, l.every = func(string, string) {}, time.Hour
	l.Update(session.Progress{Phase: "step", Done: 1, Total: 3, Step: 2, Loss: 1.5})
	l.Update(session.Progress{Phase: "step", Done: 2, Total: 3, Step: 3, Loss: 1.2, EvalPPL: 500})
	l.Update(session.Progress{Phase: "step", Done: 2, Total: 3, Step: 3, Loss: 1.2, EvalPPL: 500}) // the same report again
	l.Update(session.Progress{Phase: "step", Done: 3, Total: 3, Step: 4, Loss: 1.1, EvalPPL: 300})
	c := l.Curves()
	if fmt.Sprint(c.Steps, c.Loss, c.EvalSteps, c.EvalPPL, c.TeacherPPL) != "[1 2 3 4] [2 1.5 1.2 1.1] [0 1 3 4] [900 500 500 300] 17" {
		t.Errorf("curves %v %v %v %v %v", c.Steps, c.Loss, c.EvalSteps, c.EvalPPL, c.TeacherPPL)
	}
}

func TestProgressHTML(t *testing.T) {
	if h := ProgressHTML("a<b", 3, 10, "x&y"); h != `<div style="font-family:monospace"><b>a&lt;b</b> <progress value="3" max="10" style="width:40%"></progress> 3/10 x&amp;y</div>` {
		t.Errorf("ProgressHTML = %s", h)
	}
}

// TestLightDeps: package ui links no GPU engine, no nvgkit and no cgo outside the standard
// library (net and os/user have cgo variants), so that a notebook cell importing it
// compiles and starts fast.
func TestLightDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}:{{len .CgoFiles}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Fields(string(out)) {
		path, cgo, _ := strings.Cut(line, ":")
		if cgo != "0" {
			t.Errorf("ui depends on %s, which has cgo files", path)
		}
		const module = "github.com/nvg-project/nvg/"
		heavy := path == module+"nvgkit" || strings.Contains(path, "webgpu")
		for _, p := range []string{"gpu", "host", "wgsl", "cmf"} {
			heavy = heavy || path == module+p || strings.HasPrefix(path, module+p+"/")
		}
		if heavy {
			t.Errorf("ui depends on %s", path)
		}
	}
}

// TestMovingAverageGaps: non-finite values are left out of the mean and stay gaps; a window
// of finite values only is the plain trailing mean.
func TestMovingAverageGaps(t *testing.T) {
	nan := math.NaN()
	got := MovingAverage([]float64{nan, 3, nan, 2, 4, 6}, 3)
	want := []float64{nan, 3, nan, 2.5, 3, 4} // windows {3}, {3,2}, {2,4}, {2,4,6}
	for i := range want {
		if math.IsNaN(want[i]) != math.IsNaN(got[i]) || (!math.IsNaN(want[i]) && got[i] != want[i]) {
			t.Fatalf("MovingAverage = %v, want %v", got, want)
		}
	}
}
