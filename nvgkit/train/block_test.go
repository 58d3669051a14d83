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
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestBlockPhases checks the plan of a run with a block-wise reconstruction phase: one block
// phase per decoder layer of BlockSteps steps, then the KL phase and the finish, Steps
// counting them all; PhaseAt; the learning rates (each layer's steps a cosine from LR to
// MinLRFrac·LR without warm-up, the KL schedule starting after the block phase, both from
// the schedule's formula); Validate's ranges, naming BlockSteps; the JSON of the phases (the
// layer of block phases only, layer 0 included) and of a block step's metrics record.
func TestBlockPhases(t *testing.T) {
	c := train.DefaultTrainConfig()
	c.Steps, c.BlockSteps, c.BlockLayers, c.FinishSteps, c.TrainSigns = 12, 2, 3, 2, true
	c.Warmup, c.MinLRFrac = 2, 0.1
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []train.Phase{{Kind: "block", Layer: 0, First: 1, Last: 2}, {Kind: "block", Layer: 1, First: 3, Last: 4},
		{Kind: "block", Layer: 2, First: 5, Last: 6}, {Kind: "kl", First: 7, Last: 10}, {Kind: "finish", First: 11, Last: 12}}
	if got := c.Phases(); !reflect.DeepEqual(got, want) {
		t.Errorf("phases %+v, want %+v", got, want)
	}
	for s, w := range map[int]string{0: "block 0", 1: "block 0", 2: "block 0", 3: "block 1", 6: "block 2", 7: "kl", 11: "finish", 13: "finish"} {
		if got := c.PhaseAt(s).Name(); got != w {
			t.Errorf("PhaseAt(%d) is %s, want %s", s, got, w)
		}
	}
	f, lr := c.MinLRFrac, c.LR
	cosine := func(j, n int) float64 { return f + (1-f)*0.5*(1+math.Cos(math.Pi*float64(j)/float64(n))) }
	for s := 1; s <= 12; s++ {
		var want float64
		if s <= 6 {
			want = lr * cosine((s-1)%2, 2)
		} else {
			k := s - 6 // the KL schedule's step, over 12 − 6 steps, after a 2-step warm-up
			want = lr * math.Min(1, float64(k)/2) * cosine(k, 6)
		}
		if got := c.LRAt(s); math.Abs(got-want) > 1e-15 {
			t.Errorf("LRAt(%d) = %.17g, want %.17g", s, got, want)
		}
	}
	if got := c.LRAt(1); got != lr {
		t.Errorf("the first step of a block phase runs at %g, want LR = %g", got, lr)
	}

	for _, bad := range []struct {
		block, layers, finish int
		want                  string
	}{
		{-1, 3, 2, "BlockSteps = -1, want ≥ 0"},
		{4, 3, 2, "BlockSteps = 4, want ≤ 3 with Steps = 12, FinishSteps = 2 and 3 decoder layers"},
		{10, 0, 2, "BlockSteps = 10, want ≤ 9 with Steps = 12, FinishSteps = 2 and at least one decoder layer"},
		{2, -1, 2, "BlockLayers = -1"},
	} {
		b := c
		b.BlockSteps, b.BlockLayers, b.FinishSteps = bad.block, bad.layers, bad.finish
		var ce *train.TrainConfigError
		if err := b.Validate(); !errors.As(err, &ce) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("BlockSteps %d, layers %d: %v, want an error containing %q", bad.block, bad.layers, err, bad.want)
		}
	}
	ok := c
	ok.BlockSteps, ok.FinishSteps = 3, 2 // 9 block steps, 1 KL, 2 finish
	if err := ok.Validate(); err != nil {
		t.Errorf("a budget that leaves one KL step: %v", err)
	}
	unknown := c
	unknown.BlockLayers = 0 // not resolved by a Trainer yet: no block phase in the plan
	if got := unknown.Phases(); len(got) != 2 || got[0].Kind != "kl" || got[0].First != 1 {
		t.Errorf("phases before the layers are known: %+v", got)
	}

	b, err := json.Marshal([]train.PhaseReport{{Phase: want[0], StepsDone: 2, Tokens: 512}, {Phase: want[3], StepsDone: 1, Tokens: 256}})
	if err != nil {
		t.Fatal(err)
	}
	if w := `[{"kind":"block","layer":0,"first_step":1,"last_step":2,"steps_done":2,"tokens":512},{"kind":"kl","first_step":7,"last_step":10,"steps_done":1,"tokens":256}]`; string(b) != w {
		t.Errorf("phase reports as JSON:\n%s\nwant\n%s", b, w)
	}
	var back []train.PhaseReport
	if err := json.Unmarshal(b, &back); err != nil || back[0].Phase != want[0] || back[1].Phase != want[3] || back[0].Tokens != 512 {
		t.Errorf("read back %+v, %v", back, err)
	}
	rec := train.MetricsRecord{Kind: train.MetricsStep, Step: 3, Phase: "block", Layer: 1, Loss: 0.5}
	if b, err = json.Marshal(rec); err != nil || !strings.Contains(string(b), `"phase":"block","layer":1,`) {
		t.Errorf("a block step's record %s (%v)", b, err)
	}
	var r train.MetricsRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Layer != 1 || r.Phase != "block" {
		t.Errorf("read back %+v, %v", r, err)
	}
	kl := train.MetricsRecord{Kind: train.MetricsEval, Step: 8, Phase: "kl", Perplexity: 9}
	if b, err = json.Marshal(kl); err != nil || strings.Contains(string(b), "layer") {
		t.Errorf("a KL record %s (%v): no layer", b, err)
	}
	h := session.History{Steps: []session.StepStats{{Step: 1, Phase: "block"}, {Step: 2, Phase: "block"}, {Step: 3, Phase: "block", Layer: 1},
		{Step: 4, Phase: "kl"}}}
	if got, w := h.PhaseSpans(), []session.Phase{{Kind: "block", First: 1, Last: 2}, {Kind: "block", Layer: 1, First: 3, Last: 3}, {Kind: "kl", First: 4, Last: 4}}; !reflect.DeepEqual(got, w) {
		t.Errorf("PhaseSpans %+v, want %+v", got, w)
	}
}

