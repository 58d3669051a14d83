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
	"github.com/nvg-project/nvg/nvgkit"
	_ "github.com/nvg-project/nvg/nvgkit/gradcheck" // Lab.GradCheck's host reference
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

var labFx struct {
	once   sync.Once
	dir    string
	setup  session.Setup
	lab    *train.Lab
	info   session.Info
	phases map[string]int // Setup's progress reports by phase
	err    error
	// signLab is the tests' Lab of signSetup (lab_signs_test.go), set up once.
	signLab *train.Lab
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range []*train.Lab{labFx.lab, labFx.signLab} {
		if l != nil {
			l.Close()
		}
	}
	if labFx.dir != "" {
		os.RemoveAll(labFx.dir)
	}
	os.Exit(code)
}

// labSetup is the Setup of the tests' Lab: trainFixture's student (written to a file), the
// same corpus files, a short schedule.
func labSetup(t *testing.T) session.Setup {
	t.Helper()
	_, _, sm, _, _ := trainFixture(t)
	labFx.once.Do(func() {
		if labFx.dir, labFx.err = os.MkdirTemp("", "nvgkit-lab-test-"); labFx.err != nil {
			return
		}
		p := filepath.Join(labFx.dir, "student.cmf")
		if labFx.err = cmf.WriteCMF(p, sm); labFx.err != nil {
			return
		}
		src := filepath.Join(runtime.GOROOT(), "src")
		s := session.DefaultSetup()
		s.Student = p
		s.Init = "dual-svid" // trainFixture's compression, when a test compresses (Student "")
		s.TrainFiles = []string{filepath.Join(src, "strings/strings.go"), filepath.Join(src, "sort/sort.go")}
		s.EvalFiles = []string{filepath.Join(src, "bytes/buffer.go")}
		s.Train = session.Train{Steps: 4, NB: 2, T: 16, K: 8, LR: 0.01, Warmup: 1, MinLRFrac: 0.1, ClipNorm: 1, EvalWindows: 2, Seed: 7}
		labFx.setup = s
	})
	if labFx.err != nil {
		t.Fatal(labFx.err)
	}
	return labFx.setup
}

