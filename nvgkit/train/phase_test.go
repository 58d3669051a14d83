package train_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestPhases checks a run's phase plan: one KL phase without a finish; with FinishSteps the
// last steps are the finish and Steps counts both; PhaseAt of every step, of step 0 and past
// the plan; Validate's ranges; and the report's per-phase steps and tokens.
func TestPhases(t *testing.T) {
	c := train.DefaultTrainConfig()
	if got, want := c.Phases(), []train.Phase{{Kind: train.PhaseKL, First: 1, Last: 24}}; !reflect.DeepEqual(got, want) {
		t.Errorf("default phases %+v, want %+v", got, want)
	}
	c.Steps, c.FinishSteps, c.TrainSigns = 10, 3, true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []train.Phase{{Kind: train.PhaseKL, First: 1, Last: 7}, {Kind: train.PhaseFinish, First: 8, Last: 10}}
	if got := c.Phases(); !reflect.DeepEqual(got, want) {
		t.Errorf("phases %+v, want %+v", got, want)
	}
	for s, kind := range map[int]string{0: "kl", 1: "kl", 7: "kl", 8: "finish", 10: "finish", 12: "finish"} {
		if got := c.PhaseAt(s).Kind; got != kind {
			t.Errorf("PhaseAt(%d) = %s, want %s", s, got, kind)
		}
	}
	for _, bad := range []struct {
		finish int
		signs  bool
		want   string
	}{{-1, true, "FinishSteps = -1"}, {10, true, "fewer than Steps = 10"}, {2, false, "without TrainSigns"}} {
		b := c
		b.FinishSteps, b.TrainSigns = bad.finish, bad.signs
		var ce *train.TrainConfigError
		if err := b.Validate(); !errors.As(err, &ce) || ce.Field != "FinishSteps" || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("FinishSteps %d, signs %v: %v, want an error naming FinishSteps and %q", bad.finish, bad.signs, err, bad.want)
		}
	}
}

// TestCheckpointExtendPhases: extending a run before its finish keeps FinishSteps (the KL
// phase grows); extending one in its finish lengthens the finish; the steps done keep their
// phases either way.
func TestCheckpointExtendPhases(t *testing.T) {
	cfg := train.DefaultTrainConfig()
	cfg.Steps, cfg.FinishSteps, cfg.TrainSigns = 10, 4, true
	for _, c := range []struct {
		step, finish int
	}{{3, 4}, {6, 4}, {7, 9}, {10, 9}} {
		ck := &train.Checkpoint{Meta: train.CheckpointMeta{Config: cfg, Step: c.step}}
		if err := ck.Extend(15); err != nil {
			t.Fatal(err)
		}
		ext := ck.Meta.Config
		if ext.Steps != 15 || ext.FinishSteps != c.finish {
			t.Errorf("extended at step %d: steps %d, finish %d; want 15, %d", c.step, ext.Steps, ext.FinishSteps, c.finish)
		}
		for s := 1; s <= c.step; s++ {
			if a, b := cfg.PhaseAt(s), ext.PhaseAt(s); a.Kind != b.Kind {
				t.Errorf("extended at step %d: step %d was %s, is %s", c.step, s, a.Kind, b.Kind)
			}
		}
	}
}

