package train_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

var trainFx struct {
	once           sync.Once
	student        *cmf.Model
	train, heldOut []int
	err            error
}

// trainFixture returns the tiny teacher (loaded), its 1-bit student model (2 paths) and two
// token streams: a few Go standard library files for training and one other for held-out.
func trainFixture(t *testing.T) (*gpu.Device, *nvgkit.Net, *cmf.Model, []int, []int) {
	t.Helper()
	d, m, teacher := kittest.TinyTeacher(t)
	trainFx.once.Do(func() {
		trainFx.student, _, trainFx.err = compress.Model(m, compress.Options{BitsPerWeight: 1, Paths: compress.Paths2, Seed: 1}, nil)
		if trainFx.err != nil {
			return
		}
		tok, err := tokenizer.FromJSON(tinyteacher.TokenizerJSON())
		if err != nil {
			trainFx.err = err
			return
		}
		src := filepath.Join(runtime.GOROOT(), "src")
		if trainFx.train, trainFx.err = data.TokenizeFiles(tok, []string{filepath.Join(src, "strings/strings.go"), filepath.Join(src, "sort/sort.go")}); trainFx.err != nil {
			return
		}
		trainFx.heldOut, trainFx.err = data.TokenizeFiles(tok, []string{filepath.Join(src, "bytes/buffer.go")})
	})
	if trainFx.err != nil {
		t.Fatal(trainFx.err)
	}
	return d, teacher, trainFx.student, trainFx.train, trainFx.heldOut
}

// A short run on the tiny model: the held-out perplexity goes down from the compressed
// student's towards the teacher's, the report holds the three perplexities and the loss
// history, and the best snapshot is what the student holds at the end.
func TestTrainerShortRun(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.TrainConfig{Steps: 6, NB: 4, T: 16, K: 8, EvalEvery: 3, EvalWindows: 4, Seed: 7, Settings: schedule(0.01, 1, 0.1, 1)}
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var infos []train.StepInfo
	tr.OnStep = func(i train.StepInfo) { infos = append(infos, i) }
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("teacher %.2f compressed %.2f distilled %.2f (gap closed %.3f), losses %v, evals %+v", rep.TeacherPPL, rep.CompressedPPL, rep.DistilledPPL, rep.GapClosed, rep.Loss, rep.Evals)
	if len(infos) != 6 || infos[5].Step != 6 || infos[5].Tokens != 6*4*16 || infos[2].EvalPPL == 0 || infos[1].EvalPPL != 0 {
		t.Errorf("step infos %+v", infos)
	}
	if rep.Steps != 6 || rep.Tokens != 384 || len(rep.Loss) != 6 || rep.Skipped != 0 || len(rep.Evals) != 3 {
		t.Fatalf("report %+v", rep)
	}
	if !(rep.TeacherPPL > 1 && rep.TeacherPPL < rep.DistilledPPL && rep.DistilledPPL < rep.CompressedPPL) {
		t.Errorf("perplexities teacher %g < distilled %g < compressed %g does not hold", rep.TeacherPPL, rep.DistilledPPL, rep.CompressedPPL)
	}
	if want := train.GapFraction(rep.TeacherPPL, rep.CompressedPPL, rep.DistilledPPL); rep.GapClosed != want || !(want > 0) {
		t.Errorf("gap closed %g, want %g > 0", rep.GapClosed, want)
	}
	// The training loss goes down: the mean of the last two steps is below the first step's.
	if last := (rep.Loss[4] + rep.Loss[5]) / 2; !(last < rep.Loss[0]) {
		t.Errorf("loss did not go down: %v", rep.Loss)
	}
	// The student holds the exported weights: evaluating it again gives DistilledPPL.
	_, ppl, err := tr.Evaluate(student)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(ppl-rep.DistilledPPL) > 1e-9*ppl {
		t.Errorf("student after Run: perplexity %g, report says %g (%s)", ppl, rep.DistilledPPL, rep.Exported)
	}
	layers, kinds, norms, err := tr.LayerGradNorms()
	if err != nil || len(layers) != 8 || len(kinds) < 4 || len(norms) != len(kinds) {
		t.Errorf("LayerGradNorms: %v %v %v", layers, kinds, err)
	}
}

