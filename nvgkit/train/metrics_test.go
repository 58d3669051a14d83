package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// sameFloat is bit equality, NaN equal to NaN.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// checkMetrics checks that recs hold one step record per step 1…len(losses) with the
// Trainer's own losses and the schedule's learning rate, and one eval record per evaluation
// with its values, in order.
func checkMetrics(t *testing.T, recs []train.MetricsRecord, cfg train.TrainConfig, losses []float64, evals []train.EvalPoint) {
	t.Helper()
	var steps, es []train.MetricsRecord
	for _, r := range recs {
		switch r.Kind {
		case train.MetricsStep:
			steps = append(steps, r)
		case train.MetricsEval:
			es = append(es, r)
		default:
			t.Errorf("record kind %q", r.Kind)
		}
	}
	if len(steps) != len(losses) {
		t.Fatalf("%d step records, want %d (one per step): %+v", len(steps), len(losses), steps)
	}
	for i, r := range steps {
		if r.Step != i+1 || !sameFloat(r.Loss, losses[i]) || r.LR != cfg.LRAt(i+1) || r.Skipped {
			t.Errorf("step record %d: %+v, want step %d loss %.17g lr %.17g", i, r, i+1, losses[i], cfg.LRAt(i+1))
		}
		if !(r.GradNorm > 0) || r.GradNormClipped != math.Min(r.GradNorm, cfg.ClipNorm) {
			t.Errorf("step %d: grad norm %g, clipped %g (clip %g)", r.Step, r.GradNorm, r.GradNormClipped, cfg.ClipNorm)
		}
		if !(r.TokensPerSecond > 0) || !(r.WallSeconds > 0) || r.Time.IsZero() || (i > 0 && r.WallSeconds < steps[i-1].WallSeconds) {
			t.Errorf("step %d: tokens/s %g, wall %g s, time %v", r.Step, r.TokensPerSecond, r.WallSeconds, r.Time)
		}
	}
	if len(es) != len(evals) {
		t.Fatalf("%d eval records, want %d: %+v", len(es), len(evals), es)
	}
	best := math.Inf(1)
	for i, r := range es {
		e := evals[i]
		best = math.Min(best, e.Perplexity)
		if r.Step != e.Step || !sameFloat(r.Loss, e.Loss) || !sameFloat(r.Perplexity, e.Perplexity) || r.BestPerplexity != best || !(r.TeacherPerplexity > 1) {
			t.Errorf("eval record %d: %+v, want %+v (best %g)", i, r, e, best)
		}
	}
}

// metricsTrainer returns a 4-step Trainer on the tiny model writing into a new OutDir,
// clipping at clip.
func metricsTrainer(t *testing.T, clip float64) (train.TrainConfig, *train.Trainer) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	cfg := train.TrainConfig{Steps: 4, NB: 2, T: 8, K: 4, EvalEvery: 2, EvalWindows: 2, Seed: 3, OutDir: t.TempDir(), Settings: schedule(0.02, 1, 0.1, clip)}
	tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, tr
}

// A run with OutDir writes metrics.jsonl with one line per step and per evaluation, equal to
// the Trainer's own histories, and the same lines to a writer given to AddMetricsWriter.
func TestTrainerMetrics(t *testing.T) {
	cfg, tr := metricsTrainer(t, 0.05)
	defer tr.Close()
	var buf bytes.Buffer
	tr.AddMetricsWriter(&buf)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.OutDir, train.MetricsFile)
	recs, partial, err := train.ReadMetrics(path)
	if err != nil || partial != 0 {
		t.Fatalf("ReadMetrics: %v (partial %d)", err, partial)
	}
	checkMetrics(t, recs, tr.Config, tr.Losses(), tr.Evals())
	if b, _ := os.ReadFile(path); !bytes.Equal(b, buf.Bytes()) {
		t.Errorf("the metrics writer got\n%s\nmetrics.jsonl holds\n%s", buf.Bytes(), b)
	}
	clipped := 0
	for _, r := range recs {
		if r.Kind == train.MetricsStep && r.GradNorm > cfg.ClipNorm {
			clipped++
		}
	}
	if clipped == 0 {
		t.Errorf("no step was clipped at %g: the test does not check grad_norm_clipped", cfg.ClipNorm)
	}
	steps, loss, es, ep, tppl := train.TrainingSeries(recs)
	fig, err := ui.PlotTraining(ui.TrainingCurves{Steps: steps, Loss: loss, EvalSteps: es, EvalPPL: ep, TeacherPPL: tppl})
	if err != nil || fig == nil {
		t.Errorf("PlotTraining of the metrics log: %v", err)
	}
}

