package train_test

import (
	"bytes"
	"context"
	"math/bits"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// signKnobs flip signs within a few steps at the tests' size (TestTrainerSignsResumeExact's).
var signKnobs = session.SignConfig{Alpha: 8, Beta: 0.9, Tau: 16, MaxFlipFrac: 0.01, Seed: 5}

// paddedProj is the projection signSetup's student pads with 8 ranks.
const paddedProj = "model.layers.0.mlp.up_proj.weight"

var signFx struct {
	once    sync.Once
	student string // the padded student's file
	err     error
}

// signSetup is labSetup with sign training on, and a student whose paddedProj carries 8
// ranks of padding (ℓ = 0, arbitrary sign bits: the same function, as the compressor's
// rounded ranks give), so that the padding rules are exercised.
func signSetup(t *testing.T) session.Setup {
	s := labSetup(t)
	_, _, sm, _, _ := trainFixture(t)
	signFx.once.Do(func() {
		signFx.student = filepath.Join(labFx.dir, "student-padded.cmf")
		signFx.err = writePadded(sm, paddedProj, signFx.student)
	})
	if signFx.err != nil {
		t.Fatal(signFx.err)
	}
	s.Student = signFx.student
	s.Train.TrainSigns, s.Train.Signs = true, signKnobs
	return s
}

// writePadded writes m to path with the BLR tensor name's rank grown by 8 padded ranks
// (kittest.PadRank).
func writePadded(m *cmf.Model, name, path string) error {
	pm, err := kittest.PadRank(m, name, 8)
	if err != nil {
		return err
	}
	return cmf.WriteCMF(path, pm)
}

// signLab returns the tests' sign-training Lab, set up once, restored to its snapshot
// "start" (step 0, the compressed signs, zero scores), with zero gradients and no capture.
func signLab(t *testing.T) *train.Lab {
	t.Helper()
	s := signSetup(t)
	if labFx.signLab == nil {
		d, _, _ := kittest.TinyTeacher(t)
		l, err := train.NewLab(train.LabDevice(d), train.LabTokenCache(""))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Setup(s); err != nil {
			l.Close()
			t.Fatal(err)
		}
		if err := l.Snapshot("start"); err != nil {
			l.Close()
			t.Fatal(err)
		}
		labFx.signLab = l
	}
	l := labFx.signLab
	if err := l.Restore("start"); err != nil {
		t.Fatal(err)
	}
	if err := l.ZeroGrads(); err != nil {
		t.Fatal(err)
	}
	names, err := l.SignNames()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range names {
			if err := l.CaptureSignGrad(n, false); err != nil {
				t.Error(err)
			}
		}
	})
	return l
}

// paddedSign returns the name and shape of the sign matrix with the most rank padding (a U
// when several tie): the matrix the tests watch, so that padding is checked too.
func paddedSign(t *testing.T, lab session.Lab) (string, session.SignShape) {
	t.Helper()
	names, err := lab.SignNames()
	if err != nil || len(names) == 0 {
		t.Fatalf("SignNames: %d names, %v", len(names), err)
	}
	best := session.SignShape{Live: -1}
	for _, n := range names {
		sh, err := lab.SignShape(n)
		if err != nil {
			t.Fatal(err)
		}
		rank := sh.Cols
		if sh.IsV() {
			rank = sh.Rows
		}
		if best.Live < 0 || rank-sh.Live > padOf(best) {
			best = sh
		}
	}
	if padOf(best) == 0 {
		t.Fatal("no sign matrix has rank padding: the padding checks would test nothing")
	}
	return best.Name, best
}

func padOf(sh session.SignShape) int {
	if sh.IsV() {
		return sh.Rows - sh.Live
	}
	return sh.Cols - sh.Live
}

// sigReference runs nvg distill's Trainer with signSetup's configuration on a student loaded
// from the same file, capturing name's sign gradient: per step the gradient (read by the
// OnGradients hook, before Adam and the flips, then reset), the step's info and name's scores
// after the flips; at the end every matrix's bits and the trained values.
type signReference struct {
	rep    *train.Report
	infos  []train.StepInfo
	grads  [][]float32
	scores [][]int8
	bits   map[string][]byte
	params map[string][]float32
}

