package server

import (
	"fmt"
	"github.com/nvg-project/nvg/nvgkit/train"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// gpuSetup is a small Setup of the embedded tiny teacher (seconds on lavapipe).
func gpuSetup() session.Setup {
	s := session.DefaultSetup()
	s.Train.Steps, s.Train.NB, s.Train.T, s.Train.K, s.Train.EvalWindows = 6, 2, 16, 8, 2
	s.Init, s.Train.HiddenLoss = "dual-svid", "" // the quality defaults cost ~45 s a setup on 2 cores
	return s
}

// inProcessLab is an nvgkit Lab on the tests' shared device.
func inProcessLab(t *testing.T) session.Lab {
	t.Helper()
	lab, err := train.NewLab(train.LabDevice(gputest.Open(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	return lab
}

// untimed clears the wall-time fields (the only ones two runs may differ in).
func untimed(v any) string {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return "<nil>"
	}
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	clearSeconds(cp)
	return fmt.Sprintf("%+v", cp.Interface())
}

func clearSeconds(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if strings.HasSuffix(v.Type().Field(i).Name, "Seconds") && f.Kind() == reflect.Float64 {
				f.SetFloat(0)
			} else if f.CanSet() {
				clearSeconds(f)
			}
		}
	case reflect.Slice:
		if !v.IsNil() {
			cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(cp, v)
			v.Set(cp)
			for i := 0; i < v.Len(); i++ {
				clearSeconds(v.Index(i))
			}
		}
	}
}

// recorder returns the function a sequence records a call's result with: what and the
// result as text (wall times cleared), or a fatal error when err is not nil.
func recorder(t *testing.T, out *[]string) func(what string, v any, err error) {
	return func(what string, v any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		*out = append(*out, what+": "+untimed(v))
	}
}

// bitIdentical runs the call sequence seq through train.NewLab in this process and through a
// session server named name (another process, its own device), fails t where their results
// differ, and returns the in-process results.
func bitIdentical(t *testing.T, seq func(*testing.T, session.Lab) []string, name string) []string {
	t.Helper()
	local := seq(t, inProcessLab(t))
	useSessionDir(t, "gpu")
	remote := seq(t, attach(t, name))
	sameResults(t, local, remote)
	return local
}

// sameResults fails t where the in-process and the session's results differ.
func sameResults(t *testing.T, local, remote []string) {
	t.Helper()
	if len(local) != len(remote) {
		t.Fatalf("%d results in-process, %d through the session", len(local), len(remote))
	}
	for i := range local {
		if local[i] != remote[i] {
			t.Errorf("result %d differs:\nin-process: %.600s\nsession:    %.600s", i, local[i], remote[i])
		}
	}
}

// labSequence is the cell sequence of the bit-identity test; it returns every result as
// text (floats printed exactly: Go prints the shortest decimal that reads back to the same
// bits) with the wall times cleared.
func labSequence(t *testing.T, lab session.Lab) []string {
	t.Helper()
	var out []string
	add := recorder(t, &out)
	info, err := lab.Setup(gpuSetup())
	info.Device = "" // the two may name the device differently (it is the same adapter)
	add("Setup", info, err)
	sts, err := lab.Step(3)
	add("Step(3)", sts, err)
	names, err := lab.Names()
	add("Names", names, err)
	g, err := lab.Grad(names[0])
	add("Grad", g, err)
	p, err := lab.Param(names[1])
	add("Param", p, err)
	p[0] += 0.125
	add("SetParam", nil, lab.SetParam(names[1], p))
	sts, err = lab.Step(1)
	add("Step(1)", sts, err)
	// A step with a PreOptimizer hook (run by the client in a session) that halves one gradient.
	hook := func(l session.Lab, st session.StepStats) error {
		g, err := l.Grad(names[0])
		if err != nil {
			return err
		}
		for i := range g {
			g[i] *= 0.5
		}
		return l.SetGrad(names[0], g)
	}
	sts, err = lab.Step(1, session.PreOptimizer(hook))
	add("Step(1, PreOptimizer)", sts, err)
	ev, err := lab.Eval(0)
	add("Eval", ev, err)
	gn, err := lab.GradNorms()
	add("GradNorms", gn, err)
	hs, err := lab.HiddenStates(session.Student, session.Window{Index: 1}, []int{0, 2})
	add("HiddenStates", hs, err)
	tk, err := lab.TopK(session.Teacher, session.Window{Index: 0}, 3, 5)
	add("TopK", tk, err)
	p, err = lab.Param(names[len(names)-1])
	add("Param(last)", p, err)
	h, err := lab.History()
	add("History", h, err)
	return append(out, nonFiniteSequence(t, lab, names)...)
}

// nonFiniteSequence sets values a student cannot use (issue 34: a metric scale of 3e38,
// finite in f32 but not in f16, was taken, and the next step's loss was NaN, and Eval's NaN
// perplexity came with no error): the scale is refused naming the vector, the index and the
// limit; a norm gain of 3e38 (an f32 value, as gains are stored) is taken, and the Eval that
// overflows names the first non-finite hidden state. The errors are results.
func nonFiniteSequence(t *testing.T, lab session.Lab, names []string) []string {
	t.Helper()
	var out []string
	add := func(what string, err error) { out = append(out, fmt.Sprintf("%s: %v", what, err)) }
	metric := ""
	for _, n := range names {
		if strings.HasSuffix(n, ".p0.h") {
			metric = n
			break
		}
	}
	p, err := lab.Param(metric)
	if err != nil {
		t.Fatal(err)
	}
	p[0] = 3e38
	add("SetParam(metric scale 3e38)", lab.SetParam(metric, p))
	p[0] = -65504 // f16's largest: taken
	add("SetParam(metric scale -65504)", lab.SetParam(metric, p))
	const gain = "model.layers.1.post_attention_layernorm.weight"
	g, err := lab.Param(gain)
	if err != nil {
		t.Fatal(err)
	}
	for i := range g {
		g[i] = 3e38
	}
	add("SetParam(gain 3e38)", lab.SetParam(gain, g))
	_, err = lab.Eval(0)
	add("Eval(overflowing gain)", err)
	return out
}

// TestInProcessVsSessionBitIdentical: the same calls through train.NewLab in this process
// and through a session server (another process, its own device) give bit-identical
// results: losses, norms, gradients, parameters, evaluations, hidden states.
func TestInProcessVsSessionBitIdentical(t *testing.T) {
	local := bitIdentical(t, labSequence, "bits")
	if !strings.Contains(local[1], "Loss:") || strings.Contains(local[1], "Loss:NaN") {
		t.Errorf("Step(3) gave no losses: %s", local[1])
	}
	nf := local[len(local)-4:]
	for i, want := range []string{"p0.h: value 0 is 3e+38, beyond 65504: a BLR metric scale must be finite in f16", "SetParam(metric scale -65504): <nil>",
		"SetParam(gain 3e38): <nil>", "with every trained value finite: the first non-finite hidden state is the output of layer 1 (linear_attention)"} {
		if !strings.Contains(nf[i], want) {
			t.Errorf("%s\nwant %q", nf[i], want)
		}
	}
}

// signSetup is gpuSetup training the signs, with knobs that flip signs within a few steps at
// this size.
func signSetup() session.Setup {
	s := gpuSetup()
	s.Train.TrainSigns = true
	s.Train.Signs = session.SignConfig{Alpha: 8, Beta: 0.9, Tau: 16, MaxFlipFrac: 0.01, Seed: 5}
	return s
}

// topPressure returns the k live elements of sh with the largest G·b (ties by index), the
// flip rule a notebook might write.
func topPressure(sh session.SignShape, g []float32, bits []byte, k int) []int {
	var live []int
	for e := range sh.Elements() {
		if sh.IsLive(e) {
			live = append(live, e)
		}
	}
	p := func(e int) float32 { return g[e] * session.SignValue(bits, e) }
	sort.SliceStable(live, func(i, j int) bool { return p(live[i]) > p(live[j]) })
	return live[:k]
}

// signSequence is the cell sequence of the sign bit-identity test: steps of a TrainSigns
// Setup with one matrix's sign gradient captured, its gradient, scores and bits, a hand flip
// rule (the 10 largest G·b), SetSigns back, a step whose PreOptimizer hook (run by the client
// in a session) flips by the step's own gradient, the history's flips per layer, and bad
// calls' errors. Every result is returned as text, wall times cleared.
func signSequence(t *testing.T, lab session.Lab) []string {
	t.Helper()
	var out []string
	add := recorder(t, &out)
	bad := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		out = append(out, what+": error "+err.Error())
	}
	info, err := lab.Setup(signSetup())
	info.Device = ""
	add("Setup", info, err)
	names, err := lab.SignNames()
	add("SignNames", names, err)
	name := names[2] // path 1's U of the first projection when it has two paths, else path 0's of the second
	sh, err := lab.SignShape(name)
	add("SignShape", sh, err)
	add("CaptureSignGrad", nil, lab.CaptureSignGrad(name, true))
	sts, err := lab.Step(2)
	add("Step(2)", sts, err)
	g, err := lab.SignGrad(name)
	add("SignGrad", g, err)
	sc, err := lab.SignScores(name)
	add("SignScores", sc, err)
	before, err := lab.Signs(name)
	add("Signs", before, err)
	mask, err := sh.FlipMask(topPressure(sh, g, before, 10))
	add("FlipMask", mask, err)
	n, err := lab.ApplySignFlips(name, mask)
	add("ApplySignFlips", n, err)
	b, err := lab.Signs(name)
	add("Signs after the flips", b, err)
	sc, err = lab.SignScores(name)
	add("SignScores after the flips", sc, err)
	add("SetSigns", nil, lab.SetSigns(name, before))
	b, err = lab.Signs(name)
	add("Signs after SetSigns", b, err)
	hook := func(l session.Lab, st session.StepStats) error {
		g, err := l.SignGrad(name)
		if err != nil {
			return err
		}
		bits, err := l.Signs(name)
		if err != nil {
			return err
		}
		m, err := sh.FlipMask(topPressure(sh, g, bits, 3))
		if err != nil {
			return err
		}
		_, err = l.ApplySignFlips(name, m)
		return err
	}
	// With EvalEvery too: the client steps and evaluates in separate calls, and the history's
	// step entry must carry the perplexity as the in-process Step records it.
	sts, err = lab.Step(1, session.PreOptimizer(hook), session.EvalEvery(1))
	add("Step(1, a flipping PreOptimizer, EvalEvery(1))", sts, err)
	g, err = lab.SignGrad(name)
	add("SignGrad after the hooked step", g, err)
	h, err := lab.History()
	add("History", h, err)
	bad("SignShape of an unknown name", func() error { _, err := lab.SignShape(name + "x"); return err }())
	bad("SetSigns of nil", lab.SetSigns(name, nil))
	bad("SetSignScores of a wrong length", lab.SetSignScores(name, sc[1:]))
	bad("ApplySignFlips of a short mask", func() error { _, err := lab.ApplySignFlips(name, mask[1:]); return err }())
	bad("SignGrad not captured", func() error { _, err := lab.SignGrad(names[0]); return err }())
	return out
}

