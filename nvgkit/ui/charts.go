package ui

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/nvg-project/nvg/nvgkit/session"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotPalette is a 20-colour qualitative palette, one colour per tensor kind or series:
// matplotlib's tab10 first, then ten colours chosen to differ from those and from each
// other (navy, maroon, gold, mint, magenta, lavender, black, teal, apricot, lime), so
// that every compressed and uncompressed tensor kind of a model (15 and more) gets a
// colour of its own. It repeats beyond 20.
var plotPalette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	{0x00, 0x00, 0x75, 0xff}, {0x80, 0x00, 0x00, 0xff}, {0xff, 0xd7, 0x00, 0xff}, {0x7f, 0xe8, 0xa8, 0xff},
	{0xf0, 0x32, 0xe6, 0xff}, {0xc8, 0xa8, 0xf0, 0xff}, {0x00, 0x00, 0x00, 0xff}, {0x2f, 0x70, 0x68, 0xff},
	{0xff, 0xc0, 0x90, 0xff}, {0x70, 0xf0, 0x20, 0xff},
}

func plotColor(i int) color.Color { return plotPalette[i%len(plotPalette)] }

// newPlot returns a plot with a title, axis labels and a light grid.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(4)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	p.Legend.TextStyle.Font.Size = legendFontSize
	p.Legend.ThumbnailWidth = vg.Points(14)
	return p
}

// legendFontSize is the size of legend text: smaller than the axis labels (12 pt), so a
// legend of tensor kinds stays a narrow column.
const legendFontSize = 10 * vg.Inch / 72

// legendGap is the blank space between the data's right end and a Chart's legend (room
// for a point's glyph too).
const legendGap = 10 * vg.Inch / 72

// Chart is a plot whose legend stands right of its data in the top-right corner: at every
// Draw, X.Max is widened (for that drawing only) just enough that the legend, at the width
// its text takes on that canvas, clears DataMaxX, the right end of the data in X units. So
// the legend never covers a bar or a point and takes no more width than its text, whatever
// the size of the image. A larger X.Max set by the caller is kept. The embedded *plot.Plot
// can be changed (title, labels) as any gonum plot.
type Chart struct {
	*plot.Plot
	// DataMaxX is the right end of the data, in X units.
	DataMaxX float64
}

// Draw implements Drawable.
func (c *Chart) Draw(dc draw.Canvas) {
	saved := c.X.Max
	defer func() { c.X.Max = saved }()
	c.X.Max = math.Max(saved, c.legendMaxX(dc))
	c.Plot.Draw(dc)
}

