package compress

import (
	"math"
	"strings"
	"testing"
)

// TestCalibrationMoments accumulates two blocks of activations and one precomputed sum of
// squares and checks E[x_j²] against the mean of squares computed here.
func TestCalibrationMoments(t *testing.T) {
	c := NewCalibration()
	name := "model.layers.0.mlp.down_proj.weight"
	x1 := []float64{1, -2, 3, 0.5, 0, -1} // 2 tokens × 3 features
	x2 := []float64{2, 2, 2}              // 1 token
	if err := c.Add(name, x1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(name, x2, 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.AddSumSq(name, []float64{4, 0, 9}, 2); err != nil {
		t.Fatal(err)
	}
	want := []float64{(1 + 0.25 + 4 + 4) / 5.0, (4 + 0 + 4 + 0) / 5.0, (9 + 1 + 4 + 9) / 5.0}
	got, err := c.SecondMoment(name, 3)
	if err != nil {
		t.Fatal(err)
	}
	for j := range want {
		if math.Abs(got[j]-want[j]) > 1e-15 {
			t.Errorf("E[x_%d²] = %g, want %g", j, got[j], want[j])
		}
	}
	if c.Tokens(name) != 5 || c.Tokens("other") != 0 || len(c.Names()) != 1 || c.Names()[0] != name {
		t.Errorf("tokens %d, names %v", c.Tokens(name), c.Names())
	}
	// The weights: √E[x²], floored at 10⁻³ of the largest.
	if err := c.AddSumSq("z", []float64{0, 4e6, 1}, 1); err != nil {
		t.Fatal(err)
	}
	s, err := c.inputWeights("z", 3)
	if err != nil || s[0] != 2 || s[1] != 2000 || s[2] != 2 {
		t.Errorf("weights %v, %v: want [2 2000 2]", s, err)
	}
}

func TestCalibrationErrors(t *testing.T) {
	c := NewCalibration()
	if err := c.Add("a", []float64{1, 2, 3, 4}, 2, 2); err != nil {
		t.Fatal(err)
	}
	var nilCal *Calibration
	for _, tc := range []struct {
		err  error
		want string
	}{
		{c.Add("a", []float64{1, 2, 3}, 1, 3), "calibration a: 3 input features, but earlier additions had 2"},
		{c.Add("a", []float64{1, 2, 3}, 2, 2), "calibration a: 3 values for a 2×2 block"},
		{c.Add("a", []float64{1, math.NaN()}, 1, 2), "calibration a: input (token 0, feature 1) = NaN is not finite"},
		{c.Add("a", nil, 0, 2), "calibration a: 0 values for a 0×2 block"},
		{c.AddSumSq("a", []float64{1, -1}, 1), "calibration a: sum of squares of feature 1 = -1"},
		{c.AddSumSq("a", []float64{1, math.Inf(1)}, 1), "feature 1 = +Inf"},
		{c.AddSumSq("a", []float64{1, 1}, 0), "calibration a: 0 tokens, 2 features"},
		{(&Calibration{}).AddSumSq("a", []float64{1}, 1), "nil Calibration (use NewCalibration)"},
		{nilCal.Add("a", []float64{1}, 1, 1), "nil Calibration"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%v, want %q", tc.err, tc.want)
		}
	}
	if c.Tokens("a") != 2 {
		t.Errorf("failed additions changed the tokens: %d", c.Tokens("a"))
	}
	if _, err := c.SecondMoment("b", 2); err == nil || !strings.Contains(err.Error(), "no input statistics for b") {
		t.Errorf("missing: %v", err)
	}
	if _, err := c.SecondMoment("a", 4); err == nil || !strings.Contains(err.Error(), "statistics of 2 input features, but the weight has n = 4") {
		t.Errorf("wrong n: %v", err)
	}
	if nilCal.Names() != nil || nilCal.Tokens("a") != 0 {
		t.Error("nil Calibration: names or tokens")
	}
}
