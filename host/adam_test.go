package host

import (
	"math"
	"testing"
)

// TestAdamFirstStep: from zero moments, step 1 gives m̂ = g and v̂ = g², so d = g/(|g| + ε):
// plain Adam moves each value by lr·d; the relative mode by lr·max(|θ|, 0.05·RMS_live)·d;
// masked entries become and stay zero.
func TestAdamFirstStep(t *testing.T) {
	cfg := AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	theta := []float64{2, -0.01, 1, 5}
	grad := []float64{0.5, -2, 3, 7}
	live := []bool{true, true, true, false}
	rms := math.Sqrt((4 + 0.0001 + 1) / 3)
	for _, rel := range []bool{false, true} {
		cfg.Relative = rel
		p := append([]float64(nil), theta...)
		m, v := make([]float64, 4), []float64{0, 0, 0, 1}
		if err := Adam(p, grad, m, v, live, 1, cfg); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			d := grad[i] / (math.Abs(grad[i]) + cfg.Eps)
			s := 1.0
			if rel {
				s = math.Max(math.Abs(theta[i]), 0.05*rms)
			}
			if want := theta[i] - cfg.LR*s*d; math.Abs(p[i]-want) > 1e-15 {
				t.Errorf("relative=%v: θ[%d] = %g, want %g", rel, i, p[i], want)
			}
		}
		if p[3] != 0 || m[3] != 0 || v[3] != 0 {
			t.Errorf("relative=%v: masked entry θ, m, v = %g, %g, %g, want 0", rel, p[3], m[3], v[3])
		}
	}
	if err := Adam(theta, grad, make([]float64, 4), make([]float64, 4), nil, 0, cfg); err == nil {
		t.Error("step 0 accepted")
	}
	if err := Adam(theta, grad[:3], make([]float64, 4), make([]float64, 4), nil, 1, cfg); err == nil {
		t.Error("short grad accepted")
	}
	if err := Adam(theta, grad, make([]float64, 4), make([]float64, 4), nil, 1, AdamConfig{LR: 1, Beta1: 1, Beta2: 0.9, Eps: 1e-8}); err == nil {
		t.Error("beta1 = 1 accepted")
	}
}