// legendMaxX returns the X.Max at which DataMaxX lands legendGap left of the legend when the
// chart is drawn on dc. The legend takes at most half of the data area. The data area
// depends a little on X.Max (gonum pads it for glyphs at its edges), so the solution is
// refined a few times.
func (c *Chart) legendMaxX(dc draw.Canvas) float64 {
	lw := c.Legend.Rectangle(dc).Size().X
	if lw == 0 || !(c.DataMaxX > c.X.Min) {
		return c.X.Max
	}
	saved := c.X.Max
	defer func() { c.X.Max = saved }()
	left := dc.Max.X - lw - legendGap // the legend spans from here to dc's right edge
	m := c.DataMaxX
	for range 4 {
		c.X.Max = m
		d := c.DataCanvas(dc)
		frac := math.Max(float64((left-d.Min.X)/(d.Max.X-d.Min.X)), 0.5)
		m = c.X.Min + (c.DataMaxX-c.X.Min)/frac
	}
	return m
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// TrainingCurves is the plain data of a distillation run that PlotTraining draws: the
// training loss Loss[i] (mean KL(teacher top-k ‖ student) per token, nats; NaN or ±Inf for
// a skipped step) at optimizer step Steps[i], the held-out perplexity EvalPPL[j] at step
// EvalSteps[j], and the teacher's held-out perplexity TeacherPPL (0: not known, no
// reference line). train.TrainingSeries returns these fields from a metrics log. Phases,
// when there are several, are the run's phases (train.PhaseSeries, session.History.
// PhaseSpans): PlotTraining marks where each after the first begins.
type TrainingCurves struct {
	Steps      []int
	Loss       []float64
	EvalSteps  []int
	EvalPPL    []float64
	TeacherPPL float64
	Phases     []session.Phase
}

// MovingAverageWindow is the window PlotTraining averages the training loss over, for n
// finite loss values: n/20 steps, at least 3 and at most n (0 when n < 4: too short a run to
// smooth, only the per-step line is drawn).
func MovingAverageWindow(n int) int {
	if n < 4 {
		return 0
	}
	return min(n, max(3, n/20))
}

// MovingAverage returns the trailing mean of ys over win values: out[i] is the mean of the
// finite values among ys[max(0, i−win+1) … i] (fewer at the start), NaN where ys[i] itself is
// not finite (a gap in the series, e.g. a run's block-wise steps, stays a gap) or the window
// holds no finite value. win < 1 is taken as 1.
func MovingAverage(ys []float64, win int) []float64 {
	win = max(win, 1)
	out := make([]float64, len(ys))
	var sum float64
	n := 0
	for i, y := range ys {
		if finite(y) {
			sum, n = sum+y, n+1
		}
		if i >= win && finite(ys[i-win]) {
			sum, n = sum-ys[i-win], n-1
		}
		out[i] = math.NaN()
		if n > 0 && finite(y) {
			out[i] = sum / float64(n)
		}
	}
	return out
}

// trainingLines returns the training loss points PlotTraining draws (non-finite losses left
// out), their moving average (nil when the run is too short) and its window.
func trainingLines(steps []int, loss []float64) (raw, avg plotter.XYs, win int) {
	var ys []float64
	for i, v := range loss {
		if finite(v) {
			raw = append(raw, plotter.XY{X: float64(steps[i]), Y: v})
			ys = append(ys, v)
		}
	}
	win = MovingAverageWindow(len(raw))
	if win == 0 {
		return raw, nil, 0
	}
	m := MovingAverage(ys, win)
	avg = make(plotter.XYs, len(raw))
	for i := range raw {
		avg[i] = plotter.XY{X: raw[i].X, Y: m[i]}
	}
	return raw, avg, win
}

// PlotTraining draws the course of a distillation run (TrainingCurves) as a two-panel
// Figure sharing the step axis: on top the training loss per step (a light line) with its
// moving average (MovingAverageWindow, MovingAverage: a dark line, named in the legend with
// its window; a run of fewer than 4 steps draws the per-step line alone, named "train
// KL"); below the held-out perplexity per evaluation (lines with points) on a logarithmic
// axis, so that a fall from thousands to tens stays readable, and the teacher's perplexity
// as a dashed reference line when TeacherPPL is set. Non-finite losses (skipped steps) are
// left out. Either series may be empty (an empty panel shows its axes only), not both. Both
// panels leave headroom above the data for the legends, the log axis starts at a tick that
// it labels (so the decade of the lowest point, usually the last, has a label), and tick
// labels carry no needless decimals. With several Phases, a dotted vertical line in both
// panels marks the start of each phase after the first (half a step before its first
// step), labelled with its kind in the top panel ("→ finish"). When the training loss goes past the only evaluation
// (or there is none: a Lab stepped without EvalEvery), the figure is the loss panel alone,
// its title giving that evaluation's perplexity and step: a panel of one stale point would
// read as the current perplexity.
//
// Errors: len(Steps) ≠ len(Loss), len(EvalSteps) ≠ len(EvalPPL), both series empty, an
// EvalPPL value that is not finite and ≥ 1 (a perplexity), naming the index; a TeacherPPL
// that is neither 0 nor a perplexity; phases whose steps are not in order (First ≤ Last,
// each after the one before), naming the phase.
func PlotTraining(c TrainingCurves) (*Figure, error) {
	steps, trainKL, evalSteps, evalPPL := c.Steps, c.Loss, c.EvalSteps, c.EvalPPL
	if len(steps) != len(trainKL) {
		return nil, fmt.Errorf("PlotTraining: %d steps but %d loss values", len(steps), len(trainKL))
	}
	if len(evalSteps) != len(evalPPL) {
		return nil, fmt.Errorf("PlotTraining: %d evalSteps but %d evalPPL values", len(evalSteps), len(evalPPL))
	}
	if len(steps) == 0 && len(evalSteps) == 0 {
		return nil, errors.New("PlotTraining: no training and no evaluation points")
	}
	for j, v := range evalPPL {
		if !(finite(v) && v >= 1) {
			return nil, fmt.Errorf("PlotTraining: evalPPL[%d] = %g is not a perplexity (finite, ≥ 1)", j, v)
		}
	}
	if t := c.TeacherPPL; t != 0 && !(finite(t) && t >= 1) {
		return nil, fmt.Errorf("PlotTraining: TeacherPPL = %g is not a perplexity (finite, ≥ 1) nor 0 (none)", t)
	}
	for i, p := range c.Phases {
		if p.First > p.Last || i > 0 && p.First <= c.Phases[i-1].Last {
			return nil, fmt.Errorf("PlotTraining: phase %d (%s, steps %d…%d) is not after the one before it or ends before it starts", i, p.Kind, p.First, p.Last)
		}
	}
	top := newPlot("Training loss", "", "KL (nats/token)")
	kl, avg, win := trainingLines(steps, trainKL)
	if len(kl) > 0 {
		l, err := plotter.NewLine(kl)
		if err != nil {
			return nil, fmt.Errorf("PlotTraining: %w", err)
		}
		if avg == nil { // too short a run to smooth: the per-step line alone, in full colour
			l.Color, l.Width = plotColor(0), vg.Points(2)
			top.Add(l)
			top.Legend.Add("train KL", l)
		} else {
			l.Color = color.RGBA{0x9e, 0xc5, 0xe4, 0xff} // light: the raw, noisy per-step loss
			l.Width = vg.Points(1)
			top.Add(l)
			top.Legend.Add("train KL per step", l)
			la, err := plotter.NewLine(avg)
			if err != nil {
				return nil, fmt.Errorf("PlotTraining: %w", err)
			}
			la.Color = plotColor(0)
			la.Width = vg.Points(2)
			top.Add(la)
			top.Legend.Add(fmt.Sprintf("moving average (%d steps)", win), la)
		}
		top.Legend.Top = true
		ylo, yhi := math.Inf(1), math.Inf(-1)
		for _, p := range kl {
			ylo, yhi = math.Min(ylo, p.Y), math.Max(yhi, p.Y)
		}
		span := yhi - ylo
		if span == 0 {
			span = math.Max(math.Abs(yhi), 1) * 0.1
		}
		// Headroom above (for the legend and the first, highest points) and a little below.
		top.Y.Min, top.Y.Max = ylo-0.04*span, yhi+0.22*span
		if ylo >= 0 {
			top.Y.Min = math.Max(0, top.Y.Min)
		}
	} else {
		top.Y.Min, top.Y.Max = 0, 1 // empty panel: a sane y range
	}
	top.Y.Tick.Marker = tidyTicks{}
	// Share the step range so the panels line up.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range steps {
		lo, hi = math.Min(lo, float64(s)), math.Max(hi, float64(s))
	}
	for _, s := range evalSteps {
		lo, hi = math.Min(lo, float64(s)), math.Max(hi, float64(s))
	}
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	if n := len(evalSteps); len(kl) > 0 && n <= 1 && (n == 0 || float64(evalSteps[0]) < kl[len(kl)-1].X) {
		// No evaluation since the training began (a Lab steps without EvalEvery): a
		// perplexity panel would hold one stale point, or none. The loss alone, and its title
		// says what the perplexity was.
		if n == 1 {
			top.Title.Text = fmt.Sprintf("Training loss (held-out perplexity %.4g at step %d, not evaluated since)", evalPPL[0], evalSteps[0])
		}
		top.X.Label.Text = "optimizer step"
		top.X.Min, top.X.Max = lo, hi
		top.X.Tick.Marker = tidyTicks{}
		return &Figure{Panels: []*plot.Plot{top}}, nil
	}
	bottom := newPlot("Held-out perplexity", "optimizer step", "perplexity (log scale)")
	bottom.Y.Scale = plot.LogScale{}
	bottom.Y.Tick.Marker = logTicks{}
	plo, phi := math.Inf(1), math.Inf(-1)
	if len(evalPPL) > 0 {
		pts := make(plotter.XYs, len(evalPPL))
		for j, v := range evalPPL {
			pts[j] = plotter.XY{X: float64(evalSteps[j]), Y: v}
			plo, phi = math.Min(plo, v), math.Max(phi, v)
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("PlotTraining: %w", err)
		}
		l.Color, l.Width = plotColor(1), vg.Points(1.5)
		s.Color, s.Shape, s.Radius = plotColor(1), draw.CircleGlyph{}, vg.Points(2.5)
		bottom.Add(l, s)
		bottom.Legend.Add("held-out perplexity", l, s)
		bottom.Legend.Top = true
	}
	if t := c.TeacherPPL; t != 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: t}, {X: hi, Y: t}})
		if err != nil {
			return nil, fmt.Errorf("PlotTraining: %w", err)
		}
		l.Color, l.Width = color.Gray{Y: 90}, vg.Points(1.2)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		bottom.Add(l)
		bottom.Legend.Add(fmt.Sprintf("teacher (%.4g)", t), l)
		bottom.Legend.Top = true
		plo, phi = math.Min(plo, t), math.Max(phi, t)
	}
	if finite(plo) {
		// Headroom in log space: a third of the decades shown above the data for the legend
		// (half for two entries), a little below, down to a multiple of a power of ten, which
		// logTicks labels when its decade has no other label.
		dec := math.Max(math.Log10(phi/plo), 0.3)
		bottom.Y.Min = math.Max(logFloor(plo/math.Pow(10, 0.06*dec)), 0.5)
		room := 0.3
		if c.TeacherPPL != 0 && len(evalPPL) > 0 {
			room = 0.5
		}
		bottom.Y.Max = phi * math.Pow(10, room*dec)
	} else {
		bottom.Y.Min, bottom.Y.Max = 1, 10 // empty panel: a sane (log) y range
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Min, p.X.Max = lo, hi
		p.X.Tick.Marker = tidyTicks{}
	}
	if err := markPhases(top, bottom, c.Phases); err != nil {
		return nil, fmt.Errorf("PlotTraining: %w", err)
	}
	return &Figure{Panels: []*plot.Plot{top, bottom}}, nil
}