func runSignReference(t *testing.T, name string) signReference {
	t.Helper()
	return runSignReferenceOf(t, name, signSetup(t))
}

// runSignReferenceOf is runSignReference of the Lab Setup s (signSetup's, possibly with a
// finish: s.Train.FinishSteps).
func runSignReferenceOf(t *testing.T, name string, s session.Setup) signReference {
	t.Helper()
	d, teacher, _, trainIDs, heldOut := trainFixture(t)
	sm, err := cmf.Open(s.Student)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.DefaultTrainConfig()
	st := s.Train
	cfg.Steps, cfg.NB, cfg.T, cfg.K, cfg.LR, cfg.Warmup, cfg.MinLRFrac, cfg.ClipNorm, cfg.EvalWindows, cfg.Seed =
		st.Steps, st.NB, st.T, st.K, st.LR, st.Warmup, st.MinLRFrac, st.ClipNorm, st.EvalWindows, st.Seed
	cfg.EvalEvery, cfg.KeepFinal = 0, true
	cfg.HiddenLoss, cfg.HiddenWeight, cfg.HiddenLayers = st.HiddenLoss, st.HiddenWeight, st.HiddenLayers
	cfg.TrainSigns, cfg.Signs = true, nvgkit.SignConfig{Alpha: 8, Beta: 0.9, Tau: 16, MaxFlipFrac: 0.01, Seed: 5}
	cfg.FinishSteps = st.FinishSteps
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := student.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	var ref signReference
	tr.OnGradients = func(_ train.Comm, _ int) error {
		g, err := student.ReadSignGrad(name, true)
		ref.grads = append(ref.grads, g)
		return err
	}
	tr.OnStep = func(i train.StepInfo) {
		ref.infos = append(ref.infos, i)
		sc, err := student.ReadSignScores(name)
		if err != nil {
			t.Error(err)
		}
		ref.scores = append(ref.scores, sc)
	}
	if ref.rep, err = tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ref.bits = map[string][]byte{}
	for _, n := range student.SignNames() {
		if ref.bits[n], err = student.ReadSigns(n); err != nil {
			t.Fatal(err)
		}
	}
	if ref.params, err = nvgkit.Params(student); err != nil {
		t.Fatal(err)
	}
	if err := student.CaptureSignGrad(name, false); err != nil {
		t.Fatal(err)
	}
	return ref
}