// TestInProcessVsSessionSignsBitIdentical: sign training through train.NewLab in this
// process and through a session server gives bit-identical results (losses, flips per layer,
// sign gradients, scores, bits, hand flips, the history, the errors); signs did flip, in the
// steps and by hand.
func TestInProcessVsSessionSignsBitIdentical(t *testing.T) {
	local := bitIdentical(t, signSequence, "signbits")
	flipped := regexp.MustCompile(`SignFlips:\[[0-9 ]*[1-9]`) // a list of flips per layer, not all 0
	for _, r := range local {
		if strings.HasPrefix(r, "ApplySignFlips: ") && r != "ApplySignFlips: 10" {
			t.Errorf("hand flips: %s, want 10", r)
		}
		if (strings.HasPrefix(r, "Step(2): ") || strings.HasPrefix(r, "History: ")) && !flipped.MatchString(r) {
			t.Errorf("no sign flipped: %.600s", r)
		}
	}
}

// TestKilledClientGPU: a client killed (SIGKILL) during a long Step of a real session
// leaves it at a step boundary: its step counter is k and its parameters equal, bit for
// bit, those of an in-process Lab after Setup and Step(k).
func TestKilledClientGPU(t *testing.T) {
	useSessionDir(t, "gpu")
	c := attach(t, "killgpu")
	if _, err := c.Setup(gpuSetup()); err != nil {
		t.Fatal(err)
	}
	cmd, out := child(t, "killgpu", "step", "NVG_TEST_STEPS=100000")
	waitFor(t, "the child's first steps", func() bool { return strings.Count(out.String(), "progress") >= 2 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	info, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	k := info.Step
	if k < 1 || k >= 100000 {
		t.Fatalf("step %d after the kill, want a boundary in 1…99999", k)
	}
	ref := inProcessLab(t)
	if _, err := ref.Setup(gpuSetup()); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Step(k); err != nil {
		t.Fatal(err)
	}
	names, err := c.Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		got, err := c.Param(n)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Param(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", n, len(got), len(want))
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] after the kill at step %d: %v, want %v (an in-process run of %d steps)", n, i, k, got[i], want[i], k)
			}
		}
	}
	rh, _ := ref.History()
	ch, err := c.History()
	if err != nil || len(ch.Steps) != k || untimed(ch.Steps) != untimed(rh.Steps) {
		t.Errorf("history after the kill: %d steps (%v), want the reference's %d", len(ch.Steps), err, len(rh.Steps))
	}
}

