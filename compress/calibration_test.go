package compress

import (
	"math"
	"strings"
	"testing"
)

// TestCalibrationMoments accumulates two blocks of activations of an input shared by two
// weights and one precomputed reduction, and checks E[x_j²] and E[x·xᵀ] against sums
// computed here.
func TestCalibrationMoments(t *testing.T) {
	c := NewCalibration(3)
	q, k := "model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight"
	x1 := []float64{1, -2, 3, 0.5, 0, -1} // 2 tokens × 3 features
	x2 := []float64{2, 2, 2}              // 1 token
	if err := c.Add(x1, 2, 3, q, k); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(x2, 1, 3, k, q); err != nil {
		t.Fatal(err)
	}
	// Two more tokens, (2, 0, 3) and (0, 0, 0), as reductions.
	if err := c.AddMoments([]float64{4, 0, 9}, []float64{4, 0, 6, 0, 0, 0, 6, 0, 9}, 2, q, k); err != nil {
		t.Fatal(err)
	}
	tokens := [][]float64{{1, -2, 3}, {0.5, 0, -1}, {2, 2, 2}, {2, 0, 3}, {0, 0, 0}}
	for _, name := range []string{q, k} {
		ex2, err := c.SecondMoment(name, 3)
		if err != nil {
			t.Fatal(err)
		}
		gram, err := c.Gram(name, 3)
		if err != nil {
			t.Fatal(err)
		}
		for a := 0; a < 3; a++ {
			for b := 0; b < 3; b++ {
				var want float64
				for _, x := range tokens {
					want += x[a] * x[b] / 5
				}
				if math.Abs(gram[a*3+b]-want) > 1e-15 {
					t.Errorf("%s: E[x_%d x_%d] = %g, want %g", name, a, b, gram[a*3+b], want)
				}
				if a == b && math.Abs(ex2[a]-want) > 1e-15 {
					t.Errorf("%s: E[x_%d²] = %g, want %g", name, a, ex2[a], want)
				}
			}
		}
	}
	if c.Tokens(q) != 5 || c.Tokens("other") != 0 || len(c.Names()) != 2 || c.Names()[0] != k {
		t.Errorf("tokens %d, names %v", c.Tokens(q), c.Names())
	}
	// Beyond the Gram limit only the second moments are kept; the weights are √E[x²], floored
	// at 10⁻³ of the largest.
	if err := c.AddMoments([]float64{0, 4e6, 1, 1}, nil, 1, "z"); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Gram("z", 4); g != nil || err != nil {
		t.Errorf("Gram beyond the limit: %v, %v", g, err)
	}
	s, err := c.inputWeights("z", 4)
	if err != nil || s[0] != 2 || s[1] != 2000 || s[2] != 2 || s[3] != 2 {
		t.Errorf("weights %v, %v: want [2 2000 2 2]", s, err)
	}
}

func TestCalibrationErrors(t *testing.T) {
	c := NewCalibration(2)
	if err := c.Add([]float64{1, 2, 3, 4}, 2, 2, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Add([]float64{1, 2, 3}, 1, 3, "c"); err != nil {
		t.Fatal(err)
	}
	var nilCal *Calibration
	for _, tc := range []struct {
		err  error
		want string
	}{
		{c.Add([]float64{1, 2, 3}, 1, 3, "a", "b"), "calibration a, b: 3 input features, but earlier additions had 2"},
		{c.Add([]float64{1, 2}, 1, 2, "a"), "calibration a: these weights were added as a, b before"},
		{c.Add([]float64{1, 2}, 1, 2, "b", "d"), "calibration b, d: these weights were added as a, b before"},
		{c.Add([]float64{1, 2}, 1, 2, "0", "a"), "calibration 0, a: a was added with a, b before"},
		{c.Add([]float64{1, 2, 3}, 2, 2, "a", "b"), "calibration a, b: 3 values for a 2×2 block"},
		{c.Add([]float64{1, math.NaN()}, 1, 2, "a", "b"), "calibration a, b: input (token 0, feature 1) = NaN is not finite"},
		{c.Add(nil, 0, 2, "a"), "calibration a: 0 values for a 0×2 block"},
		{c.Add([]float64{1, 2}, 1, 2), "statistics for no weight"},
		{c.AddMoments([]float64{1, -1}, []float64{1, 0, 0, -1}, 1, "a", "b"), "calibration a, b: sum of squares of feature 1 = -1"},
		{c.AddMoments([]float64{1, math.Inf(1)}, nil, 1, "a", "b"), "feature 1 = +Inf"},
		{c.AddMoments([]float64{1, 1}, []float64{1, 0, 0, 1}, 0, "a", "b"), "calibration a, b: 0 tokens, 2 features"},
		{c.AddMoments([]float64{1, 1}, nil, 1, "a", "b"), "2 features with a Gram limit of 2: the Gram must be given exactly when n ≤ the limit (given: false)"},
		{c.AddMoments([]float64{1, 1, 1}, make([]float64, 9), 1, "c"), "3 features with a Gram limit of 2: the Gram must be given exactly when n ≤ the limit (given: true)"},
		{c.AddMoments([]float64{1, 1}, []float64{1, 0.5, 0.4, 1}, 1, "a", "b"), "Gram entries (1, 0) = 0.4 and (0, 1) = 0.5: want finite and symmetric"},
		{c.AddMoments([]float64{1, 1}, []float64{1, 0, 0, 2}, 1, "a", "b"), "Gram diagonal 1 = 2, but the sum of squares is 1"},
		{c.AddMoments([]float64{1, 1}, []float64{1, 0, 0}, 1, "a", "b"), "Gram of 3 values for 2 features"},
		{(&Calibration{}).AddMoments([]float64{1}, nil, 1, "a"), "nil Calibration (use NewCalibration)"},
		{nilCal.Add([]float64{1}, 1, 1, "a"), "nil Calibration"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%v, want %q", tc.err, tc.want)
		}
	}
	if c.Tokens("a") != 2 || c.Tokens("d") != 0 {
		t.Errorf("failed additions changed the statistics: %d tokens, d %d", c.Tokens("a"), c.Tokens("d"))
	}
	if _, err := c.SecondMoment("e", 2); err == nil || !strings.Contains(err.Error(), "no input statistics for e") {
		t.Errorf("missing: %v", err)
	}
	if _, err := c.Gram("a", 4); err == nil || !strings.Contains(err.Error(), "statistics of 2 input features, but the weight has n = 4") {
		t.Errorf("wrong n: %v", err)
	}
	if nilCal.Names() != nil || nilCal.Tokens("a") != 0 {
		t.Error("nil Calibration: names or tokens")
	}
}