// A TrainSigns Lab steps as the Trainer does, bit for bit: Step(1) four times gives the
// Trainer's losses, gradient norms and flips per layer, the captured sign gradient and the
// scores of the watched matrix after every step, and at the end every matrix's sign bits and
// every trained value; History carries the flips. Restore("start") brings back the
// compressed signs and zero scores, and the step primitives then give the same steps again.
func TestLabSignsMatchTrainer(t *testing.T) {
	lab := signLab(t)
	name, sh := paddedSign(t, lab)
	start, err := lab.Signs(name)
	if err != nil {
		t.Fatal(err)
	}
	ref := runSignReference(t, name)
	k := len(ref.infos)
	if k != signSetup(t).Train.Steps {
		t.Fatalf("the reference ran %d steps", k)
	}
	flips := 0
	for _, i := range ref.infos {
		for _, f := range i.SignFlips {
			flips += f
		}
	}
	if flips == 0 {
		t.Fatal("the reference flipped no sign: the test would compare nothing")
	}
	t.Logf("watching %s (%d×%d, %d live ranks); the reference flipped %d signs in %d steps", name, sh.Rows, sh.Cols, sh.Live, flips, k)

	if err := lab.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	check := func(what string, i int, st session.StepStats) {
		t.Helper()
		in := ref.infos[i]
		if st.Step != i+1 || !same64(st.Loss, ref.rep.Loss[i]) || !same64(st.GradNorm, in.GradNorm) || !slices.Equal(st.SignFlips, in.SignFlips) {
			t.Errorf("%s: step %d: loss %v norm %v flips %v; Trainer %v %v %v", what, i+1, st.Loss, st.GradNorm, st.SignFlips, ref.rep.Loss[i], in.GradNorm, in.SignFlips)
		}
		g, err := lab.SignGrad(name)
		if err != nil {
			t.Fatal(err)
		}
		if !sameF32(g, ref.grads[i]) {
			t.Errorf("%s: step %d: the sign gradient of %s differs from the Trainer's", what, i+1, name)
		}
		sc, err := lab.SignScores(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sc, ref.scores[i]) {
			t.Errorf("%s: step %d: the scores of %s differ from the Trainer's", what, i+1, name)
		}
	}
	for i := range k {
		sts, err := lab.Step(1)
		if err != nil {
			t.Fatal(err)
		}
		check("Step(1)", i, sts[0])
	}
	names, err := lab.SignNames()
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, n := range names {
		b, err := lab.Signs(n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, ref.bits[n]) {
			t.Errorf("the sign bits of %s differ from the Trainer's after %d steps", n, k)
		}
		if n == name {
			changed = popDiff(b, start)
		}
	}
	sameVecs(t, "trained values after the sign steps", params(t, lab), ref.params)
	h, err := lab.History()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range h.Steps {
		if !slices.Equal(s.SignFlips, ref.infos[i].SignFlips) {
			t.Errorf("History step %d: flips %v, Trainer %v", i+1, s.SignFlips, ref.infos[i].SignFlips)
		}
	}
	t.Logf("%s: %d signs differ from the compressed ones; flips per layer of step %d: %v", name, changed, k, h.Steps[k-1].SignFlips)

	// Restore brings back the compressed signs and zero scores; the primitives then repeat.
	if err := lab.Restore("start"); err != nil {
		t.Fatal(err)
	}
	if b, _ := lab.Signs(name); !bytes.Equal(b, start) {
		t.Fatalf("Restore: the signs of %s are not the snapshot's", name)
	}
	if sc, _ := lab.SignScores(name); slices.ContainsFunc(sc, func(v int8) bool { return v != 0 }) {
		t.Fatalf("Restore: the scores of %s are not the snapshot's zeros", name)
	}
	for i := range k {
		if err := lab.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		fb, err := lab.ForwardBackward()
		if err != nil || fb.SignFlips != nil {
			t.Fatalf("ForwardBackward = %+v, %v", fb, err)
		}
		if _, err := lab.ClipGrads(signSetup(t).Train.ClipNorm); err != nil {
			t.Fatal(err)
		}
		st, err := lab.AdamStep()
		if err != nil {
			t.Fatal(err)
		}
		check("primitives", i, st)
	}
}

// popDiff counts the bits in which a and b differ.
func popDiff(a, b []byte) int {
	n := 0
	for i := range a {
		n += bits.OnesCount8(a[i] ^ b[i])
	}
	return n
}

