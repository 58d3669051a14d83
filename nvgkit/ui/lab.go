package ui

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/nvgkit/session"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// HistoryCurves returns the curves PlotTraining draws from a Lab's history: the loss of
// every step, the student's held-out perplexity of every evaluation (Setup's of the
// untrained student at step 0 first), the teacher's perplexity and the phases the steps ran
// in (History.PhaseSpans).
func HistoryCurves(h session.History) TrainingCurves {
	var c TrainingCurves
	for _, s := range h.Steps {
		c.Steps, c.Loss = append(c.Steps, s.Step), append(c.Loss, s.Loss)
	}
	for _, e := range h.Evals {
		if finite(e.StudentPPL) && e.StudentPPL >= 1 {
			c.EvalSteps, c.EvalPPL = append(c.EvalSteps, e.Step), append(c.EvalPPL, e.StudentPPL)
		}
	}
	if finite(h.TeacherPPL) && h.TeacherPPL >= 1 {
		c.TeacherPPL = h.TeacherPPL
	}
	c.Phases = h.PhaseSpans()
	return c
}

// PlotHistory is PlotTraining of HistoryCurves(h): a Lab's training loss with its moving
// average, the held-out perplexities and the teacher's as a dashed line. Errors:
// PlotTraining's (a history with no step and no evaluation).
func PlotHistory(h session.History) (*Figure, error) { return PlotTraining(HistoryCurves(h)) }

// PlotSignFlips draws the signs flipped per decoder layer per step of a sign-training run,
// one line per layer ("layer l"): flips[l][i] at step steps[i], as session.History's and
// train's SignFlipSeries return them. From 60 steps on the lines are smoothed by a trailing
// moving average of MovingAverageWindow(len(steps)) = len(steps)/20 steps (the title says
// so); a shorter run's counts are drawn as they are. nvg distill --train-signs saves it as
// sign_flips.png. Errors: no steps or no layers, a layer whose length is not len(steps).
func PlotSignFlips(steps []float64, flips [][]float64) (*Chart, error) {
	if len(steps) == 0 || len(flips) == 0 {
		return nil, fmt.Errorf("PlotSignFlips: %d steps and %d layers, want ≥ 1 of each (no step carries sign flips: the run does not train signs?)", len(steps), len(flips))
	}
	win := 0
	if len(steps) >= 60 {
		win = MovingAverageWindow(len(steps))
	}
	title := "Signs flipped per layer per step"
	if win > 1 {
		title += fmt.Sprintf(" (moving average of %d steps)", win)
	}
	names := make([]string, len(flips))
	ys := make([][]float64, len(flips))
	for l, f := range flips {
		if len(f) != len(steps) {
			return nil, fmt.Errorf("PlotSignFlips: layer %d has %d values for %d steps", l, len(f), len(steps))
		}
		names[l], ys[l] = fmt.Sprintf("layer %d", l), MovingAverage(f, win)
	}
	return PlotLines(title, "step", "signs flipped", steps, names, ys)
}

// PlotHistorySignFlips is PlotSignFlips of a Lab's history (History.SignFlipSeries: the
// steps of a Setup with Train.TrainSigns). Errors: no step carries sign flips.
func PlotHistorySignFlips(h session.History) (*Chart, error) {
	steps, flips := h.SignFlipSeries()
	if len(steps) == 0 {
		return nil, fmt.Errorf("PlotHistorySignFlips: none of the history's %d steps carries sign flips (Setup.Train.TrainSigns is off?)", len(h.Steps))
	}
	return PlotSignFlips(steps, flips)
}

// isGainKind reports whether a GradNorms kind is an RMSNorm gain (input_layernorm, q_norm,
// norm, …) rather than a BLR projection's metric.
func isGainKind(kind string) bool { return strings.HasSuffix(kind, "norm") }

// PlotGradNorms draws a per-layer gradient-norm table (Lab.GradNorms) as two grouped-bar
// charts (PlotLayerGradNorms): the BLR projections' metric (h, ℓ, g of all paths, one bar
// per projection) and the RMSNorm gains, each titled with title, so that each kind keeps
// its own colour and legend entry. A chart with no kind is nil. Errors: a table with no
// layers or kinds, or PlotLayerGradNorms's.
func PlotGradNorms(title string, g session.GradNorms) (metric, gains *Chart, err error) {
	if len(g.Layers) == 0 || len(g.Kinds) == 0 {
		return nil, nil, fmt.Errorf("PlotGradNorms: %d layers and %d kinds, want at least one of each", len(g.Layers), len(g.Kinds))
	}
	if len(g.Norms) != len(g.Kinds) {
		return nil, nil, fmt.Errorf("PlotGradNorms: %d kinds but %d rows of norms", len(g.Kinds), len(g.Norms))
	}
	for _, gain := range []bool{false, true} {
		var ks []string
		var ns [][]float64
		for k, kind := range g.Kinds {
			if isGainKind(kind) == gain {
				ks, ns = append(ks, kind), append(ns, g.Norms[k])
			}
		}
		if len(ks) == 0 {
			continue
		}
		c, err := PlotLayerGradNorms(g.Layers, ks, ns)
		if err != nil {
			return nil, nil, err
		}
		if gain {
			c.Title.Text = title + ": RMSNorm gains"
			gains = c
		} else {
			c.Title.Text = title + ": BLR metric (h, ℓ, g) per projection"
			metric = c
		}
	}
	return metric, gains, nil
}

