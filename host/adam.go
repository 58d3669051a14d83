package host

import (
	"fmt"
	"math"
)

// DefaultMetricFloor is the fraction of the RMS of a metric vector's live values below
// which AdamConfig.Relative steps do not shrink (DESIGN.md §6: 5 %).
const DefaultMetricFloor = 0.05

// AdamConfig holds the hyper-parameters of one Adam update (Adam, gpu.Adam).
//
// Relative selects the per-value relative step for the metric scales (h, ℓ, g of a BLR
// path, DESIGN.md §6): the step of value i is proportional to its magnitude,
// lr·max(|θ_i|, Floor·RMS)·m̂_i/(√v̂_i + ε), with RMS = sqrt(mean of θ² over the live values
// of the vector) taken before the update; otherwise plain Adam, lr·m̂_i/(√v̂_i + ε), for the
// norm gains.
type AdamConfig struct {
	LR, Beta1, Beta2, Eps float64
	Relative              bool
	// Floor is the fraction of the live RMS below which a relative step does not shrink;
	// 0 means DefaultMetricFloor. Ignored unless Relative.
	Floor float64
}

// Validate checks the hyper-parameters: lr ≥ 0 finite, β1 and β2 in [0, 1), ε > 0 finite,
// Floor in [0, 1] (0 meaning the default). Errors name the field.
func (c AdamConfig) Validate() error {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("Adam: lr = %g must be finite and ≥ 0", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("Adam: beta1 = %g must be in [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("Adam: beta2 = %g must be in [0, 1)", c.Beta2)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return fmt.Errorf("Adam: eps = %g must be finite and > 0", c.Eps)
	case !(c.Floor >= 0 && c.Floor <= 1):
		return fmt.Errorf("Adam: floor = %g must be in [0, 1]", c.Floor)
	}
	return nil
}

// FloorOrDefault is Floor, or DefaultMetricFloor when Floor is 0.
func (c AdamConfig) FloorOrDefault() float64 {
	if c.Floor == 0 {
		return DefaultMetricFloor
	}
	return c.Floor
}

// Adam applies one Adam step (Kingma & Ba 2015, Algorithm 1, with bias correction) to param
// in place, with its moment estimates m and v (updated in place), for the gradient grad and
// the 1-based step number step:
//
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,
//	m̂ = m/(1−β1^step),  v̂ = v/(1−β2^step),  d = m̂/(√v̂ + ε),
//	θ ← θ − lr·s·d,  s = max(|θ|, floor·RMS_live(θ)) when cfg.Relative, else s = 1,
//
// RMS_live(θ) = sqrt(Σ_live θ²/#live) over the values before this step (0 when none is
// live). live, when not nil, marks the entries that train; the others (rank padding,
// DESIGN.md §6) are set to zero in param, m and v and never move. All slices have one
// length. Errors: an invalid cfg, step < 1, or lengths that differ.
func Adam(param, grad, m, v []float64, live []bool, step int, cfg AdamConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("host.%w", err)
	}
	if step < 1 {
		return fmt.Errorf("host.Adam: step = %d must be ≥ 1", step)
	}
	n := len(param)
	if len(grad) != n || len(m) != n || len(v) != n || (live != nil && len(live) != n) {
		return fmt.Errorf("host.Adam: param, grad, m, v and live have %d, %d, %d, %d and %d values, want one length",
			n, len(grad), len(m), len(v), len(live))
	}
	isLive := func(i int) bool { return live == nil || live[i] }
	var rms float64
	if cfg.Relative {
		var ss float64
		cnt := 0
		for i, x := range param {
			if isLive(i) {
				ss += x * x
				cnt++
			}
		}
		if cnt > 0 {
			rms = math.Sqrt(ss / float64(cnt))
		}
	}
	floor := cfg.FloorOrDefault() * rms
	c1 := 1 / (1 - math.Pow(cfg.Beta1, float64(step)))
	c2 := 1 / (1 - math.Pow(cfg.Beta2, float64(step)))
	for i := range param {
		if !isLive(i) {
			param[i], m[i], v[i] = 0, 0, 0
			continue
		}
		g := grad[i]
		m[i] = cfg.Beta1*m[i] + (1-cfg.Beta1)*g
		v[i] = cfg.Beta2*v[i] + (1-cfg.Beta2)*g*g
		d := m[i] * c1 / (math.Sqrt(v[i]*c2) + cfg.Eps)
		s := 1.0
		if cfg.Relative {
			s = math.Max(math.Abs(param[i]), floor)
		}
		param[i] -= cfg.LR * s * d
	}
	return nil
}