// newLab returns a new Lab on the tests' device (closed at the end of the test).
func newLab(t *testing.T) *train.Lab {
	t.Helper()
	d, _, _ := kittest.TinyTeacher(t)
	l, err := train.NewLab(train.LabDevice(d), train.LabTokenCache(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sharedLab returns the tests' Lab, set up once, restored to its snapshot "start" (step 0).
func sharedLab(t *testing.T) (*train.Lab, session.Info) {
	t.Helper()
	s := labSetup(t)
	d, _, _ := kittest.TinyTeacher(t)
	if labFx.lab == nil {
		l, err := train.NewLab(train.LabDevice(d), train.LabTokenCache(""))
		if err != nil {
			t.Fatal(err)
		}
		labFx.phases = map[string]int{}
		if labFx.info, err = l.Setup(s, session.OnProgress(func(p session.Progress) { labFx.phases[p.Phase]++ })); err != nil {
			t.Fatal(err)
		}
		if err := l.Snapshot("start"); err != nil {
			t.Fatal(err)
		}
		labFx.lab = l
	}
	if err := labFx.lab.Restore("start"); err != nil {
		t.Fatal(err)
	}
	if err := labFx.lab.ZeroGrads(); err != nil {
		t.Fatal(err)
	}
	return labFx.lab, labFx.info
}

func same64(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

func sameF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// params reads every trained vector of the Lab, grads every gradient.
func params(t *testing.T, l session.Lab) map[string][]float32 { return vecs(t, l, l.Param) }

func grads(t *testing.T, l session.Lab) map[string][]float32 { return vecs(t, l, l.Grad) }

func vecs(t *testing.T, l session.Lab, read func(string) ([]float32, error)) map[string][]float32 {
	t.Helper()
	names, err := l.Names()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, n := range names {
		if out[n], err = read(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameVecs(t *testing.T, what string, a, b map[string][]float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vs %d vectors", what, len(a), len(b))
	}
	for n, v := range a {
		if !sameF32(v, b[n]) {
			t.Fatalf("%s: %s differs", what, n)
		}
	}
}

// Lab.Step(k) is Trainer's first k steps bit for bit: the same losses, gradient norms,
// teacher and compressed perplexities and final trained values, for the same settings; and
// the primitives (ZeroGrads, ForwardBackward, ClipGrads, AdamStep) and Step with a hook that
// changes nothing give the same again after Restore.
func TestLabStepMatchesTrainer(t *testing.T) {
	const k = 4
	d, teacher, _, trainIDs, heldOut := trainFixture(t)
	lab, info := sharedLab(t)

	// The reference: nvg distill's Trainer with the same configuration, on a student loaded
	// from the same file.
	sm, err := cmf.Open(labFx.setup.Student)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.DefaultTrainConfig()
	st := labFx.setup.Train
	cfg.Steps, cfg.NB, cfg.T, cfg.K, cfg.LR, cfg.Warmup, cfg.MinLRFrac, cfg.ClipNorm, cfg.EvalWindows, cfg.Seed =
		st.Steps, st.NB, st.T, st.K, st.LR, st.Warmup, st.MinLRFrac, st.ClipNorm, st.EvalWindows, st.Seed
	cfg.EvalEvery, cfg.KeepFinal = 0, true
	cfg.HiddenLoss, cfg.HiddenWeight, cfg.HiddenLayers = st.HiddenLoss, st.HiddenWeight, st.HiddenLayers
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var norms []float64
	tr.OnStep = func(i train.StepInfo) { norms = append(norms, i.GradNorm) }
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}

	if !same64(info.TeacherPPL, rep.TeacherPPL) || !same64(info.CompressedPPL, rep.CompressedPPL) {
		t.Errorf("perplexities: lab teacher %v compressed %v, trainer %v %v", info.TeacherPPL, info.CompressedPPL, rep.TeacherPPL, rep.CompressedPPL)
	}
	if tc := d.TensorCores().String(); info.TensorCores != tc {
		t.Errorf("Info.TensorCores %q, the device's %q", info.TensorCores, tc)
	}
	check := func(what string, got []session.StepStats) {
		t.Helper()
		if len(got) != k {
			t.Fatalf("%s: %d steps", what, len(got))
		}
		for i, s := range got {
			if s.Step != i+1 || !s.Finite || !same64(s.Loss, rep.Loss[i]) || !same64(s.GradNorm, norms[i]) || s.Skipped || !same64(s.LR, cfg.LRAt(i+1)) {
				t.Errorf("%s: step %d: %+v, trainer loss %v norm %v", what, i+1, s, rep.Loss[i], norms[i])
			}
		}
		sameVecs(t, what+": trained values after the steps", params(t, lab), want)
	}
	got, err := lab.Step(k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("losses %v, gradient norms %v", rep.Loss, norms)
	check("Step", got)
	if h, err := lab.History(); err != nil || len(h.Steps) != k || !same64(h.Steps[k-1].Loss, rep.Loss[k-1]) {
		t.Errorf("History: %+v %v", h, err)
	}

	// The primitives, one call each.
	if err := lab.Restore("start"); err != nil {
		t.Fatal(err)
	}
	var prim []session.StepStats
	for range k {
		if err := lab.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		fb, err := lab.ForwardBackward()
		if err != nil || !fb.Finite || !same64(fb.Loss, rep.Loss[fb.Step-1]) {
			t.Fatalf("ForwardBackward = %+v, %v", fb, err)
		}
		if n, err := lab.ClipGrads(st.ClipNorm); err != nil || !same64(n, norms[fb.Step-1]) {
			t.Fatalf("ClipGrads = %v, %v; want %v", n, err, norms[fb.Step-1])
		}
		s, err := lab.AdamStep()
		if err != nil {
			t.Fatal(err)
		}
		prim = append(prim, s)
	}
	check("primitives", prim)

	// Step with a hook that reads every gradient and writes it back unchanged.
	if err := lab.Restore("start"); err != nil {
		t.Fatal(err)
	}
	calls := 0
	hooked, err := lab.Step(k, session.PreOptimizer(func(l session.Lab, fb session.StepStats) error {
		calls++
		names, _ := l.Names()
		for _, n := range names {
			g, err := l.Grad(n)
			if err != nil {
				return err
			}
			if err := l.SetGrad(n, g); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if calls != k {
		t.Errorf("hook called %d times", calls)
	}
	check("Step with a hook", hooked)
}

// A hook that zeroes every gradient makes the first update a no-op (Adam from zero moments
// with zero gradients moves nothing); a hook may not call Step; a hook's error stops Step
// before the update.
func TestLabPreOptimizerHook(t *testing.T) {
	lab, _ := sharedLab(t)
	before := params(t, lab)
	var seen float64
	_, err := lab.Step(1, session.PreOptimizer(func(l session.Lab, fb session.StepStats) error {
		gn, err := l.GradNorms()
		if err != nil {
			return err
		}
		seen = gn.Total
		names, _ := l.Names()
		for _, n := range names {
			g, _ := l.Grad(n)
			if err := l.SetGrad(n, make([]float32, len(g))); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !(seen > 0) {
		t.Errorf("the hook saw gradient norm %v", seen)
	}
	sameVecs(t, "after a step with zeroed gradients", params(t, lab), before)
	if in, _ := lab.Info(); in.Step != 1 {
		t.Errorf("Info.Step = %d after one step", in.Step)
	}

	_, err = lab.Step(1, session.PreOptimizer(func(l session.Lab, _ session.StepStats) error {
		_, err := l.Step(1)
		return err
	}))
	if err == nil || !strings.Contains(err.Error(), "cannot be called from a PreOptimizer hook") {
		t.Errorf("Step from a hook: %v", err)
	}
	mid := params(t, lab)
	sentinel := errors.New("stop here")
	done, err := lab.Step(2, session.PreOptimizer(func(session.Lab, session.StepStats) error { return sentinel }))
	if !errors.Is(err, sentinel) || len(done) != 0 {
		t.Errorf("a failing hook: %d steps, %v", len(done), err)
	}
	sameVecs(t, "after a failing hook", params(t, lab), mid)
}

// Bad arguments are refused with clear errors, before anything changes.
func TestLabValidation(t *testing.T) {
	lab, info := sharedLab(t)
	if _, err := lab.Step(1); err != nil {
		t.Fatal(err)
	}
	names, _ := lab.Names()
	before, gbefore := params(t, lab), grads(t, lab)
	name := names[3]
	v, _ := lab.Param(name)
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"Param of an unknown name", func() error { _, err := lab.Param(name + "x"); return err }(), "nearest: " + name},
		{"SetParam of a wrong length", lab.SetParam(name, v[1:]), "values, want"},
		{"SetParam of NaN", lab.SetParam(name, append([]float32{float32(math.NaN())}, v[1:]...)), "is NaN"},
		{"SetGrad of an unknown name", lab.SetGrad("model.norm.weigth", v), "model.norm.weight"},
		{"Restore of an unknown tag", lab.Restore("nope"), `"start"`},
		{"Snapshot without a tag", lab.Snapshot(""), "empty tag"},
		{"Step(0)", func() error { _, err := lab.Step(0); return err }(), "n = 0"},
		{"ClipGrads(0)", func() error { _, err := lab.ClipGrads(0); return err }(), "maxNorm = 0"},
		{"Eval(-1)", func() error { _, err := lab.Eval(-1); return err }(), "windows = -1"},
		{"Eval(too many)", func() error { _, err := lab.Eval(99); return err }(), "windows = 99"},
		{"HiddenStates of layer 99", func() error { _, err := lab.HiddenStates(session.Student, session.Window{}, []int{99}); return err }(), "layer 99"},
		{"HiddenStates of a bad net", func() error { _, err := lab.HiddenStates(session.NetKind(7), session.Window{}, nil); return err }(), "NetKind(7)"},
		{"TopK with k = 0", func() error { _, err := lab.TopK(session.Teacher, session.Window{}, 0, 0); return err }(), "k"},
		{"TopK at a bad position", func() error { _, err := lab.TopK(session.Teacher, session.Window{}, 16, 3); return err }(), "pos = 16"},
		{"a window past the end", func() error { _, err := lab.Logits(session.Teacher, session.Window{Index: 2}, 0); return err }(), "Window.Index = 2"},
		{"tokens outside the vocabulary", func() error {
			_, err := lab.Logits(session.Student, session.Window{Tokens: []int{1, info.Vocab}}, 0)
			return err
		}(), "outside the vocabulary"},
		{"GradCheck of an unknown name", func() error { _, err := lab.GradCheck(session.GradCheckSpec{Names: []string{"x"}}); return err }(), "no trained vector"},
		{"GradCheck of a batch too large", func() error { _, err := lab.GradCheck(session.GradCheckSpec{T: 17}); return err }(), "T = 17"},
		{"Setup with another Setup", func() error {
			s := labFx.setup
			s.Train.Seed++
			_, err := lab.Setup(s)
			return err
		}(), "set Setup.Replace"},
		{"Setup with a bad Setup", func() error { _, err := lab.Setup(session.Setup{}); return err }(), "BitsPerWeight"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, c.err, c.want)
		}
	}
	sameVecs(t, "trained values after failing calls", params(t, lab), before)
	sameVecs(t, "gradients after failing calls", grads(t, lab), gbefore)
	in, err := lab.Setup(labFx.setup) // the same Setup: a no-op
	if err != nil || in.Step != 1 || !same64(in.TeacherPPL, info.TeacherPPL) {
		t.Errorf("Setup again: %+v, %v", in, err)
	}
	sameVecs(t, "trained values after Setup again", params(t, lab), before)
}

// SetParam changes exactly one value; Restore brings back the snapshot's state (values,
// step counter: the same loss again).
func TestLabSnapshotSetParam(t *testing.T) {
	lab, _ := sharedLab(t)
	names, _ := lab.Names()
	first, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Snapshot("one"); err != nil {
		t.Fatal(err)
	}
	two, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Restore("one"); err != nil {
		t.Fatal(err)
	}
	if in, _ := lab.Info(); in.Step != 1 || !slicesContain(in.Snapshots, "one") {
		t.Errorf("Info after Restore: step %d, snapshots %v", in.Step, in.Snapshots)
	}
	again, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if !same64(again[0].Loss, two[0].Loss) || again[0].Step != 2 {
		t.Errorf("step 2 after Restore: %+v, before %+v (step 1 %+v)", again[0], two[0], first[0])
	}
	n := names[len(names)-1] // the final norm's gain
	v, _ := lab.Param(n)
	v[0] += 0.25
	if err := lab.SetParam(n, v); err != nil {
		t.Fatal(err)
	}
	got, _ := lab.Param(n)
	if !sameF32(got, v) {
		t.Errorf("Param after SetParam differs")
	}
	if h, _ := lab.History(); len(h.Steps) != 2 {
		t.Errorf("History has %d steps", len(h.Steps))
	}
}

// The inspection calls agree with independent paths: the next-token loss from Logits (the
// head on the host-read final hidden state, softmax in float64) matches the GPU's NLL of the
// same window (a fused kernel) for the teacher and the student; TopK is sorted and holds
// the target's probability; HiddenStates has the Trace layout.
func TestLabInspect(t *testing.T) {
	lab, info := sharedLab(t)
	w := session.Window{Index: 1}
	for _, net := range []session.NetKind{session.Teacher, session.Student} {
		ev, err := lab.Eval(1)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := lab.HiddenStates(net, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs.States) != info.Layers+1 || hs.T != 16 || len(hs.States[0]) != 16*info.Hidden {
			t.Fatalf("%v HiddenStates: %d states, T %d", net, len(hs.States), hs.T)
		}
		// The mean −log p(target) over held-out window 0, from TopK, is Eval's loss.
		var sum float64
		for wi := range 1 {
			for pos := range 16 {
				r, err := lab.TopK(net, session.Window{Index: wi}, pos, 5)
				if err != nil {
					t.Fatal(err)
				}
				if pos == 3 {
					lg, err := lab.Logits(net, session.Window{Index: wi}, pos)
					if err != nil || len(lg) != info.Vocab {
						t.Fatalf("Logits: %d values, %v", len(lg), err)
					}
					for j := 1; j < len(r.IDs); j++ {
						if r.Probs[j] > r.Probs[j-1] {
							t.Errorf("TopK not sorted: %v", r.Probs)
						}
					}
					if r.NextRank >= 0 && r.NextRank < 5 && r.IDs[r.NextRank] != r.Next {
						t.Errorf("NextRank %d but IDs %v, next %d", r.NextRank, r.IDs, r.Next)
					}
				}
				sum -= math.Log(r.NextProb)
			}
		}
		loss := sum / 16
		want := ev.StudentLoss
		if net == session.Teacher {
			want = ev.TeacherLoss
		}
		if math.Abs(loss-want) > 1e-4*want {
			t.Errorf("%v: loss from Logits %.7f, Eval %.7f", net, loss, want)
		}
		t.Logf("%v: loss from Logits %.7f, Eval %.7f", net, loss, want)
	}
	// Tokens of another length than T run in a work of their own; the state of a prefix of
	// a window is the prefix of the window's state (causal).
	hs, err := lab.HiddenStates(session.Student, w, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	ids := hs.Tokens[:5]
	part, err := lab.HiddenStates(session.Student, session.Window{Tokens: ids}, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	H := info.Hidden
	for i := range 5 * H {
		if d := math.Abs(float64(part.States[0][i] - hs.States[0][i])); d > 1e-4*(1+math.Abs(float64(hs.States[0][i]))) {
			t.Fatalf("prefix state differs at %d: %v vs %v", i, part.States[0][i], hs.States[0][i])
		}
	}
	text, err := lab.Detokenize(ids)
	if err != nil {
		t.Fatal(err)
	}
	back, err := lab.Tokenize(text)
	if err != nil || len(back) == 0 {
		t.Errorf("Tokenize(%q) = %v, %v", text, back, err)
	}
}

// GradCheck on the live state after two steps: notebook 02's ten coordinates within its
// tolerances, and the state (values, gradients, step) the same after the call. On the
// device's GEMM path: with tensor cores on (NVG_TENSOR_CORES=on on Mesa 26, .ci/coopmat; a
// GPU that has them) the analytic gradient is the cooperative-matrix one, within the
// f16-derived tolerance of the host's, and the finite differences stay on the f32 path.
func TestLabGradCheck(t *testing.T) {
	lab, info := sharedLab(t)
	d, _, _ := kittest.TinyTeacher(t)
	if _, err := lab.Step(2); err != nil {
		t.Fatal(err)
	}
	before, gbefore := params(t, lab), grads(t, lab)
	var prog []int
	res, err := lab.GradCheck(session.GradCheckSpec{}, session.OnProgress(func(p session.Progress) {
		if p.Total != 22 || p.Phase != "gradcheck" {
			t.Errorf("progress %+v, want phase gradcheck of 22 units", p)
		}
		prog = append(prog, p.Done)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU loss %.8f host %.8f\n%s", res.LossGPU, res.LossHost, res.Table())
	if len(res.Rows) != 10 || res.Step != 2 || res.Windows != 2 || res.T != 16 {
		t.Errorf("result: %d rows, step %d, %d×%d", len(res.Rows), res.Step, res.Windows, res.T)
	}
	// Reports from the start (issue 34: 33 s with no output): 0, the GPU gradient, 10 GPU
	// finite differences, the host gradient, 10 host finite differences.
	if len(prog) != 23 || prog[0] != 0 || prog[22] != 22 || !slices.IsSorted(prog) {
		t.Errorf("progress reports %v, want 0 … 22", prog)
	}
	if f := res.Failures(); len(f) > 0 {
		t.Errorf("gradient check failed:\n%s", strings.Join(f, "\n"))
	}
	tc := d.TensorCores()
	if res.TensorCores != tc.String() || res.Coopmat() != tc.On || res.Spec.TolGPUHostCoopmat != train.CoopmatGradTol(1e-4, info.Layers) {
		t.Errorf("result on %q (coopmat %v, tolerance %g), the device's tensor cores %q", res.TensorCores, res.Coopmat(), res.Spec.TolGPUHostCoopmat, tc)
	}
	// The loss: the forward alone (kittest.Path.Tol).
	if tol := (kittest.Path{Coopmat: tc.On}).Tol(1e-5, kittest.ForwardStages(info.Layers, true), 1); math.Abs(res.LossGPU-res.LossHost) > tol*res.LossHost {
		t.Errorf("losses GPU %v host %v: relative difference above %.3g", res.LossGPU, res.LossHost, tol)
	}
	for _, r := range res.Rows {
		if !tc.On && r.GPUF32 != r.GPU {
			t.Errorf("%s: GPUF32 %v, GPU %v: the same gradient without tensor cores", r.Label(), r.GPUF32, r.GPU)
		}
	}
	sameVecs(t, "trained values after GradCheck", params(t, lab), before)
	sameVecs(t, "gradients after GradCheck", grads(t, lab), gbefore)
	if in, _ := lab.Info(); in.Step != 2 {
		t.Errorf("step %d after GradCheck", in.Step)
	}
}

// Interrupt from the progress callback stops Step after the step in progress; the state is
// that after it.
func TestLabInterrupt(t *testing.T) {
	lab, _ := sharedLab(t)
	done, err := lab.Step(3, session.OnProgress(func(p session.Progress) {
		if p.Done == 1 {
			lab.Interrupt()
		}
	}))
	if !errors.Is(err, session.ErrInterrupted) || !errors.Is(err, train.ErrInterrupted) || len(done) != 1 {
		t.Fatalf("Step: %d steps, %v", len(done), err)
	}
	if in, _ := lab.Info(); in.Step != 1 {
		t.Errorf("Info.Step = %d", in.Step)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if done, err := lab.Step(1, session.WithContext(ctx)); !errors.Is(err, session.ErrInterrupted) || len(done) != 0 {
		t.Errorf("Step with a cancelled context: %d steps, %v", len(done), err)
	}
	if _, err := lab.Step(1); err != nil { // an interrupt is not remembered
		t.Errorf("Step after an interrupted one: %v", err)
	}
	// An evaluation stops too (a large EvalWindows could run for minutes: a fresh-user test
	// found Setup's and Eval's evaluations deaf to interrupts), and records nothing.
	before, err := lab.History()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Eval(0, session.WithContext(ctx)); !errors.Is(err, session.ErrInterrupted) {
		t.Errorf("Eval with a cancelled context: %v, want ErrInterrupted", err)
	}
	if after, err := lab.History(); err != nil || len(after.Evals) != len(before.Evals) {
		t.Errorf("an interrupted Eval changed the history: %d evaluations, then %d (%v)", len(before.Evals), len(after.Evals), err)
	}
	// EvalEvery evaluates after every n-th step of the call: the same perplexity as Eval now.
	got, err := lab.Step(2, session.EvalEvery(2))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := lab.Eval(0)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].EvalPPL != 0 || !same64(got[1].EvalPPL, ev.StudentPPL) || ev.Step != 4 {
		t.Errorf("EvalEvery(2): steps %+v, Eval %+v", got, ev)
	}
}

// A checkpoint restores in a new Lab: the same step, values and next loss; the resuming
// Setup, not the checkpoint, decides which activations are kept (the other choice from the
// checkpoint's, with the same next loss).
func TestLabCheckpointResume(t *testing.T) {
	lab, _ := sharedLab(t)
	if _, err := lab.Step(2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := lab.Checkpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != train.CheckpointName(2) {
		t.Errorf("checkpoint %s", path)
	}
	want := params(t, lab)
	next, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	s := labFx.setup
	s.Resume = dir
	orig, err := lab.Info()
	if err != nil {
		t.Fatal(err)
	}
	s.Train.KeepActivations, s.Train.ActivationBudget = false, 0
	wantActs := "recomputed"
	if strings.Contains(orig.Activations, "recomputed") {
		s.Train.ActivationBudget, wantActs = 1<<30, "with every BLR path's c"
	}
	l2 := newLab(t)
	in, err := l2.Setup(s)
	if err != nil {
		t.Fatal(err)
	}
	if in.Step != 2 || in.AdamStep != 2 {
		t.Errorf("resumed Info: step %d, Adam step %d", in.Step, in.AdamStep)
	}
	if !strings.Contains(in.Activations, wantActs) {
		t.Errorf("resumed with ActivationBudget %d: Activations %q, want %q (the checkpoint's run: %q)", s.Train.ActivationBudget, in.Activations, wantActs, orig.Activations)
	}
	sameVecs(t, "resumed values", params(t, l2), want)
	got, err := l2.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if !same64(got[0].Loss, next[0].Loss) || got[0].Step != 3 {
		t.Errorf("step 3 after resume: %+v, want loss %v", got[0], next[0].Loss)
	}
	if h, _ := l2.History(); len(h.Steps) != 3 {
		t.Errorf("resumed History: %d steps", len(h.Steps))
	}
	// Export writes a student that loads.
	sp := filepath.Join(dir, "student.cmf")
	if err := l2.Export(sp); err != nil {
		t.Fatal(err)
	}
	if m, err := cmf.Open(sp); err != nil {
		t.Errorf("exported student: %v", err)
	} else {
		if len(m.Tensors) == 0 {
			t.Errorf("exported student has no tensors")
		}
		m.Close()
	}
	// The shared Lab's Setup reported every phase (no compression: the student is a file).
	for _, p := range []string{"load", "corpus", "teacher", "eval"} {
		if labFx.phases[p] == 0 {
			t.Errorf("Setup reported no %q progress (%v)", p, labFx.phases)
		}
	}
	// A Lab that is not set up says so.
	l3 := newLab(t)
	if _, err := l3.Step(1); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Errorf("Step before Setup: %v", err)
	}
	if in, err := l3.Info(); err != nil || in.Ready {
		t.Errorf("Info before Setup: %+v %v", in, err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Param(in.Setup.Student); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Param after Close: %v", err)
	}
}

// DefaultSetup's schedule is DefaultTrainConfig's (one table of defaults), the quality levers
// (hidden-state loss, phases) and sign training included (off, the zero knobs standing for
// DefaultSigns), and session's DefaultSigns is nvgkit's.
func TestLabDefaultSetupIsDistills(t *testing.T) {
	s, c := session.DefaultSetup().Train, train.DefaultTrainConfig()
	if s.Steps != c.Steps || s.NB != c.NB || s.T != c.T || s.Windows != c.Windows || s.K != c.K || s.LR != c.LR || s.Warmup != c.Warmup ||
		s.MinLRFrac != c.MinLRFrac || s.ClipNorm != c.ClipNorm || s.EvalWindows != c.EvalWindows || s.Seed != c.Seed || s.ScheduleSteps != c.ScheduleSteps ||
		s.KeepActivations != c.KeepActivations || s.ActivationBudget != c.ActivationBudget || s.TrainSigns != c.TrainSigns || nvgkit.SignConfig(s.Signs) != c.Signs ||
		s.FinishSteps != c.FinishSteps || s.BlockSteps != c.BlockSteps || s.HiddenLoss != c.HiddenLoss || s.HiddenWeight != c.HiddenWeight || s.HiddenLayers != c.HiddenLayers {
		t.Errorf("DefaultSetup().Train = %+v, DefaultTrainConfig() = %+v", s, c)
	}
	if d, n := session.DefaultSigns(), nvgkit.DefaultSigns(); nvgkit.SignConfig(d) != n {
		t.Errorf("session.DefaultSigns() = %+v, nvgkit.DefaultSigns() = %+v", d, n)
	}
	// The knobs' ranges agree: a value session.Setup.Validate refuses, nvgkit refuses too.
	for _, k := range []session.SignConfig{{Alpha: -1, Beta: 0.9, Tau: 8}, {Alpha: 1, Beta: 1.01, Tau: 8}, {Alpha: 1, Beta: 0.9, Tau: 128},
		{Alpha: 1, Beta: 0.9, Tau: 8, MaxFlipFrac: 2}} {
		st := session.DefaultSetup()
		st.Train.Signs = k
		if st.Validate() == nil || nvgkit.SignConfig(k).Validate() == nil {
			t.Errorf("knobs %+v: session %v, nvgkit %v; want both to refuse them", k, st.Validate(), nvgkit.SignConfig(k).Validate())
		}
	}
}

func slicesContain(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

// Setup compresses the teacher when no student file is given (nvg distill's compression:
// the seed is the run's), reporting progress; the student is Compress's. A different Setup
// with Replace replaces it, and gives the same first step as the shared Lab.
func TestLabSetupCompressReplace(t *testing.T) {
	d, _, sm, _, _ := trainFixture(t)
	s := labSetup(t)
	s.Student, s.Paths, s.Train.Seed = "", "2", 1 // trainFixture's compression: 1 bit, 2 paths, seed 1
	lab := newLab(t)
	phases := map[string]int{}
	in, err := lab.Setup(s, session.OnProgress(func(p session.Progress) { phases[p.Phase]++ }))
	if err != nil {
		t.Fatal(err)
	}
	if phases["compress"] == 0 || len(in.Compression) == 0 || math.Abs(in.BitsPerWeight-1) > 0.1 || !strings.Contains(in.Student, "compressed") {
		t.Errorf("compressing Setup: phases %v, %d tensors at %g bits/weight, student %q", phases, len(in.Compression), in.BitsPerWeight, in.Student)
	}
	want, err := nvgkit.Params(kittest.LoadStudent(t, d, sm))
	if err != nil {
		t.Fatal(err)
	}
	sameVecs(t, "the compressed student", params(t, lab), want)

	shared, _ := sharedLab(t)
	ref, err := shared.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	r := labSetup(t)
	r.Replace = true
	in, err = lab.Setup(r)
	if err != nil {
		t.Fatal(err)
	}
	if in.Student != r.Student || in.Step != 0 || len(in.Compression) != 0 {
		t.Errorf("replaced Info: %+v", in)
	}
	got, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if !same64(got[0].Loss, ref[0].Loss) {
		t.Errorf("first step after Replace: loss %v, the shared Lab's %v", got[0].Loss, ref[0].Loss)
	}
}

// A step whose loss is not finite is skipped as Trainer skips it: no update, the gradients
// cleared, the step counted; the hook is not called.
func TestLabSkippedStep(t *testing.T) {
	lab, _ := sharedLab(t)
	names, _ := lab.Names()
	n := names[len(names)-1] // the final norm's gain: huge values overflow the logits
	v, _ := lab.Param(n)
	for i := range v {
		v[i] = 1e30
	}
	if err := lab.SetParam(n, v); err != nil {
		t.Fatal(err)
	}
	before := params(t, lab)
	called := false
	got, err := lab.Step(1, session.PreOptimizer(func(session.Lab, session.StepStats) error { called = true; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Skipped || got[0].Finite || called {
		t.Errorf("step %+v, hook called %v", got[0], called)
	}
	in, _ := lab.Info()
	if in.Step != 1 || in.Skipped != 1 || in.AdamStep != 0 {
		t.Errorf("Info: step %d, skipped %d, Adam step %d", in.Step, in.Skipped, in.AdamStep)
	}
	sameVecs(t, "values after a skipped step", params(t, lab), before)
	for name, g := range grads(t, lab) {
		for _, x := range g {
			if x != 0 {
				t.Fatalf("gradient of %s not cleared", name)
			}
		}
	}
}

// LayerNorms (Lab.GradNorms' table) gives the same bits on every call: the squares of a
// kind's vectors are summed in name order, not in Go's random map order. Five vectors of one
// layer and kind: 2²⁷ in p0.g and 1024 ones in each of p0.h, p0.l, p1.h, p1.l. In name order
// the sum starts at 2⁵⁴ and every later 1 is lost (below half its ulp, 4): the norm is
// exactly 2²⁷. Any vector of ones first would give 2⁵⁴ + 1024 and a norm 2²⁷ + 2⁻¹⁸.
func TestLabLayerNormsDeterministic(t *testing.T) {
	const p = "model.layers.1.self_attn.q_proj.weight."
	ones := make([]float32, 1024)
	for i := range ones {
		ones[i] = 1
	}
	vecs := map[string][]float32{p + "p0.g": {1 << 27}, p + "p0.h": ones, p + "p0.l": ones, p + "p1.h": ones, p + "p1.l": ones,
		"model.layers.0.input_layernorm.weight": {3, 4}}
	for range 50 {
		_, kinds, norms, err := nvgkit.LayerNorms(vecs, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(kinds) != 2 || kinds[0] != "input_layernorm" || kinds[1] != "q_proj" || norms[0][0] != 5 || !math.IsNaN(norms[0][1]) {
			t.Fatalf("kinds %v norms %v", kinds, norms)
		}
		if norms[1][1] != 1<<27 {
			t.Fatalf("q_proj norm of layer 1 = %v, want 2²⁷ = %v (summed in name order)", norms[1][1], 1<<27)
		}
	}
}

// Issue 34, papercut 8: stepping past the planned schedule says so once (the first step past
// it carries a Note, also in its progress report); a progress report's EvalPPL is the
// evaluation after its own step, 0 where none was made (it repeated the step-0 perplexity).
func TestLabScheduleEndAndProgress(t *testing.T) {
	lab, info := sharedLab(t)
	planned := info.Setup.Train.Steps // 4
	var reports []session.Progress
	sts, err := lab.Step(planned+2, session.EvalEvery(3), session.OnProgress(func(p session.Progress) { reports = append(reports, p) }))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sts {
		note := st.Step == planned+1
		if (st.Note != "") != note || note && !strings.Contains(st.Note, fmt.Sprintf("past the %d steps the learning-rate schedule was planned for", planned)) {
			t.Errorf("step %d: note %q", st.Step, st.Note)
		}
		if reports[i].Note != st.Note {
			t.Errorf("step %d: progress note %q, step note %q", st.Step, reports[i].Note, st.Note)
		}
		evaluated := (i+1)%3 == 0
		if (reports[i].EvalPPL != 0) != evaluated || reports[i].EvalPPL != st.EvalPPL {
			t.Errorf("step %d: progress EvalPPL %g, the step's %g; want it only after an evaluation", st.Step, reports[i].EvalPPL, st.EvalPPL)
		}
	}
	// The floor: MinLRFrac·LR (0.1 · 0.01) from the step past the plan on.
	if lr := sts[planned].LR; math.Abs(lr-0.001) > 1e-15 || sts[planned+1].LR != lr {
		t.Errorf("learning rates past the plan: %g, %g; want 0.001", lr, sts[planned+1].LR)
	}
	if more, err := lab.Step(1); err != nil || more[0].Note != "" {
		t.Errorf("a later step: %+v, %v; want no note again", more, err)
	}
}