// PlotGradCheck draws a GradCheck table: per checked coordinate (its Label on the X axis)
// the three relative errors — GPU vs host analytic ("GPU vs host"), host FD vs host analytic
// ("host FD"), GPU FD vs the f32 path's GPU analytic ("GPU FD") — as points on a log axis
// (an error of 0 drawn at 1e-11), with each tolerance as a dashed line of its series' colour
// (GPU vs host's is that of the result's path, GradCheckResult.TolGPUHost). Errors: no rows.
func PlotGradCheck(r session.GradCheckResult) (*Chart, error) {
	if len(r.Rows) == 0 {
		return nil, errors.New("PlotGradCheck: no rows")
	}
	s := r.Spec.Resolved()
	p := newPlot("Gradient check: relative errors per coordinate", "", "relative error")
	p.Y.Scale = plot.LogScale{}
	const floor = 1e-11
	p.Y.Min, p.Y.Max = floor, 1
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ticks []plot.Tick
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			ticks = append(ticks, plot.Tick{Value: math.Pow(10, e), Label: fmt.Sprintf("1e%d", int(e))})
		}
		return ticks
	})
	series := []struct {
		label string
		tol   float64
		err   func(session.GradCheckRow) float64
	}{
		{"GPU vs host", r.TolGPUHost(), func(r session.GradCheckRow) float64 { return r.ErrGPUHost }},
		{"host FD", s.TolFDHost, func(r session.GradCheckRow) float64 { return r.ErrFDHost }},
		{"GPU FD", s.TolFDGPU, func(r session.GradCheckRow) float64 { return r.ErrFDGPU }},
	}
	n := float64(len(r.Rows))
	for k, ser := range series {
		pts := make(plotter.XYs, len(r.Rows))
		for i, row := range r.Rows {
			e := ser.err(row)
			if !(e > floor) || math.IsInf(e, 0) {
				e = math.Min(math.Max(e, floor), 1) // 0 at the floor, NaN/Inf at the top
				if math.IsNaN(e) {
					e = 1
				}
			}
			pts[i] = plotter.XY{X: float64(i) + 0.15*float64(k-1), Y: e}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("PlotGradCheck: %w", err)
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = plotColor(k), draw.CircleGlyph{}, vg.Points(3.5)
		tol, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ser.tol}, {X: n - 0.5, Y: ser.tol}})
		if err != nil {
			return nil, fmt.Errorf("PlotGradCheck: %w", err)
		}
		tol.Color, tol.Dashes = plotColor(k), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(sc, tol)
		p.Legend.Add(fmt.Sprintf("%s ≤ %.0e", ser.label, ser.tol), sc, tol)
	}
	p.Legend.Top = true
	labels := make([]string, len(r.Rows))
	for i, row := range r.Rows {
		labels[i] = row.Label()
	}
	nominalX(p, labels)
	if len(labels) > 1 {
		p.X.Tick.Label.Rotation = math.Pi / 5
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.X.Min, p.X.Max = -0.5, n-0.5
	return &Chart{Plot: p, DataMaxX: n - 0.5}, nil
}

// PlotBars draws one bar per label (values[i] over labels[i], a NaN draws none) with a
// title and axis labels, for per-layer quantities. Errors: no labels, len(values) ≠
// len(labels), an infinite value.
func PlotBars(title, xLabel, yLabel string, labels []string, values []float64) (*plot.Plot, error) {
	if len(labels) == 0 || len(values) != len(labels) {
		return nil, fmt.Errorf("PlotBars: %d labels and %d values, want as many of each (≥ 1)", len(labels), len(values))
	}
	for i, v := range values {
		if math.IsInf(v, 0) {
			return nil, fmt.Errorf("PlotBars: values[%d] (%s) = %g is not finite", i, labels[i], v)
		}
	}
	p := newPlot(title, xLabel, yLabel)
	p.Add(&groupedBars{values: [][]float64{values}, colors: []color.Color{plotColor(0)}, width: 0.7})
	nominalX(p, labels)
	p.X.Min, p.X.Max = -0.5, float64(len(labels))-0.5
	p.Y.Tick.Marker = tidyTicks{}
	return p, nil
}

