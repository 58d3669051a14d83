package nvgkit

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit/optim"
)

// Adam applies one Adam step (Kingma & Ba 2015, bias-corrected; gpu.MultiTensorAdam,
// host.Adam) to every trainable of a Student from its accumulated gradient, at learning rate
// lr (≥ 0: the step's rate, o.LRAt of the step in a scheduled run, o.LR without a schedule)
// with o's betas, Eps and MetricFloor (optim.Settings.Adam), step being the 1-based count of
// updates applied (the bias corrections use it): the metric scales (h, ℓ, g of every BLR
// path) with the relative step lr·max(|θ|, MetricFloor·RMS_live)·m̂/(√v̂ + ε), the RMSNorm
// gains with plain Adam at lr. Masked rank padding (ℓ past the live rank, with its moments)
// stays exactly zero. One submit, two dispatches per trainables arena; gradients are not
// cleared (ZeroGrads). The values stay f32 (not rounded to f16: see RoundMetricF16 and
// Export). Errors, before anything is submitted: invalid settings (optim.Settings.Validate),
// lr not finite and ≥ 0 in f32, step < 1, a nil/released/Teacher net; then a GPU error.
func Adam(net *Net, o optim.Settings, lr float64, step int) error {
	if err := net.requireStudent("Adam"); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("nvgkit.Adam: %w", err)
	}
	if !(lr >= 0) || lr > math.MaxFloat32 {
		return fmt.Errorf("nvgkit.Adam: lr = %g must be finite and ≥ 0", lr)
	}
	if step < 1 {
		return fmt.Errorf("nvgkit.Adam: step = %d must be ≥ 1", step)
	}
	metric, gain := o.Adam(lr)
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