// A notebook's own flip rule: after a step, flip the 10 live signs of the watched matrix with
// the largest G·b. ApplySignFlips changes exactly those bits (the host XOR of the old bits
// and the mask), resets exactly their scores, and returns 10; SetSigns puts the old bits back
// without touching the scores. GradCheck then leaves the scores and the captured gradient as
// they were.
func TestLabSignFlipRule(t *testing.T) {
	lab := signLab(t)
	name, sh := paddedSign(t, lab)
	if err := lab.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Step(1); err != nil {
		t.Fatal(err)
	}
	g, err := lab.SignGrad(name)
	if err != nil {
		t.Fatal(err)
	}
	old, err := lab.Signs(name)
	if err != nil {
		t.Fatal(err)
	}
	scores, err := lab.SignScores(name)
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for e := range sh.Elements() {
		if sh.IsLive(e) {
			live = append(live, e)
		} else if g[e] != 0 {
			t.Fatalf("%s: padded element %d has sign gradient %g", name, e, g[e])
		}
	}
	sort.SliceStable(live, func(i, j int) bool {
		return g[live[i]]*session.SignValue(old, live[i]) > g[live[j]]*session.SignValue(old, live[j])
	})
	pick := live[:10]
	if p := g[pick[0]] * session.SignValue(old, pick[0]); !(p > 0) {
		t.Fatalf("%s: the largest G·b is %g: no pressure to flip", name, p)
	}
	mask, err := sh.FlipMask(pick)
	if err != nil {
		t.Fatal(err)
	}
	n, err := lab.ApplySignFlips(name, mask)
	if err != nil || n != 10 {
		t.Fatalf("ApplySignFlips = %d, %v; want 10", n, err)
	}
	now, _ := lab.Signs(name)
	after, _ := lab.SignScores(name)
	for i := range old {
		if now[i] != old[i]^mask[i] {
			t.Fatalf("%s: byte %d is %08b after the flips, want %08b ^ %08b", name, i, now[i], old[i], mask[i])
		}
	}
	for e := range after {
		want := scores[e]
		if mask[e>>3]>>(e&7)&1 != 0 {
			want = 0
		}
		if after[e] != want {
			t.Fatalf("%s: score %d is %d after the flips, want %d (before %d)", name, e, after[e], want, scores[e])
		}
	}
	if err := lab.SetSigns(name, old); err != nil {
		t.Fatal(err)
	}
	if b, _ := lab.Signs(name); !bytes.Equal(b, old) {
		t.Fatal("SetSigns did not put the old bits back")
	}
	if sc, _ := lab.SignScores(name); !slices.Equal(sc, after) {
		t.Fatal("SetSigns changed the scores")
	}
	// GradCheck runs backwards of its own: the sign state must not see them.
	if _, err := lab.GradCheck(session.GradCheckSpec{Names: []string{"model.norm.weight"}, Coords: 1}); err != nil {
		t.Fatal(err)
	}
	if sc, _ := lab.SignScores(name); !slices.Equal(sc, after) {
		t.Error("GradCheck changed the sign scores")
	}
	if g2, err := lab.SignGrad(name); err != nil || !sameF32(g2, g) {
		t.Errorf("GradCheck changed the captured sign gradient (%v)", err)
	}
	// ZeroGrads clears the capture, as it clears the other gradients.
	if err := lab.ZeroGrads(); err != nil {
		t.Fatal(err)
	}
	if g0, err := lab.SignGrad(name); err != nil || slices.ContainsFunc(g0, func(v float32) bool { return v != 0 }) {
		t.Errorf("SignGrad after ZeroGrads: not all zero (%v)", err)
	}
}