// N steps straight and N/2 steps, an interruption (checkpoint), Resume and N/2 steps give
// the same per-step losses and evaluations, bit for bit (the straight run recomputes each
// layer in the backward, the interrupted and resumed one keeps the activations).
func TestTrainerResumeExact(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	dir := t.TempDir()
	topk := filepath.Join(dir, "topk.bin")
	// 4 steps cycle twice through 4 windows (2 per step).
	cfg := train.TrainConfig{Steps: 4, NB: 2, Windows: 4, T: 8, K: 4, EvalEvery: 2, EvalWindows: 2, Seed: 3, TopKFile: topk, Settings: schedule(0.02, 1, 0.1, 1)}
	run := func(cfg train.TrainConfig, stopAfter int) (*train.Report, error) {
		tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		return runUntil(tr, stopAfter, nil)
	}
	straight, err := run(cfg, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(topk); err != nil {
		t.Fatalf("top-k file: %v", err)
	}
	cfg.OutDir = filepath.Join(dir, "run")
	os.Mkdir(cfg.OutDir, 0o755)
	// The interrupted and resumed run keeps activations, the straight one recomputes them:
	// the two steps are bit-identical, so the trajectories must be too.
	cfg.KeepActivations = true
	half, err := run(cfg, 2)
	if !errors.Is(err, train.ErrInterrupted) || half == nil || !half.Interrupted || half.Steps != 2 {
		t.Fatalf("interrupted run: %v, %+v", err, half)
	}
	// The run's directory is moved before resuming: the resumed run must write into the
	// directory it was resumed from, never the one recorded in the checkpoint.
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(cfg.OutDir, moved); err != nil {
		t.Fatal(err)
	}
	tr, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, moved)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Step() != 2 {
		t.Fatalf("resumed at step %d, want 2", tr.Step())
	}
	if tr.Config.OutDir != moved {
		t.Errorf("resumed OutDir %q, want the checkpoint's directory %q", tr.Config.OutDir, moved)
	}
	resumed, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.OutDir); !os.IsNotExist(err) {
		t.Errorf("the resumed run wrote into the old directory %s (stat: %v)", cfg.OutDir, err)
	}
	if ck, _, err := train.LatestCheckpoint(moved, nil); err != nil {
		t.Errorf("checkpoint in the moved directory: %v", err)
	} else if ck.Meta.Config.OutDir != moved {
		t.Errorf("checkpoint in the moved directory records OutDir %q, want %q", ck.Meta.Config.OutDir, moved)
	}
	if len(resumed.Loss) != 4 || len(resumed.Evals) != len(straight.Evals) {
		t.Fatalf("resumed report %+v", resumed)
	}
	for i := range straight.Loss {
		if straight.Loss[i] != resumed.Loss[i] {
			t.Errorf("step %d: loss %.17g straight, %.17g resumed", i+1, straight.Loss[i], resumed.Loss[i])
		}
	}
	for i := range straight.Evals {
		if straight.Evals[i] != resumed.Evals[i] {
			t.Errorf("eval %d: %+v straight, %+v resumed", i, straight.Evals[i], resumed.Evals[i])
		}
	}
	if straight.DistilledPPL != resumed.DistilledPPL || straight.Exported != resumed.Exported {
		t.Errorf("distilled %g (%s) straight, %g (%s) resumed", straight.DistilledPPL, straight.Exported, resumed.DistilledPPL, resumed.Exported)
	}
	t.Logf("losses %v, evals %+v", straight.Loss, straight.Evals)

	// A notebook interrupt: the context is cancelled from another goroutine while steps
	// run (here: started after step 1, certainly done before step 3 begins, landing
	// before, during or after step 2). The run stops between steps with a valid
	// checkpoint, and resuming from it gives the same losses as the straight run.
	cfg.OutDir = filepath.Join(dir, "run2")
	os.Mkdir(cfg.OutDir, 0o755)
	tr2, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelled := make(chan struct{})
	tr2.OnStep = func(i train.StepInfo) {
		switch i.Step {
		case 1:
			go func() { cancel(); close(cancelled) }()
		case 2:
			<-cancelled
		}
	}
	if rep, err := tr2.Run(ctx); !errors.Is(err, train.ErrInterrupted) || rep == nil || rep.Steps < 1 || rep.Steps > 2 {
		t.Fatalf("run cancelled from a goroutine: %v, %+v", err, rep)
	}
	ck, _, err := train.LatestCheckpoint(cfg.OutDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr3, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr3.Close()
	if tr3.Step() != ck.Meta.Step {
		t.Fatalf("resumed at step %d, checkpoint at %d", tr3.Step(), ck.Meta.Step)
	}
	again, err := tr3.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range straight.Loss {
		if straight.Loss[i] != again.Loss[i] {
			t.Errorf("step %d: loss %.17g straight, %.17g after a goroutine cancel at step %d and resume", i+1, straight.Loss[i], again.Loss[i], ck.Meta.Step)
		}
	}
}