// phaseSequence is the cell sequence of the phase bit-identity test: a TrainSigns Setup
// whose last 3 of 6 steps are the scale-only finish, stepped through the phase boundary
// (Step(2), then Step(2) over steps 3 and 4), its watched matrix's scores and bits, a
// checkpoint in the finish and a Setup that resumes it (Replace), the last steps and the
// history. Every result is returned as text, wall times (and the checkpoint's path) cleared.
func phaseSequence(t *testing.T, lab session.Lab, dir string) []string {
	t.Helper()
	var out []string
	add := recorder(t, &out)
	s := signSetup()
	s.Train.FinishSteps = 3
	info, err := lab.Setup(s)
	info.Device = ""
	add("Setup", info, err)
	names, err := lab.SignNames()
	add("SignNames", names, err)
	sts, err := lab.Step(2)
	add("Step(2)", sts, err)
	sts, err = lab.Step(2)
	add("Step(2) through the boundary", sts, err)
	sc, err := lab.SignScores(names[2])
	add("SignScores", sc, err)
	b, err := lab.Signs(names[2])
	add("Signs", b, err)
	path, err := lab.Checkpoint(dir)
	add("Checkpoint", nil, err)
	s.Resume, s.Replace = path, true
	info, err = lab.Setup(s)
	info.Device, info.Setup.Resume = "", ""
	add("Setup(Resume)", info, err)
	sts, err = lab.Step(2)
	add("Step(2) after the resume", sts, err)
	b, err = lab.Signs(names[2])
	add("Signs at the end", b, err)
	h, err := lab.History()
	add("History", h, err)
	return out
}