// TestTrainerBlockPhase runs the block-wise reconstruction on the tiny model (8 layers, 2
// steps each, then one KL step) with sign learning, the top-k in a file and a checkpoint
// after every step:
//   - every step records its phase and layer (StepInfo, metrics.jsonl), the report its phases;
//   - a block step of layer l moves layer l's values and signs alone (the checkpoints before
//     and after it), and flips signs of layer l alone (the default sign knobs flip some in
//     every layer); after each layer's last step the optimizer is fresh (Adam moments, scores
//     and AdamStep zero);
//   - the phase lowers every layer's reconstruction error on held-out windows: the float64
//     host reference (host.Net.BlockLoss of the student before and after the phase, against
//     the host teacher's layer outputs), not the code under test, measures it;
//   - a run interrupted mid-phase (after step 3) or at the block → KL boundary (step 16) and
//     resumed — the top-k then read from its file and the block windows' teacher states taken
//     in a pass of their own — ends with checkpoints identical bit for bit to the straight
//     run's;
//   - two micro-batches give the block steps' losses to f32 rounding.
func TestTrainerBlockPhase(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	L := teacher.Config.NumHiddenLayers
	dir := t.TempDir()
	cfg := train.TrainConfig{Steps: 2*L + 1, BlockSteps: 2, NB: 2, T: 16, K: 8, EvalWindows: 2, Seed: 3, CheckpointEvery: 1, Keep: 0,
		TrainSigns: true, Settings: schedule(0.02, 1, 0.1, 1)}
	hostTeacher, err := host.Load(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	before, err := host.Load(sm)
	if err != nil {
		t.Fatal(err)
	}
	var after *host.Net
	var infos []train.StepInfo
	var held [][]int
	run := func(cfg train.TrainConfig, stop int, opts ...train.Option) (*train.Report, error) {
		t.Helper()
		student := kittest.LoadStudent(t, d, sm)
		tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		held = tr.EvalWindows()
		return runUntil(tr, stop, func(i train.StepInfo) {
			infos = append(infos, i)
			if i.Step == 2*L && after == nil {
				m, err := nvgkit.Export(student, sm)
				if err == nil {
					after, err = host.Load(m)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	straight := filepath.Join(dir, "straight")
	cfg.OutDir, cfg.TopKFile = straight, filepath.Join(straight, "topk.bin")
	os.MkdirAll(straight, 0o755)
	rep, err := run(cfg, -1)
	if err != nil {
		t.Fatal(err)
	}
	full := cfg
	full.BlockLayers = L
	flips := 0
	for _, i := range infos {
		p := full.PhaseAt(i.Step)
		if i.Phase != p.Kind || i.Layer != p.Layer || !(i.Loss > 0) {
			t.Errorf("step %d: phase %s layer %d loss %g; want %s", i.Step, i.Phase, i.Layer, i.Loss, p.Name())
		}
		for l, f := range i.SignFlips {
			if f != 0 && i.Phase == "block" && l != i.Layer {
				t.Errorf("step %d (block of layer %d) flipped %d signs of layer %d", i.Step, i.Layer, f, l)
			}
			if i.Phase == "block" {
				flips += f
			}
		}
	}
	if flips == 0 {
		t.Error("no sign flipped in the block steps: the test's knobs no longer make signs flip")
	}
	if len(rep.Phases) != L+1 || rep.Phases[L].Kind != "kl" || rep.Phases[3].Layer != 3 || rep.Phases[3].Tokens != 2*32 || rep.Tokens != (2*L+1)*32 {
		t.Errorf("report phases %+v, tokens %d", rep.Phases, rep.Tokens)
	}
	recs, _, err := train.ReadMetrics(filepath.Join(straight, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if p := full.PhaseAt(r.Step); r.Phase != p.Kind || r.Layer != p.Layer || r.Kind == train.MetricsStep && r.HasParts {
			t.Errorf("metrics %s record of step %d: phase %q layer %d, want %s", r.Kind, r.Step, r.Phase, r.Layer, p.Name())
		}
	}
	if spans := train.PhaseSeries(recs); len(spans) != L+1 || spans[2].Layer != 2 || spans[2].First != 5 {
		t.Errorf("PhaseSeries %+v", spans)
	}

	// Each block step moves its layer alone; each layer's end leaves a fresh optimizer.
	prev := studentTensors(t, sm, d)
	for s := 1; s <= 2*L; s++ {
		ck := loadCheckpoint(t, straight, s)
		layer := fmt.Sprintf(".layers.%d.", (s-1)/2)
		moved := 0
		for name, v := range ck.Tensors {
			p, ok := prev[name]
			if !ok || !strings.HasPrefix(name, "state/param/") && !strings.HasPrefix(name, "state/signs/") {
				continue
			}
			if !sameF32(p, v) {
				if !strings.Contains(name, layer) {
					t.Errorf("step %d (block%s): %s moved", s, layer, name)
				}
				moved++
			}
		}
		if moved == 0 {
			t.Errorf("step %d: nothing of layer%s moved", s, layer)
		}
		if s%2 == 0 {
			if ck.Meta.AdamStep != 0 {
				t.Errorf("after step %d (a layer's last): AdamStep %d, want 0", s, ck.Meta.AdamStep)
			}
			for name, v := range ck.Tensors {
				fresh := strings.HasPrefix(name, "state/m/") || strings.HasPrefix(name, "state/v/") || strings.HasPrefix(name, "state/score/")
				if fresh && slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) {
					t.Fatalf("after step %d (a layer's last): %s is not zero", s, name)
				}
			}
		}
		prev = ck.Tensors
	}

	// The host reference: every layer's reconstruction error on held-out windows falls.
	ids := make([][]int, len(held))
	for i, w := range held {
		ids[i] = w[:cfg.T]
	}
	if after == nil {
		t.Fatal("the student after the block phase was not exported")
	}
	var flat []int
	for _, w := range ids {
		flat = append(flat, w...)
	}
	c := hostTeacher.Config
	target, err := host.Embedding(hostTeacher.Embed, c.VocabSize, c.HiddenSize, flat)
	if err != nil {
		t.Fatal(err)
	}
	for l := range L {
		if target, err = hostTeacher.Layer(l, target, len(ids), cfg.T); err != nil { // the teacher's output of layer l
			t.Fatal(err)
		}
		e0, _, err := before.BlockLoss(ids, l, target)
		if err != nil {
			t.Fatal(err)
		}
		e1, _, err := after.BlockLoss(ids, l, target)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("layer %d: held-out reconstruction error %.5f → %.5f (%.1f %%)", l, e0, e1, 100*(e1-e0)/e0)
		if !(e1 < e0) {
			t.Errorf("layer %d: the block phase did not lower its reconstruction error on held-out windows: %.6g → %.6g", l, e0, e1)
		}
	}

	// Resumed mid-phase and at the block → KL boundary: identical checkpoints.
	last := loadCheckpoint(t, straight, cfg.Steps)
	for _, stop := range []int{3, 2 * L} {
		out := filepath.Join(dir, fmt.Sprint("resumed", stop))
		os.MkdirAll(out, 0o755)
		c := cfg
		c.OutDir, c.TopKFile = out, filepath.Join(out, "topk.bin")
		if _, err := run(c, stop); !errors.Is(err, train.ErrInterrupted) {
			t.Fatalf("run interrupted after step %d: %v", stop, err)
		}
		tr, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, out)
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		tr.Log = &log
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		tr.Close()
		if stop == 3 && (!strings.Contains(log.String(), "teacher top-k: ") || !strings.Contains(log.String(), "windows of the block steps left")) {
			t.Errorf("resumed after step 3, the log:\n%s", log.String())
		}
		got := loadCheckpoint(t, out, cfg.Steps)
		if len(got.Tensors) != len(last.Tensors) {
			t.Fatalf("resumed after step %d: %d tensors, straight %d", stop, len(got.Tensors), len(last.Tensors))
		}
		for name, v := range last.Tensors {
			if !sameF32(v, got.Tensors[name]) {
				t.Fatalf("resumed after step %d: %s differs from the straight run's", stop, name)
			}
		}
	}

	// Two micro-batches: the same block losses to f32 rounding (without sign learning, whose
	// scores see each micro-batch's backward apart).
	micro := cfg
	micro.OutDir, micro.TopKFile, micro.TrainSigns = "", "", false
	infos = nil
	if _, err := run(micro, 3); !errors.Is(err, train.ErrInterrupted) {
		t.Fatal(err)
	}
	whole := infos
	infos = nil
	if _, err := run(micro, 3, train.WithMicroBatches(2)); !errors.Is(err, train.ErrInterrupted) {
		t.Fatal(err)
	}
	for i := range 3 {
		if a, b := whole[i].Loss, infos[i].Loss; math.Abs(a-b) > 1e-5*a {
			t.Errorf("step %d: loss %.8g in one batch, %.8g in two micro-batches", i+1, a, b)
		}
	}
}

// tinyModel opens the embedded tiny teacher (closed at the end of the test).
func tinyModel(t *testing.T) *cmf.Model {
	t.Helper()
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// loadCheckpoint loads the checkpoint of step s in dir.
func loadCheckpoint(t *testing.T, dir string, s int) *train.Checkpoint {
	t.Helper()
	c, err := train.LoadCheckpoint(filepath.Join(dir, train.CheckpointName(s)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// studentTensors returns the compressed student's trained values and sign bits as a
// checkpoint holds them ("state/param/…", "state/signs/…").
func studentTensors(t *testing.T, sm *cmf.Model, d *gpu.Device) map[string][]float32 {
	t.Helper()
	net := kittest.LoadStudent(t, d, sm)
	p, err := nvgkit.Params(net)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for n, v := range p {
		out["state/param/"+n] = v
	}
	for _, n := range net.SignNames() {
		b, err := net.ReadSigns(n)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, (len(b)+3)/4)
		for i, x := range b {
			v[i/4] = math.Float32frombits(math.Float32bits(v[i/4]) | uint32(x)<<(8*(i%4)))
		}
		out["state/signs/"+n] = v
	}
	return out
}

// A Lab with a block phase (8 layers × 2 steps, then one KL step) steps as the Trainer does,
// bit for bit: Info.Phases is the plan, Step(17) gives the Trainer's losses, gradient norms,
// phases and layers and, at the end, its trained values; History.PhaseSpans gives the plan
// back; and a Lab restored to a snapshot taken mid-phase (after step 3) steps to the same end.
func TestLabBlockPhaseMatchesTrainer(t *testing.T) {
	s := labSetup(t)
	L := 8
	s.Train.BlockSteps, s.Train.Steps = 2, 2*L+1
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.DefaultTrainConfig()
	st := s.Train
	cfg.Steps, cfg.NB, cfg.T, cfg.K, cfg.LR, cfg.Warmup, cfg.MinLRFrac, cfg.ClipNorm, cfg.EvalWindows, cfg.Seed, cfg.BlockSteps =
		st.Steps, st.NB, st.T, st.K, st.LR, st.Warmup, st.MinLRFrac, st.ClipNorm, st.EvalWindows, st.Seed, st.BlockSteps
	cfg.EvalEvery, cfg.KeepFinal = 0, true
	cfg.HiddenLoss, cfg.HiddenWeight, cfg.HiddenLayers = st.HiddenLoss, st.HiddenWeight, st.HiddenLayers
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var infos []train.StepInfo
	tr.OnStep = func(i train.StepInfo) { infos = append(infos, i) }
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}

	lab := newLab(t)
	info, err := lab.Setup(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := train.SessionPhases(tr.Config.Phases()); !reflect.DeepEqual(info.Phases, got) || len(got) != L+1 || got[L-1].Layer != L-1 {
		t.Errorf("Info.Phases %+v, want %+v", info.Phases, got)
	}
	sts, err := lab.Step(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Snapshot("mid"); err != nil {
		t.Fatal(err)
	}
	more, err := lab.Step(2*L - 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range append(sts, more...) {
		in := infos[i]
		if st.Phase != in.Phase || st.Layer != in.Layer || !same64(st.Loss, in.Loss) || !same64(st.GradNorm, in.GradNorm) || st.KL != 0 || st.Hidden != 0 {
			t.Errorf("step %d: %s %d loss %v norm %v (KL %v, hidden %v); Trainer %s %d %v %v", i+1, st.Phase, st.Layer, st.Loss, st.GradNorm, st.KL, st.Hidden,
				in.Phase, in.Layer, in.Loss, in.GradNorm)
		}
	}
	sameVecs(t, "trained values after the phases", params(t, lab), want)
	h, err := lab.History()
	if err != nil {
		t.Fatal(err)
	}
	if got := h.PhaseSpans(); !reflect.DeepEqual(got, info.Phases) {
		t.Errorf("History.PhaseSpans %+v, want %+v", got, info.Phases)
	}
	if err := lab.Restore("mid"); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Step(2*L - 2); err != nil {
		t.Fatal(err)
	}
	sameVecs(t, "trained values after a restore mid-phase", params(t, lab), want)
}