// phaseMarks returns where PlotTraining marks the phases (half a step before the first step
// of every phase after the first) and their labels ("→ finish", "→ block 1"; a block phase
// right after a marked block phase only its layer, "2", so that one mark per layer stays
// legible).
func phaseMarks(phases []session.Phase) (xs []float64, labels []string) {
	for i, ph := range phases {
		if i == 0 {
			continue
		}
		label := "→ " + ph.Name()
		if ph.Kind == "block" && i > 1 && phases[i-1].Kind == "block" {
			label = fmt.Sprint(ph.Layer)
		}
		xs, labels = append(xs, float64(ph.First)-0.5), append(labels, label)
	}
	return xs, labels
}

// markPhases draws a dotted vertical line at every phaseMarks position in each panel (their
// y ranges already set) and its label in top.
func markPhases(top, bottom *plot.Plot, phases []session.Phase) error {
	xs, names := phaseMarks(phases)
	if len(xs) == 0 {
		return nil
	}
	var labels plotter.XYLabels
	for i, x := range xs {
		for _, p := range []*plot.Plot{top, bottom} {
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return err
			}
			l.Color, l.Width = color.Gray{Y: 110}, vg.Points(1)
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(l)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: top.Y.Min + 0.55*(top.Y.Max-top.Y.Min)}) // mid-height: below the legend, above a late loss
		labels.Labels = append(labels.Labels, names[i])
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Color = color.Gray{Y: 70}
		l.TextStyle[i].Font.Size = legendFontSize
	}
	top.Add(l)
	return nil
}

