package nvgkit

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// AdamConfig holds the hyper-parameters of a Student's Adam update (DESIGN.md §6).
type AdamConfig struct {
	// LR is the relative step of the metric scales (h, ℓ, g): a value moves by about
	// LR·max(|θ|, Floor·RMS) per step, RMS over its vector's live values.
	LR float64
	// Beta1, Beta2 are the moment decay rates, in [0, 1); Eps (> 0) is added to √v̂.
	Beta1, Beta2, Eps float64
	// Floor is the fraction of the live RMS below which a metric value's step does not
	// shrink, in [0, 1] (0 means gpu.DefaultMetricFloor, 5 %).
	Floor float64
	// GainLR is the plain-Adam learning rate of the RMSNorm gains (absolute: a gain moves by
	// about GainLR per step).
	GainLR float64
}

// DefaultAdam returns the default hyper-parameters: LR 2e-3 (relative), Beta1 0.9,
// Beta2 0.999, Eps 1e-12 (the KL's gradients are small: 1e-8 would swamp √v̂ of gradients
// below ~1e-7), Floor 0.05 (DESIGN.md §6), GainLR 1e-3.
func DefaultAdam() AdamConfig {
	return AdamConfig{LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-12, Floor: gpu.DefaultMetricFloor, GainLR: 1e-3}
}

// Validate checks the fields: LR and GainLR finite and ≥ 0, Beta1 and Beta2 in [0, 1), Eps
// finite and > 0, Floor in [0, 1]; all within f32. The error names the field.
func (c AdamConfig) Validate() error {
	switch {
	case !(c.LR >= 0) || c.LR > math.MaxFloat32:
		return fmt.Errorf("AdamConfig.LR = %g must be finite and ≥ 0", c.LR)
	case !(c.GainLR >= 0) || c.GainLR > math.MaxFloat32:
		return fmt.Errorf("AdamConfig.GainLR = %g must be finite and ≥ 0", c.GainLR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("AdamConfig.Beta1 = %g must be in [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("AdamConfig.Beta2 = %g must be in [0, 1)", c.Beta2)
	case !(c.Eps > 0) || c.Eps > math.MaxFloat32 || float32(c.Eps) == 0:
		return fmt.Errorf("AdamConfig.Eps = %g must be > 0 and finite in f32 (not rounding to 0: the update divides by √v̂ + ε)", c.Eps)
	case !(c.Floor >= 0 && c.Floor <= 1):
		return fmt.Errorf("AdamConfig.Floor = %g must be in [0, 1]", c.Floor)
	}
	return nil
}

// Adam applies one Adam step (Kingma & Ba 2015, bias-corrected; gpu.MultiTensorAdam,
// host.Adam) to every trainable of a Student from its accumulated gradient, step being the
// 1-based step number (the bias corrections use it): the metric scales (h, ℓ, g of every BLR
// path) with the relative step lr·max(|θ|, Floor·RMS_live)·m̂/(√v̂ + ε) at cfg.LR, the
// RMSNorm gains with plain Adam at cfg.GainLR. Masked rank padding (ℓ past the live rank,
// with its moments) stays exactly zero. One submit, two dispatches per trainables arena;
// gradients are not cleared (ZeroGrads). The values stay f32 (not rounded to f16: see
// RoundMetricF16 and Export). Errors, before anything is submitted: an invalid cfg,
// step < 1, a nil/released/Teacher net; then a GPU error.
func Adam(net *Net, cfg AdamConfig, step int) error {
	if err := net.requireStudent("Adam"); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("nvgkit.Adam: %w", err)
	}
	if step < 1 {
		return fmt.Errorf("nvgkit.Adam: step = %d must be ≥ 1", step)
	}
	metric := gpu.AdamConfig{LR: cfg.LR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, Relative: true, Floor: cfg.Floor}
	gain := gpu.AdamConfig{LR: cfg.GainLR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps}
	err := net.dev.Run(func(r *gpu.Recorder) error {
		for _, a := range net.st.arenas {
			if err := gpu.MultiTensorAdam(r, a, step, metric, gain); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nvgkit.Adam: %w", err)
	}
	return nil
}
