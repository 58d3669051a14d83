package server

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// gpuSetup is a small Setup of the embedded tiny teacher (seconds on lavapipe).
func gpuSetup() session.Setup {
	s := session.DefaultSetup()
	s.Train.Steps, s.Train.NB, s.Train.T, s.Train.K, s.Train.EvalWindows = 6, 2, 16, 8, 2
	return s
}

// inProcessLab is an nvgkit Lab on the tests' shared device.
func inProcessLab(t *testing.T) session.Lab {
	t.Helper()
	lab, err := nvgkit.NewLab(nvgkit.LabDevice(gputest.Open(t)))
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

// labSequence is the cell sequence of the bit-identity test; it returns every result as
// text (floats printed exactly: Go prints the shortest decimal that reads back to the same
// bits) with the wall times cleared.
func labSequence(t *testing.T, lab session.Lab) []string {
	t.Helper()
	var out []string
	add := func(what string, v any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = append(out, what+": "+untimed(v))
	}
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
	return out
}

// TestInProcessVsSessionBitIdentical: the same calls through nvgkit.NewLab in this process
// and through a session server (another process, its own device) give bit-identical
// results: losses, norms, gradients, parameters, evaluations, hidden states.
func TestInProcessVsSessionBitIdentical(t *testing.T) {
	local := labSequence(t, inProcessLab(t))
	useSessionDir(t, "gpu")
	remote := labSequence(t, attach(t, "bits"))
	if len(local) != len(remote) {
		t.Fatalf("%d results in-process, %d through the session", len(local), len(remote))
	}
	for i := range local {
		if local[i] != remote[i] {
			t.Errorf("result %d differs:\nin-process: %.600s\nsession:    %.600s", i, local[i], remote[i])
		}
	}
	if !strings.Contains(local[1], "Loss:") || strings.Contains(local[1], "Loss:NaN") {
		t.Errorf("Step(3) gave no losses: %s", local[1])
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
