package optim_test

import (
	"errors"
	"math"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit/optim"
)

// The one default is nvg distill's (README, DESIGN.md §6 "Defaults"), and it is valid.
func TestDefault(t *testing.T) {
	want := optim.Settings{LR: 0.05, Warmup: 3, MinLRFrac: 0.1, ClipNorm: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-12, MetricFloor: 0.05}
	if d := optim.Default(); d != want {
		t.Errorf("Default() = %+v, want %+v", d, want)
	}
	if err := optim.Default().Validate(); err != nil {
		t.Error(err)
	}
}

// Validate names the first field out of range, its value and its range; off values (no
// warm-up, no clip, decay to 0) are valid.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		field string
		set   func(*optim.Settings)
	}{
		{"LR", func(s *optim.Settings) { s.LR = 0 }},
		{"LR", func(s *optim.Settings) { s.LR = math.Inf(1) }},
		{"LR", func(s *optim.Settings) { s.LR = 1e39 }}, // not finite in f32
		{"MinLRFrac", func(s *optim.Settings) { s.MinLRFrac = 1.5 }},
		{"ClipNorm", func(s *optim.Settings) { s.ClipNorm = math.NaN() }},
		{"Beta1", func(s *optim.Settings) { s.Beta1 = 1 }},
		{"Beta2", func(s *optim.Settings) { s.Beta2 = -0.5 }},
		{"Eps", func(s *optim.Settings) { s.Eps = 0 }},
		{"Eps", func(s *optim.Settings) { s.Eps = 5e-324 }}, // 0 in f32
		{"MetricFloor", func(s *optim.Settings) { s.MetricFloor = 2 }},
	} {
		s := optim.Default()
		c.set(&s)
		var fe *optim.FieldError
		if err := s.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a FieldError naming %s", s, err, c.field)
		}
	}
	off := optim.Default()
	off.Warmup, off.MinLRFrac, off.ClipNorm = -1, -1, 0
	if err := off.Validate(); err != nil {
		t.Errorf("off values: %v", err)
	}
}

// LRAt is the reference recipe's schedule: linear warm-up times a cosine from LR to
// MinLRFrac·LR over the span, at the floor after it (values computed here from the formula).
func TestLRAt(t *testing.T) {
	s := optim.Settings{LR: 0.1, Warmup: 4, MinLRFrac: 0.2}
	cos := func(step, span float64) float64 { return 0.2 + 0.8*0.5*(1+math.Cos(math.Pi*step/span)) }
	for _, c := range []struct {
		step, span int
		want       float64
	}{
		{1, 10, 0.1 * 0.25 * cos(1, 10)},
		{4, 10, 0.1 * cos(4, 10)},
		{10, 10, 0.1 * 0.2},
		{15, 10, 0.1 * 0.2},
	} {
		if got := s.LRAt(c.step, c.span); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("LRAt(%d, %d) = %.17g, want %.17g", c.step, c.span, got, c.want)
		}
	}
	s.Warmup, s.MinLRFrac = 0, -1 // no warm-up, decay to 0
	if got := s.LRAt(10, 10); math.Abs(got) > 1e-18 {
		t.Errorf("decay to 0: LRAt(10, 10) = %g", got)
	}
}

// Adam maps the settings onto the kernel's arguments at the step's rate: the metric's
// relative step with the floor, the gains' plain step, the same moments.
func TestAdam(t *testing.T) {
	s := optim.Settings{LR: 1, Beta1: 0.8, Beta2: 0.9, Eps: 1e-10, MetricFloor: 0.25}
	metric, gain := s.Adam(0.003)
	if want := (gpu.AdamConfig{LR: 0.003, Beta1: 0.8, Beta2: 0.9, Eps: 1e-10, Relative: true, Floor: 0.25}); metric != want {
		t.Errorf("metric %+v, want %+v", metric, want)
	}
	if want := (gpu.AdamConfig{LR: 0.003, Beta1: 0.8, Beta2: 0.9, Eps: 1e-10}); gain != want {
		t.Errorf("gain %+v, want %+v", gain, want)
	}
}