// Bad arguments to the sign calls are refused with errors naming them, before anything
// changes; calls that need sign training say so on a Lab without it.
func TestLabSignValidation(t *testing.T) {
	lab := signLab(t)
	name, sh := paddedSign(t, lab)
	st, err := lab.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	// The flips a caller gets are its own: changing them does not change the history.
	want := slices.Clone(st[0].SignFlips)
	st[0].SignFlips[0] = -1
	h, _ := lab.History()
	h.Steps[0].SignFlips[1] = -1
	if h, _ := lab.History(); !slices.Equal(h.Steps[0].SignFlips, want) {
		t.Errorf("History's flips %v after the caller changed its copies, want %v", h.Steps[0].SignFlips, want)
	}
	bitsBefore, _ := lab.Signs(name)
	scoresBefore, _ := lab.SignScores(name)
	pad := sh.Live // U: column Live of row 0 is padding; V: row Live
	if sh.IsV() {
		pad = sh.Live * sh.Cols
	}
	if sh.IsLive(pad) {
		t.Fatalf("element %d of %s is live", pad, name)
	}
	flipped := slices.Clone(bitsBefore)
	flipped[pad>>3] ^= 1 << (pad & 7)
	badMask := make([]byte, sh.Bytes())
	badMask[pad>>3] |= 1 << (pad & 7)
	badScores := slices.Clone(scoresBefore)
	badScores[pad] = 3
	minScores := slices.Clone(scoresBefore)
	minScores[0] = -128
	typo := name[:len(name)-1] + "W"
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"SignShape of an unknown name", func() error { _, err := lab.SignShape(typo); return err }(), "nearest: " + name[:len(name)-1]},
		{"Signs of an unknown name", func() error { _, err := lab.Signs("x"); return err }(), `no sign matrix "x"`},
		{"SetSigns of a wrong length", lab.SetSigns(name, bitsBefore[1:]), "bytes, want Rows·Cols/8"},
		{"SetSigns changing a padded bit", lab.SetSigns(name, flipped), "is rank padding"},
		{"SetSignScores of a wrong length", lab.SetSignScores(name, scoresBefore[:3]), "3 scores, want"},
		{"SetSignScores on padding", lab.SetSignScores(name, badScores), "rank padding must score 0"},
		{"SetSignScores of −128", lab.SetSignScores(name, minScores), "is −128"},
		{"ApplySignFlips of a wrong length", func() error { _, err := lab.ApplySignFlips(name, badMask[:2]); return err }(), "mask of 2 bytes"},
		{"ApplySignFlips on padding", func() error { _, err := lab.ApplySignFlips(name, badMask); return err }(), "is on rank padding"},
		{"SignGrad not captured", func() error { _, err := lab.SignGrad(name); return err }(), "is not captured: call CaptureSignGrad"},
		{"CaptureSignGrad of an unknown name", lab.CaptureSignGrad(typo, true), "no sign matrix"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.what, c.err, c.want)
		}
	}
	if b, _ := lab.Signs(name); !bytes.Equal(b, bitsBefore) {
		t.Error("failing calls changed the signs")
	}
	if sc, _ := lab.SignScores(name); !slices.Equal(sc, scoresBefore) {
		t.Error("failing calls changed the scores")
	}
	// Captured but no backward yet.
	if err := lab.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.SignGrad(name); err == nil || !strings.Contains(err.Error(), "no backward since") {
		t.Errorf("SignGrad before a backward: %v", err)
	}

	// A Lab without sign training: reading works, the rest says what to set.
	plain, _ := sharedLab(t) // labSetup's student: the same names, no padded ranks
	psh, err := plain.SignShape(name)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := plain.Signs(name); err != nil || len(b) != psh.Bytes() {
		t.Errorf("Signs without sign training: %d bytes, %v", len(b), err)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"SignScores", func() error { _, err := plain.SignScores(name); return err }()},
		{"SetSignScores", plain.SetSignScores(name, make([]int8, psh.Elements()))},
		{"SetSigns", plain.SetSigns(name, make([]byte, psh.Bytes()))},
		{"ApplySignFlips", func() error { _, err := plain.ApplySignFlips(name, make([]byte, psh.Bytes())); return err }()},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), "sign training is off: set Setup.Train.TrainSigns") {
			t.Errorf("%s without sign training: %v", c.what, c.err)
		}
	}
	// Without sign training a step flips nothing and reports no flips; a capture still works.
	plainBits, err := plain.Signs(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.CaptureSignGrad(name, true); err != nil {
		t.Fatal(err)
	}
	defer plain.CaptureSignGrad(name, false)
	st, err = plain.Step(1)
	if err != nil {
		t.Fatal(err)
	}
	if st[0].SignFlips != nil {
		t.Errorf("a metric-only step reports flips %v", st[0].SignFlips)
	}
	g, err := plain.SignGrad(name)
	if err != nil || len(g) != psh.Elements() || !slices.ContainsFunc(g, func(v float32) bool { return v != 0 }) {
		t.Errorf("SignGrad without sign training: %d values, %v", len(g), err)
	}
	if b, _ := plain.Signs(name); !bytes.Equal(b, plainBits) {
		t.Error("a metric-only step changed the signs")
	}
}
