// Command ablationplot draws the training curves of several nvg distill runs in one chart:
// the training loss's KL term (a run with the hidden-state loss on records its KL apart, so
// runs with and without it compare; block-wise steps left out, their loss is a
// reconstruction error) against the step, as a moving average
// (ui.MovingAverageWindow of the longest run), one line per run directory.
//
//	go run ./bench/ablationplot -o docs/img/ablation.png NAME=RUNDIR ...
//
// RUNDIR holds the run's metrics.jsonl (nvg distill -o RUNDIR), or it gzipped as
// metrics.jsonl.gz (how docs/bench keeps them); NAME labels its line. Used for
// the ablation of issue 36's quality levers (bench/quality-ablation.sh, docs/BENCHMARKS.md).
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvg-project/nvg/nvgkit/ui"
)

func main() {
	out := flag.String("o", "ablation.png", "output image (.png or .svg)")
	title := flag.String("title", "training KL (moving average)", "chart title")
	flag.Parse()
	if err := run(*out, *title, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ablationplot:", err)
		os.Exit(1)
	}
}

// run reads every NAME=RUNDIR's step losses and saves the chart to out.
func run(out, title string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("want at least one NAME=RUNDIR")
	}
	var names []string
	var losses [][]float64
	longest := 0
	for _, a := range args {
		name, dir, ok := strings.Cut(a, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("argument %q: want NAME=RUNDIR", a)
		}
		l, err := stepLosses(dir)
		if err != nil {
			return err
		}
		names, losses = append(names, name), append(losses, l)
		longest = max(longest, len(l))
	}
	win := ui.MovingAverageWindow(longest)
	x := make([]float64, longest)
	for i := range x {
		x[i] = float64(i + 1)
	}
	ys := make([][]float64, len(losses))
	for s, l := range losses {
		ys[s] = make([]float64, longest)
		avg := ui.MovingAverage(l, win)
		for i := range ys[s] {
			ys[s][i] = math.NaN()
			if i < len(avg) {
				ys[s][i] = avg[i]
			}
		}
	}
	c, err := ui.PlotLines(title, "step", "KL (nats/token)", x, names, ys)
	if err != nil {
		return err
	}
	return ui.SavePlot(out, c, 900, 520)
}

// stepLosses returns the KL of every step record (its "kl", or its "loss" where the record
// has no separate KL: a run without the hidden-state loss) of dir's metrics.jsonl (or
// metrics.jsonl.gz), indexed by step − 1 (NaN for a block-wise step, a skipped step or a
// step with no record). Errors: neither file can be read, a line is not JSON, no step record.
func stepLosses(dir string) ([]float64, error) {
	path := filepath.Join(dir, "metrics.jsonl")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		path += ".gz"
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = z
	}
	var l []float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		var r struct {
			Kind, Phase string
			Step        int
			Loss        float64
			KL          *float64
			Skipped     bool
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if r.Kind != "step" || r.Step < 1 {
			continue
		}
		for len(l) < r.Step {
			l = append(l, math.NaN())
		}
		if !r.Skipped && r.Phase != "block" {
			l[r.Step-1] = r.Loss
			if r.KL != nil {
				l[r.Step-1] = *r.KL
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("%s: no step record", path)
	}
	return l, nil
}