// logFloor rounds v > 0 down to the largest m·10^k ≤ v with m an integer 1…9.
func logFloor(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	m := math.Floor(v/p + 1e-9)
	return math.Max(m, 1) * p
}

// groupedBars is a plotter of bars in groups: group g is centred at x = g, series s of
// nSeries is drawn at an offset inside the group's width (data units, 0.8), from 0 to
// values[s][g]. NaN values draw no bar.
type groupedBars struct {
	values [][]float64
	colors []color.Color
	width  float64
}

// Plot implements plot.Plotter.
func (b *groupedBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	bw := b.width / float64(len(b.values))
	for s, vs := range b.values {
		for g, v := range vs {
			if !finite(v) {
				continue
			}
			x0 := float64(g) - b.width/2 + float64(s)*bw
			x1 := x0 + bw
			pts := []vg.Point{{X: trX(x0), Y: trY(0)}, {X: trX(x1), Y: trY(0)}, {X: trX(x1), Y: trY(v)}, {X: trX(x0), Y: trY(v)}}
			c.FillPolygon(b.colors[s], c.ClipPolygonXY(pts))
		}
	}
}

// DataRange implements plot.DataRanger: every group's full width, and 0 to the largest
// value (or the smallest, when negative).
func (b *groupedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	n := 0
	for _, vs := range b.values {
		n = max(n, len(vs))
		for _, v := range vs {
			if finite(v) {
				ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
			}
		}
	}
	if ymax == ymin {
		ymax = 1
	}
	return -0.5, float64(n) - 0.5, ymin, ymax * 1.05
}

// swatch is a legend thumbnail: a rectangle filled with the colour.
type swatch struct{ c color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(s.c, pts)
}