// TestInProcessVsSessionPhasesBitIdentical: a Setup with a scale-only finish steps through
// its phases, is checkpointed mid-finish and resumed, bit-identically through train.NewLab in
// this process and through a session server; the steps name their phases, flips stop at the
// finish, and the finish leaves the watched signs as the KL phase left them.
func TestInProcessVsSessionPhasesBitIdentical(t *testing.T) {
	local := bitIdentical(t, func(t *testing.T, l session.Lab) []string { return phaseSequence(t, l, t.TempDir()) }, "phases")
	res := map[string]string{}
	for _, r := range local {
		k, v, _ := strings.Cut(r, ": ")
		res[k] = v
	}
	if !strings.Contains(res["Setup"], "Phases:[{Kind:kl Layer:0 First:1 Last:3} {Kind:finish Layer:0 First:4 Last:6}]") {
		t.Errorf("Setup's Info.Phases: %.800s", res["Setup"])
	}
	through := res["Step(2) through the boundary"]
	if !regexp.MustCompile(`Step:3 .*Phase:kl.*Step:4 .*SignFlips:\[\] Phase:finish`).MatchString(through) {
		t.Errorf("steps 3 and 4: %.800s", through)
	}
	if res["Signs"] != res["Signs at the end"] {
		t.Error("the finish steps after the resume changed the signs")
	}
}
