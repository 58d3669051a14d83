package session_test

import (
	"bytes"
	"encoding/gob"
	"math"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/session"
)

func TestLabSetupValidate(t *testing.T) {
	if err := session.DefaultSetup().Validate(); err != nil {
		t.Fatalf("DefaultSetup: %v", err)
	}
	for _, c := range []struct {
		change func(*session.Setup)
		want   string
	}{
		{func(s *session.Setup) { s.BitsPerWeight = 0 }, "BitsPerWeight = 0"},
		{func(s *session.Setup) { s.Paths = "3" }, `Paths = "3"`},
		{func(s *session.Setup) { s.TrainFiles = []string{"a.go"} }, "go together"},
		{func(s *session.Setup) { s.Train.Steps = 0 }, "Steps = 0"},
		{func(s *session.Setup) { s.Train.Windows = 6 }, "multiple of NB = 4"},
		{func(s *session.Setup) { s.Train.K = 65 }, "K = 65"},
		{func(s *session.Setup) { s.Train.LR = math.Inf(1) }, "LR = +Inf"},
		{func(s *session.Setup) { s.Train.ClipNorm = -1 }, "ClipNorm = -1"},
		{func(s *session.Setup) { s.Train.EvalWindows = 0 }, "EvalWindows = 0"},
	} {
		s := session.DefaultSetup()
		c.change(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want an error containing %q", err, c.want)
		}
	}
	// A student file needs no compression settings.
	s := session.DefaultSetup()
	s.Student, s.BitsPerWeight, s.Paths = "student.cmf", 0, ""
	if err := s.Validate(); err != nil {
		t.Errorf("Validate of a Setup with a student file: %v", err)
	}
}

func TestLabSetupEqual(t *testing.T) {
	a, b := session.DefaultSetup(), session.DefaultSetup()
	b.Replace = true
	if !a.Equal(b) {
		t.Error("Setups differing only in Replace are not Equal")
	}
	b.TrainFiles, b.EvalFiles = []string{"x"}, []string{"y"}
	if a.Equal(b) {
		t.Error("Setups with other files are Equal")
	}
	b = session.DefaultSetup()
	b.Train.Seed = 2
	if a.Equal(b) {
		t.Error("Setups with other seeds are Equal")
	}
}

func TestLabGradCheckSpec(t *testing.T) {
	r := session.GradCheckSpec{}.Resolved()
	want := session.GradCheckSpec{Coords: 1, Windows: 2, T: 16, StepGPU: 0.03, StepHost: 1e-3, TolGPUHost: 1e-4, TolFDHost: 1e-5, TolFDGPU: 1e-2}
	if r.Coords != want.Coords || r.Windows != want.Windows || r.T != want.T || r.StepGPU != want.StepGPU || r.StepHost != want.StepHost ||
		r.TolGPUHost != want.TolGPUHost || r.TolFDHost != want.TolFDHost || r.TolFDGPU != want.TolFDGPU {
		t.Errorf("Resolved() = %+v, want %+v", r, want)
	}
	for _, c := range []struct {
		s    session.GradCheckSpec
		want string
	}{
		{session.GradCheckSpec{Coords: -1}, "Coords = -1"},
		{session.GradCheckSpec{T: -2}, "T = -2"},
		{session.GradCheckSpec{StepGPU: -0.1}, "StepGPU = -0.1"},
		{session.GradCheckSpec{TolFDGPU: math.NaN()}, "TolFDGPU = NaN"},
		{session.GradCheckSpec{Names: []string{"a", "a"}}, `"a" twice`},
	} {
		if err := c.s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
}

func TestLabGradCheckResultTable(t *testing.T) {
	row := func(name string, i int, gpu, host, fdh, fdg float64) session.GradCheckRow {
		return session.GradCheckRow{Name: name, Index: i, GPU: gpu, Host: host, FDHost: fdh, FDGPU: fdg,
			ErrGPUHost: session.RelErr(gpu, host), ErrFDHost: session.RelErr(fdh, host), ErrFDGPU: session.RelErr(fdg, gpu)}
	}
	r := session.GradCheckResult{Spec: session.GradCheckSpec{}.Resolved(), Rows: []session.GradCheckRow{
		row("model.layers.0.linear_attn.in_proj_qkv.weight.p0.h", 17, 1, 1.00001, 1.000011, 1.001),
		row("model.layers.3.self_attn.q_norm.weight", 5, 2, 2, 2, 2.5),
	}}
	if got := r.Rows[0].Label(); got != "L0 in_proj_qkv p0.h[17]" {
		t.Errorf("Label = %q", got)
	}
	if got := r.Rows[1].Label(); got != "L3 self_attn.q_norm[5]" {
		t.Errorf("Label = %q", got)
	}
	if got := (session.GradCheckRow{Name: "model.norm.weight", Index: 3}).Label(); got != "norm[3]" {
		t.Errorf("Label = %q", got)
	}
	// Row 1's GPU FD is 25 % off (tolerance 1 %): one failure, naming it.
	f := r.Failures()
	if len(f) != 1 || !strings.Contains(f[0], "L3 self_attn.q_norm[5]: GPU FD") {
		t.Errorf("Failures = %q", f)
	}
	if r.OK() {
		t.Error("OK with a failing row")
	}
	if tab := r.Table(); !strings.Contains(tab, "L0 in_proj_qkv p0.h[17]") || !strings.Contains(tab, "analytic host") {
		t.Errorf("Table:\n%s", tab)
	}
	if session.RelErr(0, 0) != 0 || !math.IsInf(session.RelErr(1, 0), 1) || session.RelErr(3, 2) != 0.5 {
		t.Error("RelErr")
	}
}

// Every value type travels over encoding/gob (the session transport).
func TestLabValuesGob(t *testing.T) {
	vals := []any{session.DefaultSetup(), session.Info{Ready: true, Compression: []session.TensorReport{{Name: "x", Shape: []int{2, 3}}}},
		session.StepStats{Step: 1, Loss: math.NaN()}, session.History{Steps: []session.StepStats{{Step: 1}}},
		session.EvalResult{Windows: 2}, session.GradNorms{Kinds: []string{"q_proj"}, Norms: [][]float64{{1}}},
		session.HiddenStates{States: [][]float32{{1}}}, session.TopKResult{IDs: []int{1}},
		session.GradCheckSpec{Names: []string{"a"}}, session.GradCheckResult{Rows: []session.GradCheckRow{{Name: "a"}}},
		session.Progress{Phase: "step"}, session.Window{Tokens: []int{1, 2}}}
	for _, v := range vals {
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(v); err != nil {
			t.Errorf("gob %T: %v", v, err)
		}
	}
}

func TestLabOptions(t *testing.T) {
	called := false
	o := session.Apply(session.OnProgress(func(session.Progress) { called = true }), session.EvalEvery(3), nil)
	if o.OnProgress == nil || o.EvalEvery != 3 || o.Context != nil || o.PreOptimizer != nil {
		t.Fatalf("Apply = %+v", o)
	}
	o.OnProgress(session.Progress{})
	if !called {
		t.Error("OnProgress not set")
	}
	if session.Teacher.String() != "teacher" || session.Student.String() != "student" || session.NetKind(5).Valid() {
		t.Error("NetKind")
	}
	h := session.History{Steps: []session.StepStats{{Loss: 1}, {Loss: 2}}}
	if l := h.Losses(); len(l) != 2 || l[1] != 2 {
		t.Errorf("Losses = %v", l)
	}
}
