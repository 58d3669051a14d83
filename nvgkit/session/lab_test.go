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
		{func(s *session.Setup) { s.Train.NB = 0 }, "NB = 0"},
		{func(s *session.Setup) { s.Train.Windows = 6 }, "multiple of NB = 4"},
		{func(s *session.Setup) { s.Train.K = 65 }, "K = 65"},
		{func(s *session.Setup) { s.Train.LR = math.Inf(1) }, "LR = +Inf"},
		{func(s *session.Setup) { s.Train.ClipNorm = -1 }, "ClipNorm = -1"},
		{func(s *session.Setup) { s.Train.EvalWindows = 0 }, "EvalWindows = 0"},
		// The sign knobs are checked with or without TrainSigns; a partly set SignConfig is
		// used as it is (its zero Alpha is not a default).
		{func(s *session.Setup) { s.Train.Signs = session.SignConfig{Tau: 40} }, "Signs.Alpha = 0, want a finite value > 0 (the zero SignConfig means DefaultSigns()"},
		{func(s *session.Setup) {
			s.Train.TrainSigns, s.Train.Signs = true, session.DefaultSigns()
			s.Train.Signs.Alpha = float32(math.Inf(1))
		}, "Signs.Alpha = +Inf"},
		{func(s *session.Setup) { s.Train.Signs = session.DefaultSigns(); s.Train.Signs.Beta = 1.5 }, "Signs.Beta = 1.5, want a value in [0, 1]"},
		{func(s *session.Setup) { s.Train.Signs = session.DefaultSigns(); s.Train.Signs.Tau = 128 }, "Signs.Tau = 128, want 1…127"},
		{func(s *session.Setup) { s.Train.Signs = session.DefaultSigns(); s.Train.Signs.Tau = 0 }, "Signs.Tau = 0"},
		{func(s *session.Setup) {
			s.Train.Signs = session.DefaultSigns()
			s.Train.Signs.MaxFlipFrac = math.NaN()
		}, "Signs.MaxFlipFrac = NaN"},
	} {
		s := session.DefaultSetup()
		c.change(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want an error containing %q", err, c.want)
		}
	}
	// Sign training with the default knobs (the zero SignConfig) or with chosen ones.
	s0 := session.DefaultSetup()
	s0.Train.TrainSigns = true
	if err := s0.Validate(); err != nil {
		t.Errorf("Validate with TrainSigns and the zero SignConfig: %v", err)
	}
	s0.Train.Signs = session.SignConfig{Alpha: 2, Beta: 0, Tau: 127, MaxFlipFrac: 1}
	if err := s0.Validate(); err != nil {
		t.Errorf("Validate with knobs at the ends of their ranges: %v", err)
	}
	if r := (session.SignConfig{}).Resolved(); r != session.DefaultSigns() || s0.Train.Signs.Resolved() != s0.Train.Signs {
		t.Errorf("Resolved: %+v", r)
	}
	if d := session.DefaultSetup().Train; d.TrainSigns || d.Signs != (session.SignConfig{}) {
		t.Errorf("DefaultSetup trains signs: %+v", d)
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
	b = session.DefaultSetup()
	b.Train.TrainSigns = true
	if a.Equal(b) {
		t.Error("Setups with and without TrainSigns are Equal")
	}
	c := b
	c.Train.Signs.Tau = 40
	if b.Equal(c) {
		t.Error("Setups with other sign knobs are Equal")
	}
}