// nominalX labels the groups 0..len(labels)−1 on the X axis, thinning the labels to at
// most about 32 so they stay legible, and rotating long ones.
func nominalX(p *plot.Plot, labels []string) {
	step := max(1, (len(labels)+31)/32)
	ticks := make([]plot.Tick, len(labels))
	long := false
	for i, l := range labels {
		ticks[i].Value = float64(i)
		if i%step == 0 {
			ticks[i].Label = l
			long = long || len(l) > 3
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if long && len(labels) > 6 {
		p.X.Tick.Label.Rotation = math.Pi / 4
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
}

// PlotLayerGradNorms draws gradient norms as grouped bars: one group per decoder layer
// (layers[i] labels group i on the X axis), in it one bar per tensor kind (kinds[k], one
// colour each, named in the legend) of height norms[k][i] (the L2 norm of that kind's
// gradient in that layer, for example of the BLR metric of its q_proj). A NaN entry draws
// no bar (a kind the layer lacks, such as q_proj in a GatedDeltaNet layer).
//
// Errors: no layers or no kinds, len(norms) ≠ len(kinds), len(norms[k]) ≠ len(layers)
// (naming k), a negative or infinite norm (naming k and i).
func PlotLayerGradNorms(layers []int, kinds []string, norms [][]float64) (*Chart, error) {
	if len(layers) == 0 || len(kinds) == 0 {
		return nil, fmt.Errorf("PlotLayerGradNorms: %d layers and %d kinds, want at least one of each", len(layers), len(kinds))
	}
	if len(norms) != len(kinds) {
		return nil, fmt.Errorf("PlotLayerGradNorms: %d kinds but norms has %d rows (want norms[kind][layer])", len(kinds), len(norms))
	}
	for k, row := range norms {
		if len(row) != len(layers) {
			return nil, fmt.Errorf("PlotLayerGradNorms: norms[%d] (%s) has %d values but there are %d layers", k, kinds[k], len(row), len(layers))
		}
		for i, v := range row {
			if math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("PlotLayerGradNorms: norms[%d][%d] (%s, layer %d) = %g is not a norm", k, i, kinds[k], layers[i], v)
			}
		}
	}
	p := newPlot("Gradient norm per layer and tensor kind", "layer", "gradient norm (L2)")
	b := &groupedBars{values: norms, width: 0.8}
	for k, kind := range kinds {
		b.colors = append(b.colors, plotColor(k))
		p.Legend.Add(kind, swatch{plotColor(k)})
	}
	p.Add(b)
	labels := make([]string, len(layers))
	for i, l := range layers {
		labels[i] = strconv.Itoa(l)
	}
	nominalX(p, labels)
	p.Legend.Top = true
	n := float64(len(layers))
	p.X.Min, p.X.Max = -0.5, n-0.5
	return &Chart{Plot: p, DataMaxX: n - 0.5}, nil
}

// PlotHistogram draws a histogram of values (for example the BLR metric scales of a
// tensor, or their last Adam update) in bins equal-width bins over [min, max] of the
// values (a single value or all equal: one bin of width 1 around it). The title is
// title followed by the number of values and their mean and standard deviation.
//
// Errors: bins < 1 or > 10000, no values, a NaN or infinite value (naming its index).
func PlotHistogram(title string, values []float64, bins int) (*plot.Plot, error) {
	if bins < 1 || bins > 10000 {
		return nil, fmt.Errorf("PlotHistogram: bins = %d, want 1..10000", bins)
	}
	if len(values) == 0 {
		return nil, errors.New("PlotHistogram: no values")
	}
	var sum, sq float64
	for i, v := range values {
		if !finite(v) {
			return nil, fmt.Errorf("PlotHistogram: values[%d] = %g is not finite", i, v)
		}
		sum += v
	}
	mean := sum / float64(len(values))
	for _, v := range values {
		sq += (v - mean) * (v - mean)
	}
	std := math.Sqrt(sq / float64(len(values)))
	h, err := plotter.NewHist(plotter.Values(values), bins)
	if err != nil {
		return nil, fmt.Errorf("PlotHistogram: %w", err)
	}
	h.FillColor = plotColor(0)
	h.LineStyle.Color = color.RGBA{0x10, 0x3c, 0x5c, 0xff} // a darker blue outline: bars stay apart
	h.LineStyle.Width = vg.Points(0.75)
	if title == "" {
		title = "Histogram"
	}
	p := newPlot(fmt.Sprintf("%s (n = %d, mean %.4g, sd %.4g)", title, len(values), mean, std), "value", "count")
	p.Add(h)
	top := 0.0
	for _, b := range h.Bins {
		top = math.Max(top, b.Weight)
	}
	p.Y.Min, p.Y.Max = 0, math.Max(top, 1)*1.08 // headroom: the tallest bar ends below the axis top
	p.Y.Tick.Marker = tidyTicks{}
	p.X.Tick.Marker = tidyTicks{}
	return p, nil
}

// plotTokenLabel makes a token printable on an axis: Go-quoted (so spaces, newlines and
// byte-level symbols are visible), at most 16 characters.
func plotTokenLabel(tok string) string {
	q := strconv.Quote(tok)
	if r := []rune(q); len(r) > 16 {
		q = string(r[:15]) + "…"
	}
	return q
}

// PlotTopK compares the teacher's and the student's next-token distributions at one
// position: for each of the k tokens (tokens[i], usually the teacher's top-k, shown
// quoted on the X axis) a pair of bars, teacherP[i] and studentP[i] (probabilities, e.g.
// the teacher's renormalised top-k and the student's full-vocabulary probability of the
// same id), with a legend. The title gives Σ teacherP·log(teacherP/studentP) over the k
// tokens (the top-k KL term, nats) when every studentP is positive.
//
// Errors: no tokens, len(teacherP) or len(studentP) ≠ len(tokens), a probability that is
// NaN or outside [0, 1] (naming the series and index).
func PlotTopK(tokens []string, teacherP, studentP []float64) (*Chart, error) {
	if len(tokens) == 0 {
		return nil, errors.New("PlotTopK: no tokens")
	}
	if len(teacherP) != len(tokens) || len(studentP) != len(tokens) {
		return nil, fmt.Errorf("PlotTopK: %d tokens but %d teacher and %d student probabilities", len(tokens), len(teacherP), len(studentP))
	}
	kl, klOK := 0.0, true
	for i := range tokens {
		for _, s := range []struct {
			name string
			v    float64
		}{{"teacherP", teacherP[i]}, {"studentP", studentP[i]}} {
			if !(s.v >= 0 && s.v <= 1) {
				return nil, fmt.Errorf("PlotTopK: %s[%d] = %g is not a probability", s.name, i, s.v)
			}
		}
		switch {
		case teacherP[i] == 0:
		case studentP[i] == 0:
			klOK = false
		default:
			kl += teacherP[i] * math.Log(teacherP[i]/studentP[i])
		}
	}
	title := fmt.Sprintf("Top-%d next-token distribution", len(tokens))
	if klOK {
		title += fmt.Sprintf(" (top-k KL %.3g nats)", kl)
	}
	p := newPlot(title, "token", "probability")
	b := &groupedBars{values: [][]float64{teacherP, studentP}, colors: []color.Color{plotColor(0), plotColor(1)}, width: 0.8}
	p.Add(b)
	p.Legend.Add("teacher", swatch{plotColor(0)})
	p.Legend.Add("student", swatch{plotColor(1)})
	p.Legend.Top = true
	n := float64(len(tokens))
	p.X.Min, p.X.Max = -0.5, n-0.5
	labels := make([]string, len(tokens))
	for i, t := range tokens {
		labels[i] = plotTokenLabel(t)
	}
	nominalX(p, labels)
	return &Chart{Plot: p, DataMaxX: n - 0.5}, nil
}

// plotKindOrder is the order of the compressed kinds in legends (DESIGN.md §3: attention,
// GatedDeltaNet, MLP).
var plotKindOrder = []string{"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj", "gate_proj", "up_proj", "down_proj"}

// PlotReconstruction draws, for every compressed tensor of a compression report, its
// relative reconstruction error (Y) against its bits per weight (X), one point per
// tensor, coloured and shaped by Kind ("" as "other"), kinds in a legend (a Chart: right
// of the points) in the order attention, GatedDeltaNet, MLP.
//
// Errors: no reports, a BitsPerWeight that is not finite and positive or a RelErr that is
// not finite and ≥ 0 (naming the tensor).
func PlotReconstruction(reports []session.TensorReport) (*Chart, error) {
	if len(reports) == 0 {
		return nil, errors.New("PlotReconstruction: no tensor reports")
	}
	byKind := map[string]plotter.XYs{}
	for _, r := range reports {
		if !(finite(r.BitsPerWeight) && r.BitsPerWeight > 0) {
			return nil, fmt.Errorf("PlotReconstruction: tensor %s: bits per weight %g is not finite and positive", r.Name, r.BitsPerWeight)
		}
		if !(finite(r.RelErr) && r.RelErr >= 0) {
			return nil, fmt.Errorf("PlotReconstruction: tensor %s: relative error %g is not finite and ≥ 0", r.Name, r.RelErr)
		}
		k := r.Kind
		if k == "" {
			k = "other"
		}
		byKind[k] = append(byKind[k], plotter.XY{X: r.BitsPerWeight, Y: r.RelErr})
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sortKinds(kinds)
	p := newPlot("BLR reconstruction error per tensor", "bits per weight", "relative error ‖W − Ŵ‖ / ‖W‖")
	for i, k := range kinds {
		s, err := plotter.NewScatter(byKind[k])
		if err != nil {
			return nil, fmt.Errorf("PlotReconstruction: kind %s: %w", k, err)
		}
		s.GlyphStyle.Color = plotColor(i)
		s.GlyphStyle.Shape = plotutil.Shape(i)
		s.GlyphStyle.Radius = vg.Points(3)
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("%s (%d)", k, len(byKind[k])), s)
	}
	p.Legend.Top = true
	p.X.Tick.Marker = tidyTicks{} // distinct labels: never "1.1" twice
	p.Y.Tick.Marker = tidyTicks{}
	elo, ehi := math.Inf(1), math.Inf(-1)
	for _, r := range reports {
		elo, ehi = math.Min(elo, r.RelErr), math.Max(ehi, r.RelErr)
	}
	espan := math.Max(ehi-elo, 0.05*math.Max(ehi, 1e-3))
	// Headroom so the markers at the top (and bottom) are drawn whole.
	p.Y.Min, p.Y.Max = math.Max(0, elo-0.06*espan), ehi+0.1*espan
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range reports {
		lo, hi = math.Min(lo, r.BitsPerWeight), math.Max(hi, r.BitsPerWeight)
	}
	span := math.Max(hi-lo, 0.05*math.Max(hi, 1e-3)) // all at one budget: show ±5 %
	mid := (lo + hi) / 2
	lo, hi = math.Min(lo, mid-span/2), math.Max(hi, mid+span/2)
	p.X.Min, p.X.Max = lo-0.04*span, hi+0.04*span
	return &Chart{Plot: p, DataMaxX: p.X.Max}, nil
}

// LayerErrors are the reconstruction errors of one decoder layer's compressed tensors,
// means over them (LayerReconstruction): RelErr ‖W − Ŵ‖_F/‖W‖_F and WeightedRelErr the
// input-weighted error of the stored student; InitRelErr and InitWeightedRelErr those of
// the refinement's Dual-SVID start (0 when the reports have none).
type LayerErrors struct {
	Layer, Tensors                                         int
	RelErr, WeightedRelErr, InitRelErr, InitWeightedRelErr float64
}

// LayerReconstruction returns the per-layer means of a compression report's errors (one
// row per decoder layer that has compressed tensors, in layer order; tensors of no layer,
// Layer < 0, are left out).
func LayerReconstruction(reports []session.TensorReport) []LayerErrors {
	by := map[int]*LayerErrors{}
	var layers []int
	for _, r := range reports {
		if r.Layer < 0 {
			continue
		}
		e := by[r.Layer]
		if e == nil {
			e = &LayerErrors{Layer: r.Layer}
			by[r.Layer] = e
			layers = append(layers, r.Layer)
		}
		e.Tensors++
		e.RelErr += r.RelErr
		e.WeightedRelErr += r.WeightedRelErr
		e.InitRelErr += r.InitRelErr
		e.InitWeightedRelErr += r.InitWeightedRelErr
	}
	sort.Ints(layers)
	out := make([]LayerErrors, len(layers))
	for i, l := range layers {
		e := *by[l]
		k := float64(e.Tensors)
		e.RelErr, e.WeightedRelErr, e.InitRelErr, e.InitWeightedRelErr = e.RelErr/k, e.WeightedRelErr/k, e.InitRelErr/k, e.InitWeightedRelErr/k
		out[i] = e
	}
	return out
}

// layerSeries are the series of LayerReconstruction that PlotLayerReconstruction and
// WriteLayerReconstruction show, those that some layer has (a report of Dual-SVID without
// calibration has the plain error alone).
func layerSeries(rows []LayerErrors) (names []string, get []func(LayerErrors) float64) {
	all := []struct {
		name string
		f    func(LayerErrors) float64
	}{
		{"plain, Dual-SVID start", func(e LayerErrors) float64 { return e.InitRelErr }},
		{"plain", func(e LayerErrors) float64 { return e.RelErr }},
		{"input-weighted, Dual-SVID start", func(e LayerErrors) float64 { return e.InitWeightedRelErr }},
		{"input-weighted", func(e LayerErrors) float64 { return e.WeightedRelErr }},
	}
	for _, s := range all {
		for _, r := range rows {
			if s.f(r) != 0 {
				names, get = append(names, s.name), append(get, s.f)
				break
			}
		}
	}
	return names, get
}

// PlotLayerReconstruction draws the per-layer mean reconstruction errors of a compression
// report (LayerReconstruction) against the decoder layer: the plain relative error
// ‖W − Ŵ‖/‖W‖ and, when the report has them, the input-weighted error of the calibration
// (the relative RMS output error on its inputs) and both errors of the refinement's
// Dual-SVID start (dashed), so a refined student shows what the refinement did where. nvg
// distill saves it as reconstruction_layers.png. Errors: no report of a layer, an error that
// is not finite and ≥ 0 (naming the tensor).
func PlotLayerReconstruction(reports []session.TensorReport) (*Chart, error) {
	for _, r := range reports {
		for _, v := range []float64{r.RelErr, r.WeightedRelErr, r.InitRelErr, r.InitWeightedRelErr} {
			if !(finite(v) && v >= 0) {
				return nil, fmt.Errorf("PlotLayerReconstruction: tensor %s: an error of %g is not finite and ≥ 0", r.Name, v)
			}
		}
	}
	rows := LayerReconstruction(reports)
	if len(rows) == 0 {
		return nil, errors.New("PlotLayerReconstruction: no tensor of a decoder layer")
	}
	names, get := layerSeries(rows)
	p := newPlot("BLR reconstruction error per layer (mean over its tensors)", "decoder layer", "relative error")
	hi := 0.0
	for i, name := range names {
		pts := make(plotter.XYs, len(rows))
		for j, r := range rows {
			pts[j] = plotter.XY{X: float64(r.Layer), Y: get[i](r)}
			hi = math.Max(hi, pts[j].Y)
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("PlotLayerReconstruction: %w", err)
		}
		c := plotColor(i / 2) // the start and the result of one error share a colour
		if len(names) < 4 {
			c = plotColor(i)
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if strings.HasSuffix(name, "start") {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		sc.Color, sc.Shape, sc.Radius = c, draw.CircleGlyph{}, vg.Points(2.5)
		p.Add(l, sc)
		p.Legend.Add(name, l, sc)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, math.Max(hi, 1e-3)*1.1
	p.X.Min, p.X.Max = float64(rows[0].Layer)-0.5, float64(rows[len(rows)-1].Layer)+0.5
	p.X.Tick.Marker = tidyTicks{}
	p.Y.Tick.Marker = tidyTicks{}
	return &Chart{Plot: p, DataMaxX: p.X.Max}, nil
}

// WriteLayerReconstruction writes LayerReconstruction(reports) as a plain-text table to w:
// one line per layer with its tensors and the mean errors PlotLayerReconstruction draws
// (the columns some layer has). It returns w's first error.
func WriteLayerReconstruction(w io.Writer, reports []session.TensorReport) error {
	rows := LayerReconstruction(reports)
	names, get := layerSeries(rows)
	var b strings.Builder
	fmt.Fprintf(&b, "%5s  %7s", "layer", "tensors")
	for _, n := range names {
		fmt.Fprintf(&b, "  %*s", max(len(n), 8), n)
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%5d  %7d", r.Layer, r.Tensors)
		for i, n := range names {
			fmt.Fprintf(&b, "  %*.4f", max(len(n), 8), get[i](r))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tickLabel formats a tick value with exactly prec decimals.
func tickLabel(v float64, prec int) string {
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// tidyTickLabels relabels the labelled (major) ticks with the fewest decimals (0…8) that
// keep every label distinct and each within a thousandth of the tick spacing of its
// value: no needless decimals ("50" rather than "50.0") and no two ticks with the same
// label after rounding (never "1.1" twice). Unlabelled (minor) ticks are kept as they are.
func tidyTickLabels(ticks []plot.Tick) []plot.Tick {
	var vals []float64
	for _, t := range ticks {
		if t.Label != "" {
			vals = append(vals, t.Value)
		}
	}
	if len(vals) == 0 {
		return ticks
	}
	gap := math.Inf(1)
	for i := 1; i < len(vals); i++ {
		if d := math.Abs(vals[i] - vals[i-1]); d > 0 {
			gap = math.Min(gap, d)
		}
	}
	if math.IsInf(gap, 1) {
		gap = math.Max(math.Abs(vals[0]), 1)
	}
	prec := 0
	for ; prec < 8; prec++ {
		ok, seen := true, map[string]bool{}
		for _, v := range vals {
			l := tickLabel(v, prec)
			f, _ := strconv.ParseFloat(l, 64)
			if seen[l] || math.Abs(f-v) > 1e-3*gap {
				ok = false
				break
			}
			seen[l] = true
		}
		if ok {
			break
		}
	}
	out := make([]plot.Tick, len(ticks))
	for i, t := range ticks {
		out[i] = t
		if t.Label != "" {
			out[i].Label = tickLabel(t.Value, prec)
		}
	}
	return out
}

// tidyTicks marks a linear axis with about six labelled ticks at multiples of a round
// step (1, 2, 2.5 or 5 × 10^k) and unlabelled ones halfway between, labelled by
// tidyTickLabels.
type tidyTicks struct{}

// Ticks implements plot.Ticker.
func (tidyTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || !finite(lo) || !finite(hi) {
		return tidyTickLabels(plot.DefaultTicks{}.Ticks(lo, hi))
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step * 2); i <= math.Floor(hi/step*2); i++ {
		v := i * step / 2
		t := plot.Tick{Value: v}
		if math.Mod(i, 2) == 0 {
			t.Label = "x"
		}
		ticks = append(ticks, t)
	}
	return tidyTickLabels(ticks)
}

// logTicks marks a log axis: labelled ticks at 1, 2 and 5 × 10^k (only at 10^k when the
// axis spans more than 2.5 decades; at every integer multiple of 10^k when the range holds
// fewer than three labelled ticks), unlabelled ones at
// the other multiples, labels without needless decimals. A decade that the range enters
// but that holds none of those labels (70…90 on an axis from 70 to 3000) gets its lowest
// tick labelled, unless that label would crowd its neighbour (closer than 4 % of the
// axis's decades): the lowest points of a falling perplexity curve, which sit there, are
// never left without a label in their decade.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0 && hi >= lo) || !finite(hi) {
		return tidyTicks{}.Ticks(lo, hi)
	}
	var cand []float64
	for e := math.Floor(math.Log10(lo)) - 1; e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			if v := float64(m) * p; v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				cand = append(cand, v)
			}
		}
	}
	decade := func(v float64) float64 { return math.Floor(math.Log10(v) + 1e-9) }
	sparse := math.Log10(hi/lo) > 2.5 // more than 2.5 decades: 1, 2, 5 labels would crowd
	major := func(v float64) bool {
		m := math.Round(v / math.Pow(10, decade(v)))
		return m == 1 || !sparse && (m == 2 || m == 5)
	}
	if len(cand) < 2 {
		return tidyTicks{}.Ticks(lo, hi)
	}
	n := 0
	for _, v := range cand {
		if major(v) {
			n++
		}
	}
	ticks := make([]plot.Tick, len(cand))
	labelled := map[float64]bool{}
	for i, v := range cand {
		ticks[i].Value = v
		if n < 3 || major(v) {
			ticks[i].Label = "x"
			labelled[decade(v)] = true
		}
	}
	minSep := 0.04 * math.Log10(hi/lo)
	for i, v := range cand {
		if labelled[decade(v)] {
			continue
		}
		labelled[decade(v)] = true // the lowest tick of the decade, or none
		crowded := false
		for _, t := range ticks {
			if t.Label != "" && math.Abs(math.Log10(t.Value/v)) < minSep {
				crowded = true
			}
		}
		if !crowded {
			ticks[i].Label = "x"
		}
	}
	return tidyTickLabels(ticks)
}
