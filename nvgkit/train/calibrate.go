package train

import (
	"context"
	"fmt"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
)

// calibPassTokens bounds the tokens of one pass of the calibration (its work's rows), so the
// pass needs no more GPU memory than a teacher pass of 16 × 256 tokens.
const calibPassTokens = 4096

// Calibrate runs the calibration pass of cfg (resolved: the zero value is
// DefaultCalibration) on the Teacher net: cfg.Windows windows of cfg.T tokens drawn from
// the training token stream train (data.NewSampler seeded with seed: training text only,
// never held-out), through nvgkit.Calibrate in passes of at most 4096 tokens on a work of
// its own (released at the end), and returns their statistics, a
// compress.NewCalibration(cfg.GramMax) for compress.Options.Calibration. progress, when
// not nil, is called with the windows done after each pass. A streamed teacher works (the
// statistics are gathered layer by layer). Errors: cfg out of range, a stream too short for
// one window, ctx's cause (wrapped), and those of NewWork and nvgkit.Calibrate.
func Calibrate(ctx context.Context, teacher *nvgkit.Net, train []int, cfg CalibrationConfig, seed uint64, progress func(done, total int)) (*compress.Calibration, error) {
	c := cfg.Resolved()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sampler, err := data.NewSampler(train, c.T, seed)
	if err != nil {
		return nil, fmt.Errorf("train.Calibrate: training stream: %w", err)
	}
	windows, err := sampler.Sample(c.Windows)
	if err != nil {
		return nil, fmt.Errorf("train.Calibrate: %w", err)
	}
	for i, w := range windows {
		windows[i] = w[:c.T] // the sampler's windows carry the next token as well
	}
	nb := min(c.Windows, max(1, calibPassTokens/c.T))
	work, err := nvgkit.NewWork(teacher.Device(), teacher, nb, c.T)
	if err != nil {
		return nil, fmt.Errorf("train.Calibrate: %w", err)
	}
	defer work.Release()
	cal := compress.NewCalibration(c.GramMax)
	if err := nvgkit.Calibrate(ctx, teacher, work, windows, cal, progress); err != nil {
		return nil, err
	}
	teacher.Device().FreeScratch() // the pass's temporaries would only add to the peak after it
	return cal, nil
}
