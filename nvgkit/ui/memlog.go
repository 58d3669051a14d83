package ui

import (
	"errors"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// MemSample is one row of a memory log, the plain data PlotMemLog draws: at optimizer step
// Step, WallSeconds after the logger started, the training throughput since the previous
// row (TokensPerSec; 0 for the first), the device's nvg buffers (current and peak bytes) and
// the Go runtime's live heap (bytes and objects) and goroutine count. Its fields are those
// of train.MemSample (package nvgkit/train) in the same order, so ui.MemSample(s) converts one.
type MemSample struct {
	Step                int
	WallSeconds         float64
	TokensPerSec        float64
	GPUCurrent, GPUPeak uint64
	HeapAlloc, HeapObjs uint64
	Goroutines          int
}

// PlotMemLog draws a memory log as a three-panel Figure over the step axis: GPU bytes
// (current and peak, MiB), the Go heap (live MiB and, on a second line, thousands of
// objects) and the throughput (tokens/s; the first sample, which has none, is left out).
// Flat lines are what a healthy long run shows.
func PlotMemLog(samples []MemSample) (*Figure, error) {
	if len(samples) == 0 {
		return nil, errors.New("ui.PlotMemLog: no samples")
	}
	const mib = 1 << 20
	xy := func(f func(MemSample) (float64, bool)) plotter.XYs {
		var pts plotter.XYs
		for _, s := range samples {
			if v, ok := f(s); ok {
				pts = append(pts, plotter.XY{X: float64(s.Step), Y: v})
			}
		}
		return pts
	}
	gpuP := newPlot("GPU memory of nvg's buffers", "step", "MiB")
	heapP := newPlot("Go heap", "step", "MiB live / thousand objects")
	speedP := newPlot("Throughput", "step", "tokens/s")
	series := []struct {
		p    *plot.Plot
		name string
		pts  plotter.XYs
	}{
		{gpuP, "current", xy(func(s MemSample) (float64, bool) { return float64(s.GPUCurrent) / mib, true })},
		{gpuP, "peak", xy(func(s MemSample) (float64, bool) { return float64(s.GPUPeak) / mib, true })},
		{heapP, "heap MiB", xy(func(s MemSample) (float64, bool) { return float64(s.HeapAlloc) / mib, true })},
		{heapP, "objects / 1000", xy(func(s MemSample) (float64, bool) { return float64(s.HeapObjs) / 1000, true })},
		{speedP, "tokens/s", xy(func(s MemSample) (float64, bool) { return s.TokensPerSec, s.TokensPerSec > 0 })},
	}
	for i, s := range series {
		if len(s.pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotColor(i)
		l.Width = vg.Points(1.5)
		s.p.Add(l)
		s.p.Legend.Add(s.name, l)
	}
	for _, p := range []*plot.Plot{gpuP, heapP, speedP} {
		p.Y.Min = 0
		p.Legend.Top = true
	}
	return &Figure{Panels: []*plot.Plot{gpuP, heapP, speedP}}, nil
}
