package nvgkit_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
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
	d, m, teacher := tinyTeacher(t)
	trainFx.once.Do(func() {
		trainFx.student, _, trainFx.err = nvgkit.Compress(m, cmf.CompressOptions{BitsPerWeight: 1, Paths: cmf.Paths2, Seed: 1})
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

func loadStudent(t *testing.T, d *gpu.Device, m *cmf.Model) *nvgkit.Net {
	t.Helper()
	s, err := nvgkit.LoadNet(d, m, nvgkit.Student)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Release)
	return s
}

// A short run on the tiny model: the held-out perplexity goes down from the compressed
// student's towards the teacher's, the report holds the three perplexities and the loss
// history, and the best snapshot is what the student holds at the end.
func TestTrainerShortRun(t *testing.T) {
	d, teacher, sm, train, heldOut := trainFixture(t)
	student := loadStudent(t, d, sm)
	cfg := nvgkit.TrainConfig{Steps: 6, NB: 4, T: 16, K: 8, LR: 0.01, Warmup: 1, EvalEvery: 3, EvalWindows: 4, Seed: 7}
	tr, err := nvgkit.NewTrainer(teacher, student, train, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var infos []nvgkit.StepInfo
	tr.OnStep = func(i nvgkit.StepInfo) { infos = append(infos, i) }
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
	if want := nvgkit.GapFraction(rep.TeacherPPL, rep.CompressedPPL, rep.DistilledPPL); rep.GapClosed != want || !(want > 0) {
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
// the same per-step losses and evaluations, bit for bit.
func TestTrainerResumeExact(t *testing.T) {
	d, teacher, sm, train, heldOut := trainFixture(t)
	dir := t.TempDir()
	topk := filepath.Join(dir, "topk.bin")
	// 4 steps cycle twice through 4 windows (2 per step).
	cfg := nvgkit.TrainConfig{Steps: 4, NB: 2, Windows: 4, T: 8, K: 4, LR: 0.02, Warmup: 1, EvalEvery: 2, EvalWindows: 2, Seed: 3, TopKFile: topk}
	run := func(cfg nvgkit.TrainConfig, stopAfter int) (*nvgkit.Report, error) {
		tr, err := nvgkit.NewTrainer(teacher, loadStudent(t, d, sm), train, heldOut, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tr.OnStep = func(i nvgkit.StepInfo) {
			if i.Step == stopAfter {
				cancel()
			}
		}
		return tr.Run(ctx)
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
	half, err := run(cfg, 2)
	if !errors.Is(err, nvgkit.ErrInterrupted) || half == nil || !half.Interrupted || half.Steps != 2 {
		t.Fatalf("interrupted run: %v, %+v", err, half)
	}
	tr, err := nvgkit.Resume(teacher, loadStudent(t, d, sm), train, heldOut, cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Step() != 2 {
		t.Fatalf("resumed at step %d, want 2", tr.Step())
	}
	resumed, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
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
}

// A student whose loss is not finite (a NaN norm gain) has every step skipped: the
// gradients are cleared, nothing is updated, the steps are counted and reported, and the
// checkpoint (with its NaN losses and evaluations) is still written and read back.
func TestTrainerSkipsNonFinite(t *testing.T) {
	d, teacher, sm, train, heldOut := trainFixture(t)
	student := loadStudent(t, d, sm)
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
	cfg := nvgkit.TrainConfig{Steps: 2, NB: 2, T: 8, K: 4, LR: 0.02, Warmup: -1, EvalEvery: -1, EvalWindows: 1, OutDir: out}
	tr, err := nvgkit.NewTrainer(teacher, student, train, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var skipped []bool
	tr.OnStep = func(i nvgkit.StepInfo) { skipped = append(skipped, i.Skipped && i.SkippedTotal == i.Step) }
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
	ck, err := nvgkit.LoadCheckpoint(filepath.Join(out, nvgkit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if ck.Meta.Skipped != 2 || ck.Meta.Step != 2 || ck.Meta.AdamStep != 0 || len(ck.Meta.Evals) != 2 || !math.IsNaN(ck.Meta.Evals[1].Perplexity) {
		t.Errorf("checkpoint meta %+v", ck.Meta)
	}
}