// PlotLines draws series ys[s] (named names[s], one colour each, in a legend right of the
// data) against x, with a title and axis labels; NaN values break a line. Errors: no x or no
// series, len(names) ≠ len(ys), a series whose length is not len(x).
func PlotLines(title, xLabel, yLabel string, x []float64, names []string, ys [][]float64) (*Chart, error) {
	if len(x) == 0 || len(ys) == 0 || len(names) != len(ys) {
		return nil, fmt.Errorf("PlotLines: %d x values, %d names and %d series, want ≥ 1 x, as many names as series (≥ 1)", len(x), len(names), len(ys))
	}
	p := newPlot(title, xLabel, yLabel)
	lo, hi := math.Inf(1), math.Inf(-1)
	for s, y := range ys {
		if len(y) != len(x) {
			return nil, fmt.Errorf("PlotLines: series %d (%s) has %d values for %d x", s, names[s], len(y), len(x))
		}
		var pts plotter.XYs
		for i, v := range y {
			if finite(v) && finite(x[i]) {
				pts = append(pts, plotter.XY{X: x[i], Y: v})
				lo, hi = math.Min(lo, x[i]), math.Max(hi, x[i])
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("PlotLines: %w", err)
		}
		l.Color, l.Width = plotColor(s), vg.Points(1.5)
		sc.Color, sc.Shape, sc.Radius = plotColor(s), draw.CircleGlyph{}, vg.Points(2.5)
		p.Add(l, sc)
		p.Legend.Add(names[s], l, sc)
	}
	if !finite(lo) {
		return nil, errors.New("PlotLines: no finite point")
	}
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	p.Legend.Top = true
	p.X.Min, p.X.Max = lo, hi
	p.X.Tick.Marker, p.Y.Tick.Marker = tidyTicks{}, tidyTicks{}
	return &Chart{Plot: p, DataMaxX: hi}, nil
}

// ProbsOf returns the probabilities that the softmax of logits (a full next-token
// distribution, e.g. Lab.Logits) gives the tokens ids, computed in float64 with the
// maximum subtracted. Errors: no logits, a non-finite logit, an id outside the vocabulary.
func ProbsOf(logits []float32, ids []int) ([]float64, error) {
	if len(logits) == 0 {
		return nil, errors.New("ProbsOf: no logits")
	}
	m := math.Inf(-1)
	for i, v := range logits {
		if !finite(float64(v)) {
			return nil, fmt.Errorf("ProbsOf: logits[%d] = %g is not finite", i, v)
		}
		m = math.Max(m, float64(v))
	}
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(ids))
	for j, id := range ids {
		if id < 0 || id >= len(logits) {
			return nil, fmt.Errorf("ProbsOf: id %d outside the vocabulary of %d", id, len(logits))
		}
		out[j] = math.Exp(float64(logits[id])-m) / z
	}
	return out, nil
}

// CompressionTable formats a compression report (Info.Compression) per kind of linear, in
// the order attention, GatedDeltaNet, MLP: the number of tensors, how many have two paths,
// the kind's bits per weight (Σ bits / Σ weights) and its mean and largest relative
// reconstruction error; then the overall bits per weight.
func CompressionTable(reports []session.TensorReport) string {
	type agg struct {
		n, two        int
		bits, weights float64
		sumErr, maxE  float64
	}
	by := map[string]*agg{}
	var bits, weights float64
	for _, r := range reports {
		k := r.Kind
		if k == "" {
			k = "other"
		}
		a := by[k]
		if a == nil {
			a = &agg{}
			by[k] = a
		}
		w := 1.0
		if len(r.Shape) == 2 {
			w = float64(r.Shape[0]) * float64(r.Shape[1])
		}
		a.n++
		if r.Paths == 2 {
			a.two++
		}
		a.bits += r.BitsPerWeight * w
		a.weights += w
		a.sumErr += r.RelErr
		a.maxE = math.Max(a.maxE, r.RelErr)
		bits, weights = bits+r.BitsPerWeight*w, weights+w
	}
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	sortKinds(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %7s %7s %9s %13s %12s\n", "kind", "tensors", "2-path", "bits/w", "mean rel err", "max rel err")
	for _, k := range kinds {
		a := by[k]
		fmt.Fprintf(&b, "%-12s %7d %7d %9.4f %13.4f %12.4f\n", k, a.n, a.two, a.bits/a.weights, a.sumErr/float64(a.n), a.maxE)
	}
	if weights > 0 {
		fmt.Fprintf(&b, "%d tensors at %.4f bits/weight overall\n", len(reports), bits/weights)
	}
	return b.String()
}

// sortKinds orders kinds as plotKindOrder (attention, GatedDeltaNet, MLP), others after
// them by name.
func sortKinds(kinds []string) {
	rank := map[string]int{}
	for i, k := range plotKindOrder {
		rank[k] = i
	}
	sort.Slice(kinds, func(i, j int) bool {
		ri, oki := rank[kinds[i]]
		rj, okj := rank[kinds[j]]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return kinds[i] < kinds[j]
	})
}