// One step whose loss is NaN (a norm gain poisoned after step 1 and repaired after step 2,
// standing in for a transient fault) is skipped and counted; the metric and the Adam state
// are bit for bit what they were after step 1 (the NaN does not reach the metric), and the
// steps after it train normally (finite losses, updated and finite parameters).
func TestTrainerSkipsOneNaNStep(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.TrainConfig{Steps: 4, NB: 2, T: 8, K: 4, EvalEvery: 0, EvalWindows: 1, KeepFinal: true, Seed: 5, Settings: schedule(0.02, 0, 0.1, 1)}
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	const gain = "model.layers.1.post_attention_layernorm.weight"
	var clean *nvgkit.TrainableSnapshot
	var after1 map[string][]float32
	var failure error
	tr.OnStep = func(i train.StepInfo) {
		if failure != nil {
			return
		}
		switch i.Step {
		case 1:
			if after1, failure = nvgkit.Params(student); failure != nil {
				return
			}
			if clean, failure = nvgkit.Snapshot(student); failure != nil {
				return
			}
			var bad *nvgkit.TrainableSnapshot
			if bad, failure = nvgkit.Snapshot(student); failure != nil {
				return
			}
			bad.Param(gain)[3] = float32(math.NaN())
			failure = nvgkit.Restore(student, bad)
		case 2:
			if !i.Skipped || i.SkippedTotal != 1 {
				failure = fmt.Errorf("step 2 not skipped: %+v", i)
				return
			}
			var now map[string][]float32
			if now, failure = nvgkit.Params(student); failure != nil {
				return
			}
			for name, v := range after1 {
				for j := range v {
					want := math.Float32bits(v[j])
					if name == gain && j == 3 {
						want = math.Float32bits(float32(math.NaN()))
					}
					if got := math.Float32bits(now[name][j]); got != want && !(name == gain && j == 3 && math.IsNaN(float64(now[name][j]))) {
						failure = fmt.Errorf("%s[%d] changed by the skipped step: %g → %g", name, j, v[j], now[name][j])
						return
					}
				}
			}
			failure = nvgkit.Restore(student, clean)
		}
	}
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if failure != nil {
		t.Fatal(failure)
	}
	if rep.Skipped != 1 || len(rep.Loss) != 4 || !math.IsNaN(rep.Loss[1]) {
		t.Fatalf("skipped %d, losses %v; want step 2 alone skipped", rep.Skipped, rep.Loss)
	}
	for _, s := range []int{0, 2, 3} {
		if !finite(rep.Loss[s]) {
			t.Errorf("step %d: loss %g", s+1, rep.Loss[s])
		}
	}
	final, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for name, v := range final {
		for j, x := range v {
			if !finite(float64(x)) {
				t.Fatalf("%s[%d] = %g after the run", name, j, x)
			}
			if x != after1[name][j] {
				changed++
			}
		}
	}
	if changed == 0 {
		t.Error("steps 3 and 4 changed no parameter")
	}
	t.Logf("losses %v; %d values changed after the skipped step", rep.Loss, changed)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// A student whose loss is not finite (a NaN norm gain) has every step skipped: the
// gradients are cleared, nothing is updated, the steps are counted and reported, and the
// checkpoint (with its NaN losses and evaluations) is still written and read back.
func TestTrainerSkipsNonFinite(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	snap, err := nvgkit.Snapshot(student)
	if err != nil {
		t.Fatal(err)
	}
	const gain = "model.layers.0.input_layernorm.weight"
	snap.Param(gain)[0] = float32(math.NaN())
	if err := nvgkit.Restore(student, snap); err != nil {
		t.Fatal(err)
	}
	before, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := train.TrainConfig{Steps: 2, NB: 2, T: 8, K: 4, EvalEvery: 0, EvalWindows: 1, OutDir: out, Seed: 1, Settings: schedule(0.02, 0, 0.1, 1)}
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var skipped []bool
	tr.OnStep = func(i train.StepInfo) { skipped = append(skipped, i.Skipped && i.SkippedTotal == i.Step) }
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Skipped != 2 || len(skipped) != 2 || !skipped[0] || !skipped[1] || !math.IsNaN(rep.Loss[0]) || !math.IsNaN(rep.Loss[1]) {
		t.Errorf("skipped %d, infos %v, losses %v", rep.Skipped, skipped, rep.Loss)
	}
	after, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range before {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(after[name][i]) {
				t.Fatalf("%s[%d] changed from %g to %g by a skipped step", name, i, v[i], after[name][i])
			}
		}
	}
	ck, _, err := train.LatestCheckpoint(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Meta.Skipped != 2 || ck.Meta.Step != 2 || ck.Meta.AdamStep != 0 || len(ck.Meta.Evals) != 2 || !math.IsNaN(ck.Meta.Evals[1].Perplexity) {
		t.Errorf("checkpoint meta %+v", ck.Meta)
	}
}

// Extending a finished run (Checkpoint.Extend, as nvg distill --resume DIR --steps N does)
// gives, bit for bit, the losses and weights of a run planned from the start with that many
// steps and the original schedule span (ScheduleSteps); the extra steps run at the floor
// learning rate.
func TestTrainerExtendExact(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	dir := t.TempDir()
	base := train.TrainConfig{Steps: 2, NB: 2, Windows: 4, T: 8, K: 4, Keep: 2, EvalEvery: 1, EvalWindows: 2, Seed: 3,
		TopKFile: filepath.Join(dir, "topk.bin"), KeepFinal: true, Settings: schedule(0.02, 1, 0.1, 0)} // final weights are compared
	planned := base
	planned.Steps, planned.ScheduleSteps = 4, 2
	student := kittest.LoadStudent(t, d, sm)
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, planned)
	if err != nil {
		t.Fatal(err)
	}
	var lrs []float64
	tr.OnStep = func(i train.StepInfo) { lrs = append(lrs, i.LR) }
	want, err := tr.Run(context.Background())
	tr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if floor := 0.1 * 0.02; len(lrs) != 4 || lrs[2] != floor || lrs[3] != floor {
		t.Errorf("learning rates %v: steps 3 and 4 want the floor %g", lrs, floor)
	}
	wantParams, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}

	base.OutDir = filepath.Join(dir, "run")
	os.Mkdir(base.OutDir, 0o755)
	tr, err = train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	ck, path, err := train.LatestCheckpoint(base.OutDir, nil)
	if err != nil || ck.Meta.Step != 2 {
		t.Fatalf("checkpoint of the finished run: %v, %v", ck, err)
	}
	if err := ck.Extend(4); err != nil {
		t.Fatal(err)
	}
	ext := kittest.LoadStudent(t, d, sm)
	tr, err = train.ResumeCheckpoint(teacher, ext, trainIDs, heldOut, ck, path)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	got, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Loss) != 4 || got.Steps != 4 {
		t.Fatalf("extended report %+v", got)
	}
	for i := range want.Loss {
		if want.Loss[i] != got.Loss[i] {
			t.Errorf("step %d: loss %.17g planned, %.17g extended", i+1, want.Loss[i], got.Loss[i])
		}
	}
	gotParams, err := nvgkit.Params(ext)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range wantParams {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(gotParams[name][i]) {
				t.Fatalf("%s[%d]: %g planned, %g extended", name, i, v[i], gotParams[name][i])
			}
		}
	}
	// Keep (default 2): the latest two checkpoints are left.
	if ps, err := train.CheckpointPaths(base.OutDir); err != nil || len(ps) != 2 || filepath.Base(ps[0]) != train.CheckpointName(4) {
		t.Errorf("checkpoints left %v, %v", ps, err)
	}
	// The top-k file is keyed by the teacher too: one made for another TeacherID is refused.
	other, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, planned)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.TeacherID = "another teacher"
	if err := other.Prepare(context.Background()); err == nil || !strings.Contains(err.Error(), "another teacher") || !strings.Contains(err.Error(), planned.TopKFile) {
		t.Errorf("top-k file of another teacher: %v", err)
	}
}