// The sign-matrix helpers, against hand-worked layouts: U [4, 8] with 5 live ranks (columns
// 5…7 padding), V [8, 16] with 5 live ranks (rows 5…7 padding); element e is bit e%8 of
// byte e/8.
func TestSignShapeHelpers(t *testing.T) {
	u := session.SignShape{Name: "model.layers.2.mlp.up_proj.weight.p1.U", Rows: 4, Cols: 8, Live: 5, Layer: 2}
	v := session.SignShape{Name: "model.layers.2.mlp.up_proj.weight.p1.V", Rows: 8, Cols: 16, Live: 5, Layer: 2}
	if u.IsV() || !v.IsV() || u.Elements() != 32 || u.Bytes() != 4 || v.Bytes() != 16 || u.LiveCount() != 20 || v.LiveCount() != 80 {
		t.Fatalf("sizes: U %d elements %d bytes %d live; V %d bytes %d live", u.Elements(), u.Bytes(), u.LiveCount(), v.Bytes(), v.LiveCount())
	}
	for _, c := range []struct {
		s    session.SignShape
		e    int
		live bool
	}{{u, 4, true}, {u, 5, false}, {u, 8 + 4, true}, {u, 31, false}, {u, 32, false}, {u, -1, false},
		{v, 4*16 + 15, true}, {v, 5 * 16, false}, {v, 127, false}} {
		if got := c.s.IsLive(c.e); got != c.live {
			t.Errorf("%s IsLive(%d) = %v", c.s.Name[len(c.s.Name)-1:], c.e, got)
		}
	}
	m, err := u.FlipMask([]int{0, 9, 20})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0b00000001, 0b00000010, 0b00010000, 0}; !bytes.Equal(m, want) {
		t.Errorf("FlipMask = %08b, want %08b", m, want)
	}
	for _, c := range []struct {
		elems []int
		want  string
	}{{[]int{32}, "element 32 outside 0…31"}, {[]int{13}, "element 13 (row 1, column 5) is rank padding (live ranks: 5)"}, {[]int{3, 3}, "element 3 given twice"}} {
		if _, err := u.FlipMask(c.elems); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("FlipMask(%v) = %v, want %q", c.elems, err, c.want)
		}
	}
	bits := []byte{0b10000001, 0}
	for e, want := range map[int]float32{0: 1, 1: -1, 7: 1, 8: -1} {
		if got := session.SignValue(bits, e); got != want {
			t.Errorf("SignValue(%08b, %d) = %v, want %v", bits, e, got, want)
		}
	}
}

// History.SignFlipSeries: the steps that carry flips, one series per layer, 0 where a step
// has fewer layers; nil for a history without flips.
func TestHistorySignFlipSeries(t *testing.T) {
	h := session.History{Steps: []session.StepStats{{Step: 1}, {Step: 2, SignFlips: []int{3, 0, 7}}, {Step: 4, SignFlips: []int{1, 2}}}}
	steps, flips := h.SignFlipSeries()
	if len(steps) != 2 || steps[0] != 2 || steps[1] != 4 || len(flips) != 3 ||
		flips[0][0] != 3 || flips[0][1] != 1 || flips[1][1] != 2 || flips[2][0] != 7 || flips[2][1] != 0 {
		t.Errorf("SignFlipSeries = %v, %v; want [2 4], [[3 1] [0 2] [7 0]]", steps, flips)
	}
	if s, f := (session.History{Steps: []session.StepStats{{Step: 1}}}).SignFlipSeries(); s != nil || f != nil {
		t.Errorf("SignFlipSeries without flips = %v, %v", s, f)
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
		{session.GradCheckSpec{TolGPUHostCoopmat: -1e-3}, "TolGPUHostCoopmat = -0.001"},
		{session.GradCheckSpec{TolGPUHostCoopmat: math.Inf(1)}, "TolGPUHostCoopmat = +Inf"},
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
	// On tensor cores GPU vs host takes TolGPUHostCoopmat (here 2e-3): an error of 1e-3 passes
	// (it would fail the f32 path's 1e-4), 3e-3 fails; FD GPU is judged against GPUF32.
	c := session.GradCheckResult{TensorCores: "on (8×8×8 f16→f32, subgroup 8)", Spec: session.GradCheckSpec{TolGPUHostCoopmat: 2e-3}.Resolved()}
	for _, e := range []float64{1e-3, 3e-3} {
		rw := row("model.norm.weight", 1, 1+e, 1, 1, 1.001)
		rw.GPUF32, rw.ErrFDGPU = 1.0005, session.RelErr(1.001, 1.0005)
		c.Rows = append(c.Rows, rw)
	}
	if f := c.Failures(); !c.Coopmat() || c.TolGPUHost() != 2e-3 || len(f) != 1 || !strings.Contains(f[0], "GPU vs host relative error 0.003 > 0.002") {
		t.Errorf("coopmat Failures = %q (Coopmat %v, TolGPUHost %g)", f, c.Coopmat(), c.TolGPUHost())
	}
	if tab := c.Table(); !strings.Contains(tab, "analytic f32") || !strings.Contains(tab, "tensor cores on (8×8×8") || !strings.Contains(tab, "+1.000500e+00") {
		t.Errorf("coopmat Table:\n%s", tab)
	}
	if r.Coopmat() || r.TolGPUHost() != 1e-4 {
		t.Errorf("f32 result: Coopmat %v, TolGPUHost %g", r.Coopmat(), r.TolGPUHost())
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
		session.Progress{Phase: "step"}, session.Window{Tokens: []int{1, 2}},
		session.StepStats{Step: 2, SignFlips: []int{0, 3}}, session.SignShape{Name: "x.p0.U", Rows: 8, Cols: 8, Live: 5},
		[]int8{-127, 0, 127}}
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