// An interrupted run whose log goes on past its checkpoint (a crash after a step, before
// the next checkpoint, mid-line) is resumed: the log is cut back to the checkpoint's step
// and the resumed steps are appended, each step once.
func TestTrainerMetricsResume(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	cfg, tr := metricsTrainer(t, 1)
	if _, err := runUntil(tr, 2, nil); !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("interrupted run: %v", err)
	}
	tr.Close()
	path := filepath.Join(cfg.OutDir, train.MetricsFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// What a crash leaves: step 3 done after the checkpoint at step 2, step 4 half written.
	f.WriteString(`{"kind":"step","step":3,"loss":9,"lr":0.01,"grad_norm":1,"grad_norm_clipped":1,"tokens_per_second":1,"skipped":false,"wall_seconds":1,"time":"2026-01-01T00:00:00Z"}` + "\n")
	f.WriteString(`{"kind":"step","step":4,"lo`)
	f.Close()
	recs, partial, err := train.ReadMetrics(path)
	if err != nil || partial != len(`{"kind":"step","step":4,"lo`) || len(recs) != 5 {
		t.Fatalf("crashed log: %d records, partial %d, %v", len(recs), partial, err)
	}

	tr, err = train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, partial, err = train.ReadMetrics(path)
	if err != nil || partial != 0 {
		t.Fatalf("ReadMetrics: %v (partial %d)", err, partial)
	}
	checkMetrics(t, recs, tr.Config, tr.Losses(), tr.Evals())
}

// ReadMetrics skips an unterminated last line and reports its length; a bad complete line
// is an error naming the file and the line.
func TestReadMetricsTruncated(t *testing.T) {
	dir := t.TempDir()
	good := `{"kind":"step","step":1,"loss":null,"lr":0.1,"grad_norm":null,"grad_norm_clipped":null,"tokens_per_second":5,"skipped":true,"wall_seconds":2,"time":"2026-01-01T00:00:00Z"}` + "\n" +
		`{"kind":"eval","step":1,"loss":1.5,"perplexity":4.4816890703380645,"best_perplexity":4.4816890703380645,"best_step":1,"teacher_perplexity":2,"wall_seconds":3,"time":"2026-01-01T00:00:01Z"}` + "\n"
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recs, partial, err := train.ReadMetrics(write("crash.jsonl", good+`{"kind":"step","st`))
	if err != nil || partial != len(`{"kind":"step","st`) || len(recs) != 2 {
		t.Fatalf("truncated log: %+v, partial %d, %v", recs, partial, err)
	}
	s, e := recs[0], recs[1]
	if s.Kind != "step" || !math.IsNaN(s.Loss) || !math.IsNaN(s.GradNorm) || !s.Skipped || s.LR != 0.1 || s.TokensPerSecond != 5 || s.WallSeconds != 2 {
		t.Errorf("step record %+v", s)
	}
	if e.Kind != "eval" || e.Loss != 1.5 || e.Perplexity != 4.4816890703380645 || e.BestStep != 1 || e.TeacherPerplexity != 2 || e.Time.Second() != 1 {
		t.Errorf("eval record %+v", e)
	}
	steps, loss, es, ep, tppl := train.TrainingSeries(recs)
	if len(steps) != 1 || !math.IsNaN(loss[0]) || len(es) != 1 || ep[0] != 4.4816890703380645 || tppl != 2 {
		t.Errorf("TrainingSeries: %v %v %v %v %v", steps, loss, es, ep, tppl)
	}
	for _, bad := range []string{good[:40] + "\n" + good, `{"kind":"oops","step":1}` + "\n", "{\"kind\":\"step\",\"step\":-2}\n"} {
		p := write("bad.jsonl", bad)
		if _, _, err := train.ReadMetrics(p); err == nil || !strings.Contains(err.Error(), p+": line 1") {
			t.Errorf("%q: error %v, want one naming %s line 1", bad, err, p)
		}
	}
	if _, _, err := train.ReadMetrics(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestMetricsSignFlips: a step record's sign_flips survive the JSON round trip (a metric-only
// record writes none), and SignFlipSeries turns step records into per-layer series, with 0
// for layers a record lacks and nothing for a metric-only run.
func TestMetricsSignFlips(t *testing.T) {
	recs := []train.MetricsRecord{
		{Kind: train.MetricsStep, Step: 1, SignFlips: []int{3, 0, 7}},
		{Kind: train.MetricsEval, Step: 1, Perplexity: 9},
		{Kind: train.MetricsStep, Step: 2, SignFlips: []int{1, 2}},
		{Kind: train.MetricsStep, Step: 3},
	}
	var back []train.MetricsRecord
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "sign_flips") != (r.SignFlips != nil) {
			t.Errorf("record %s: sign_flips written when it should not be, or missing", b)
		}
		var got train.MetricsRecord
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.SignFlips) != fmt.Sprint(r.SignFlips) {
			t.Errorf("step %d: sign flips %v after the round trip, want %v", r.Step, got.SignFlips, r.SignFlips)
		}
		back = append(back, got)
	}
	steps, flips := train.SignFlipSeries(back)
	if fmt.Sprint(steps) != "[1 2]" || fmt.Sprint(flips) != "[[3 1] [0 2] [7 0]]" {
		t.Errorf("SignFlipSeries: steps %v, flips %v; want [1 2], [[3 1] [0 2] [7 0]]", steps, flips)
	}
	if s, f := train.SignFlipSeries(back[3:]); s != nil || f != nil {
		t.Errorf("metric-only records: %v, %v, want nothing", s, f)
	}
}
