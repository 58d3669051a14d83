package nvgkit

import (
	"fmt"
	"math"
)

// SetLossScale sets the factor Step applies to every token's KL gradient on work: the
// gradients Step accumulates are those of scale·Σ_tokens KL. 0 (the default) means
// 1/(work.NB·work.T), the gradient of the mean over the step's tokens. Data parallelism and
// gradient accumulation set 1/(global rows), so that the parts' gradients sum to the
// gradient of the mean over the whole batch (docs/DESIGN.md "Data parallelism"). The loss
// Step and LossOnly report is always the mean over their own windows. Errors: a nil or
// released work, or a scale that is negative or not finite (named).
func SetLossScale(work *Work, scale float64) error {
	if work == nil || work.released {
		return fmt.Errorf("nvgkit.SetLossScale: nil or released work")
	}
	if scale < 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("nvgkit.SetLossScale: scale %g, want a finite value ≥ 0 (0: 1/(nb·t))", scale)
	}
	work.lossScale = scale
	return nil
}

// klScale is the scale recordHead passes to gpu.KLLossBackward.
func (w *Work) klScale() float64 {
	if w.lossScale != 0 {
		return w.lossScale
	}
	return 1 / float64(w.NB*w.T)
}