// TestTrainerFinishResumeExact: a TrainSigns run of 4 steps whose last 2 are the scale-only
// finish, straight and interrupted after step 2 (the phase boundary) or step 3 (mid-finish)
// and resumed, ends with byte-identical checkpoints. Signs flip in the KL steps and never in
// the finish: the sign bits and scores after step 2 are those after step 4, while the metric
// moved. The metrics log and the report record each step's phase and the phases' tokens.
func TestTrainerFinishResumeExact(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	dir := t.TempDir()
	cfg := train.TrainConfig{Steps: 4, FinishSteps: 2, NB: 1, T: 8, K: 4, EvalWindows: 1, Seed: 3, CheckpointEvery: 1, TrainSigns: true,
		Signs: nvgkit.SignConfig{Alpha: 8, Beta: 0.9, Tau: 16, MaxFlipFrac: 0.01, Seed: 5}, Settings: schedule(0.02, 1, 0, 1)}
	var infos []train.StepInfo
	run := func(cfg train.TrainConfig, stopAfter int) (*train.Report, error) {
		tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		return runUntil(tr, stopAfter, func(i train.StepInfo) { infos = append(infos, i) })
	}
	straight := filepath.Join(dir, "straight")
	os.Mkdir(straight, 0o755)
	cfg.OutDir, cfg.Keep = straight, 0
	rep, err := run(cfg, -1)
	if err != nil {
		t.Fatal(err)
	}
	flips := [5]int{}
	for _, i := range infos {
		for _, f := range i.SignFlips {
			flips[i.Step] += f
		}
		if want := cfg.PhaseAt(i.Step).Kind; i.Phase != want || (i.Phase == train.PhaseFinish) != (i.SignFlips == nil) {
			t.Errorf("step %d: phase %q (want %q), flips %v (nil exactly in the finish)", i.Step, i.Phase, want, i.SignFlips)
		}
	}
	if flips[1]+flips[2] == 0 {
		t.Fatal("no sign flipped in the KL steps: the test's knobs no longer make signs flip")
	}
	if want := []train.PhaseReport{{Phase: train.Phase{Kind: "kl", First: 1, Last: 2}, StepsDone: 2, Tokens: 16},
		{Phase: train.Phase{Kind: "finish", First: 3, Last: 4}, StepsDone: 2, Tokens: 16}}; !reflect.DeepEqual(rep.Phases, want) || rep.Tokens != 32 {
		t.Errorf("report phases %+v, tokens %d; want %+v, 32", rep.Phases, rep.Tokens, want)
	}
	recs, _, err := train.ReadMetrics(filepath.Join(straight, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if want := cfg.PhaseAt(r.Step).Kind; r.Phase != want {
			t.Errorf("metrics %s record of step %d: phase %q, want %q", r.Kind, r.Step, r.Phase, want)
		}
	}
	if got := train.PhaseSeries(recs); len(got) != 2 || got[0].Last != 2 || got[1].First != 3 || got[1].Last != 4 {
		t.Errorf("PhaseSeries %+v", got)
	}
	ck := func(dir string, step int) *train.Checkpoint {
		c, err := train.LoadCheckpoint(filepath.Join(dir, train.CheckpointName(step)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The finish froze the signs and their scores, and trained the metric.
	at2, at4 := ck(straight, 2), ck(straight, 4)
	moved := 0
	for name, v2 := range at2.Tensors {
		v4 := at4.Tensors[name]
		same := len(v2) == len(v4)
		for i := 0; same && i < len(v2); i++ {
			same = math.Float32bits(v2[i]) == math.Float32bits(v4[i])
		}
		switch {
		case strings.HasPrefix(name, "state/signs/") || strings.HasPrefix(name, "state/score/"):
			if !same {
				t.Errorf("%s changed during the finish", name)
			}
		case strings.HasPrefix(name, "state/param/") && !same:
			moved++
		}
	}
	if moved == 0 {
		t.Error("no trained vector moved during the finish")
	}
	for _, stop := range []int{2, 3} {
		out := filepath.Join(dir, "resumed", string(rune('0'+stop)))
		os.MkdirAll(out, 0o755)
		cfg.OutDir = out
		if _, err := run(cfg, stop); !errors.Is(err, train.ErrInterrupted) {
			t.Fatalf("run interrupted after step %d: %v", stop, err)
		}
		tr, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		tr.Close()
		a, b := ck(straight, 4), ck(out, 4)
		if len(a.Tensors) != len(b.Tensors) {
			t.Fatalf("resumed after step %d: %d tensors, straight %d", stop, len(b.Tensors), len(a.Tensors))
		}
		for name, va := range a.Tensors {
			vb := b.Tensors[name]
			for i := range va {
				if i >= len(vb) || math.Float32bits(va[i]) != math.Float32bits(vb[i]) {
					t.Fatalf("resumed after step %d: %s[%d] differs from the straight run's", stop, name, i)
				}
			}
		}
	}
}

// A TrainSigns Lab whose last 2 of 4 steps are the scale-only finish steps as the Trainer
// does, bit for bit, through the phase boundary in one Step call: losses, gradient norms,
// flips per layer (none in the finish: nil, and no sign or score changes there), the
// captured sign gradient and scores of the watched matrix after every step, and at the end
// every matrix's sign bits and every trained value. Info.Phases is the plan, every StepStats
// names its phase and History.PhaseSpans gives the phases back.
func TestLabPhasesMatchTrainer(t *testing.T) {
	s := signSetup(t)
	s.Train.FinishSteps = 2
	lab := newLab(t)
	info, err := lab.Setup(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []session.Phase{{Kind: "kl", First: 1, Last: 2}, {Kind: "finish", First: 3, Last: 4}}
	if !reflect.DeepEqual(info.Phases, want) {
		t.Errorf("Info.Phases %+v, want %+v", info.Phases, want)
	}
	name, _ := paddedSign(t, lab)
	ref := runSignReferenceOf(t, name, s)
	if len(ref.infos) != 4 || ref.infos[2].SignFlips != nil || ref.infos[0].SignFlips == nil {
		t.Fatalf("the reference's steps %+v: want flips in the KL steps only", ref.infos)
	}
	if err := lab.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	var scores [][]int8
	var grads [][]float32
	sts, err := lab.Step(4, session.PreOptimizer(func(l session.Lab, _ session.StepStats) error {
		g, err := l.SignGrad(name)
		grads = append(grads, g)
		return err
	}), session.OnProgress(func(session.Progress) {
		sc, err := lab.SignScores(name)
		if err != nil {
			t.Error(err)
		}
		scores = append(scores, sc)
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sts {
		in := ref.infos[i]
		if st.Phase != in.Phase || !same64(st.Loss, ref.rep.Loss[i]) || !same64(st.GradNorm, in.GradNorm) || !slices.Equal(st.SignFlips, in.SignFlips) ||
			(st.SignFlips == nil) != (in.SignFlips == nil) {
			t.Errorf("step %d: phase %s loss %v norm %v flips %v; Trainer %s %v %v %v", i+1, st.Phase, st.Loss, st.GradNorm, st.SignFlips, in.Phase, ref.rep.Loss[i], in.GradNorm, in.SignFlips)
		}
		if !sameF32(grads[i], ref.grads[i]) || !slices.Equal(scores[i], ref.scores[i]) {
			t.Errorf("step %d: the sign gradient or scores of %s differ from the Trainer's", i+1, name)
		}
	}
	if !slices.Equal(scores[1], scores[3]) {
		t.Errorf("the scores of %s changed during the finish", name)
	}
	names, err := lab.SignNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if b, err := lab.Signs(n); err != nil || !bytes.Equal(b, ref.bits[n]) {
			t.Errorf("the sign bits of %s differ from the Trainer's after 4 steps (%v)", n, err)
		}
	}
	sameVecs(t, "trained values after the phases", params(t, lab), ref.params)
	h, err := lab.History()
	if err != nil {
		t.Fatal(err)
	}
	if got := h.PhaseSpans(); !reflect.DeepEqual(got, want) {
		t.Errorf("History.PhaseSpans %+v, want %+v", got, want)
	}
}
