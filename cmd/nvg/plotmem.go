package main

import (
	"fmt"

	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
)

func init() {
	register(&command{
		name:    "plot-mem",
		summary: "plot a memory log (nvg distill --mem-log): GPU bytes, Go heap and tokens/s over the steps",
		usage:   "MEMLOG.csv OUT.png",
		run:     runPlotMem,
	})
}

func runPlotMem(args []string) error {
	c := commands["plot-mem"]
	fs := newFlags(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want MEMLOG.csv OUT.png, got %d arguments", fs.NArg())
	}
	samples, err := train.ReadMemLog(fs.Arg(0))
	if err != nil {
		return err
	}
	rows := make([]ui.MemSample, len(samples))
	for i, s := range samples {
		rows[i] = ui.MemSample(s)
	}
	fig, err := ui.PlotMemLog(rows)
	if err != nil {
		return err
	}
	if err := ui.SavePlot(fs.Arg(1), fig, 1000, 1000); err != nil {
		return err
	}
	first, last := samples[0], samples[len(samples)-1]
	fmt.Printf("%d samples, steps %d…%d: GPU %d → %d bytes (peak %d), Go heap %d → %d bytes; wrote %s\n",
		len(samples), first.Step, last.Step, first.GPUCurrent, last.GPUCurrent, last.GPUPeak, first.HeapAlloc, last.HeapAlloc, fs.Arg(1))
	return nil
}
