package train_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
	"github.com/nvg-project/nvg/testkit/kittest"
)

var streams struct {
	once           sync.Once
	train, heldOut []int
	err            error
}

// tokenStreams returns trainFixture's token streams without its compression.
func tokenStreams(t *testing.T) (trainIDs, heldOut []int) {
	t.Helper()
	streams.once.Do(func() {
		tok, err := tokenizer.FromJSON(tinyteacher.TokenizerJSON())
		if err != nil {
			streams.err = err
			return
		}
		src := filepath.Join(runtime.GOROOT(), "src")
		if streams.train, streams.err = data.TokenizeFiles(tok, []string{filepath.Join(src, "strings/strings.go"), filepath.Join(src, "sort/sort.go")}); streams.err != nil {
			return
		}
		streams.heldOut, streams.err = data.TokenizeFiles(tok, []string{filepath.Join(src, "bytes/buffer.go")})
	})
	if streams.err != nil {
		t.Fatal(streams.err)
	}
	return streams.train, streams.heldOut
}

// steadySteps is the length of TestSteadyStateMemory's run (NVG_STEADY_STEPS overrides it).
const steadySteps = 100

// TestSteadyStateMemory runs 100 tiny training steps (NVG_STEADY_STEPS for more; a step
// takes seconds on lavapipe) and checks that nothing in
// the step loop grows per step: after a warm-up of 20 steps the device's nvg buffers hold
// exactly the same bytes after every step (no per-step buffer, no growing top-k or
// profiler state), and the Go heap after a GC grows by less than 1 MiB over the rest of
// the run (the run's loss and gradient-norm histories, 16 bytes a step, are the only
// intended growth). The run writes a memory log (train.MemLogger) every 20 steps, read
// back with ReadMemLog and plotted with PlotMemLog.
func TestSteadyStateMemory(t *testing.T) {
	steps := steadySteps
	if v := os.Getenv("NVG_STEADY_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 40 {
			t.Fatalf("NVG_STEADY_STEPS=%q, want an integer ≥ 40", v)
		}
		steps = n
	}
	d, teacher, student := kittest.RobustNets(t)
	trainIDs, heldOut := tokenStreams(t)
	const warm = 20
	cfg := train.TrainConfig{Steps: steps, NB: 1, Windows: 8, T: 4, K: 4, EvalEvery: 0, EvalWindows: 1, KeepFinal: true, Seed: 9, Settings: schedule(0.01, 0, 0.1, 1)}
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var log bytes.Buffer
	ml, err := train.NewMemLogger(&log, d, cfg.NB*cfg.T, true)
	if err != nil {
		t.Fatal(err)
	}
	var gpu0 uint64
	var heap0, heapEnd uint64
	var sampleErr error
	heapNow := func() uint64 {
		runtime.GC() // twice: objects freed by the first cycle's finalizers (released wgpu handles) go in the second
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	tr.OnStep = func(i train.StepInfo) {
		if i.Step%20 == 0 {
			if _, err := ml.Sample(i.Step); err != nil && sampleErr == nil {
				sampleErr = err
			}
		}
		cur := d.MemStats().CurrentBytes
		switch {
		case i.Step == warm:
			gpu0, heap0 = cur, heapNow()
		case i.Step > warm && i.Step < steps && cur != gpu0: // the last step is followed by the final evaluation
			t.Fatalf("step %d: GPU buffers hold %d bytes, %d after step %d", i.Step, cur, gpu0, warm)
		}
		if i.Step == steps {
			heapEnd = heapNow()
		}
	}
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	if rep.Steps != steps || rep.Skipped != 0 {
		t.Fatalf("report: %d steps, %d skipped", rep.Steps, rep.Skipped)
	}
	growth := int64(heapEnd) - int64(heap0)
	t.Logf("%d steps: GPU %d bytes from step %d on; Go heap %d → %d bytes (%+d) between step %d and %d", steps, gpu0, warm, heap0, heapEnd, growth, warm, steps)
	if growth >= 1<<20 {
		t.Errorf("the Go heap grew by %d bytes over %d steps (bound 1 MiB)", growth, steps-warm)
	}
	path := filepath.Join(t.TempDir(), "mem.csv")
	if err := os.WriteFile(path, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	samples, err := train.ReadMemLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := steps / 20; len(samples) != want || samples[0].Step != warm || samples[0].TokensPerSec != 0 {
		t.Fatalf("%d samples (first %+v), want %d starting at step %d", len(samples), samples[0], want, warm)
	}
	for _, s := range samples {
		if (s.Step < steps && s.GPUCurrent != gpu0) || s.GPUPeak < s.GPUCurrent || s.HeapAlloc == 0 || s.Goroutines < 1 {
			t.Errorf("sample %+v", s)
		}
		if s.Step > warm && !(s.TokensPerSec > 0) {
			t.Errorf("sample %+v: no throughput", s)
		}
	}
	rows := make([]ui.MemSample, len(samples))
	for i, s := range samples {
		rows[i] = ui.MemSample(s)
	}
	fig, err := ui.PlotMemLog(rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.SavePlot(filepath.Join(t.TempDir(), "mem.png"), fig, 900, 900); err != nil {
		t.Fatal(err)
	}
}