// ActivationBudget decides what the student's step keeps (TrainConfig.ActivationBudget's
// rule, said by Trainer.Activations), and every choice trains bit-identically: two steps
// with all activations and the BLR outputs c kept, with t1 only, and recomputed give the
// same losses and held-out perplexity, bit for bit.
func TestTrainerActivationBudget(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	base := train.TrainConfig{Steps: 2, NB: 2, T: 8, K: 4, EvalEvery: 0, EvalWindows: 2, Seed: 3, Settings: schedule(0.02, 1, 0.1, 1)}
	student := kittest.LoadStudent(t, d, sm)
	acts := nvgkit.KeptActivationBytes(student, base.NB, base.T)
	c := nvgkit.KeptBLROutputBytes(student, base.NB, base.T)
	if acts == 0 || c == 0 {
		t.Fatalf("KeptActivationBytes %d, KeptBLROutputBytes %d: want both > 0", acts, c)
	}
	per := nvgkit.KeptActivationLayerBytes(student, base.NB, base.T)
	if len(per) < 2 || slices.Min(per) == 0 {
		t.Fatalf("KeptActivationLayerBytes = %v: want ≥ 2 layers of > 0 bytes", per)
	}
	last := len(per) - 1
	var want *train.Report
	for _, tc := range []struct {
		name   string
		budget int64
		keep   bool
		says   string
	}{
		{"recompute", 0, false, "recomputed per layer"},
		{"budget fits all", int64(acts + c), false, "with every BLR path's c"},
		{"budget fits t1", int64(acts + c - 1), false, "within the budget"},
		{"budget fits the last layer", int64(per[last]), false, fmt.Sprintf("kept for 1 of %d layers (%d: ", len(per), last)},
		{"budget fits all but the first layer", int64(acts - per[0]), false, fmt.Sprintf("kept for %d of %d layers (%s: ", len(per)-1, len(per), map[bool]string{true: "1", false: fmt.Sprintf("1–%d", last)}[last == 1])},
		{"budget too small", int64(slices.Min(per) - 1), false, "recomputed per layer"},
		{"KeepActivations", 0, true, "KeepActivations"},
		{"KeepActivations, budget fits all", 1 << 30, true, "with every BLR path's c"},
	} {
		cfg := base
		cfg.ActivationBudget, cfg.KeepActivations = tc.budget, tc.keep
		tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.Contains(tr.Activations(), tc.says) {
			t.Errorf("%s: Activations() = %q, want it to contain %q", tc.name, tr.Activations(), tc.says)
		}
		rep, err := tr.Run(context.Background())
		tr.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want == nil {
			want = rep
			continue
		}
		for i := range want.Loss {
			if math.Float64bits(rep.Loss[i]) != math.Float64bits(want.Loss[i]) {
				t.Errorf("%s: step %d loss %.17g, recomputing run %.17g", tc.name, i+1, rep.Loss[i], want.Loss[i])
			}
		}
		if math.Float64bits(rep.DistilledPPL) != math.Float64bits(want.DistilledPPL) {
			t.Errorf("%s: perplexity %.17g, recomputing run %.17g", tc.name, rep.DistilledPPL, want.DistilledPPL)
		}
	}
	bad := base
	bad.ActivationBudget = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "ActivationBudget") {
		t.Errorf("ActivationBudget −1: Validate = %v, want an error naming it", err)
	}
}

// runUntil runs tr, interrupting it after step stop (a step it never reaches: to the end);
// onStep, when not nil, sees every step first.
func runUntil(tr *train.Trainer, stop int, onStep func(train.StepInfo)) (*train.Report, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.OnStep = func(i train.StepInfo) {
		if onStep != nil {
			onStep(i)
		}
		if i.Step == stop {
			cancel()
		}
	}
	return tr.Run(ctx)
}
