package main

import (
	"cmp"
	"flag"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// calibFlags holds the --calib-* flags until apply puts them in a Setup's Calibration.
type calibFlags struct{ windows, t, gramMax int }

// bind adds --calib-windows, --calib-t and --calib-gram-max to fs, their defaults c's
// (resolved: a --config file's, else train.DefaultCalibration).
func (f *calibFlags) bind(fs *flag.FlagSet, c train.CalibrationConfig) {
	c = c.Resolved()
	fs.IntVar(&f.windows, "calib-windows", c.Windows, "with --init refine: calibration windows drawn from the training text")
	fs.IntVar(&f.t, "calib-t", c.T, "with --init refine: tokens per calibration window")
	fs.IntVar(&f.gramMax, "calib-gram-max", c.GramMax, "with --init refine: keep the Gram xᵀx of every projection input of at most this many features (8·n² bytes of host memory each; 0: second moments only)")
}

// config returns the flags' calibration: the zero value when they are the defaults (a run's
// distill.json then leaves it out, as before --init existed).
func (f calibFlags) config() train.CalibrationConfig {
	c := train.CalibrationConfig{Windows: f.windows, T: f.t, GramMax: f.gramMax}
	if c == train.DefaultCalibration() {
		return train.CalibrationConfig{}
	}
	return c
}

// check refuses an --init that is not dual-svid or refine and --calib-* values out of range,
// naming the flag.
func (f calibFlags) check(init string) error {
	if _, err := compress.ParseInit(cmp.Or(init, compress.InitDualSVID.String())); err != nil {
		return usagef("--init must be dual-svid or refine, got %q", init)
	}
	switch {
	case f.windows < 1:
		return usagef("--calib-windows must be ≥ 1, got %d", f.windows)
	case f.t < 1:
		return usagef("--calib-t must be ≥ 1, got %d", f.t)
	case f.gramMax < 0:
		return usagef("--calib-gram-max must be ≥ 0, got %d", f.gramMax)
	}
	return nil
}

// initFlagSet adds nvg distill's --init, --calib-*, --block-steps and --finish-steps to fs
// (issue 36: the data-aware initialisation, the block-wise reconstruction and the scale-only
// finish), their defaults s's.
func initFlagSet(fs *flag.FlagSet, s *train.RunFile, f *calibFlags) {
	fs.StringVar(&s.Init, "init", cmp.Or(s.Init, compress.InitDualSVID.String()), "initial factorisation of the compression: dual-svid, or refine (a calibration pass of the teacher over training windows, then signs and scales refined in the metric of its input statistics; DESIGN.md §5)")
	f.bind(fs, s.Calibration)
	fs.IntVar(&s.Train.BlockSteps, "block-steps", s.Train.BlockSteps, "steps per decoder layer of a block-wise reconstruction phase before the KL: layer 0, 1, … in turn, each alone, trained to reproduce the teacher's output of the layer from the student's own input (normalised MSE; N × layers of the --steps steps; DESIGN.md \"Block-wise reconstruction\"; 0: none)")
	fs.IntVar(&s.Train.FinishSteps, "finish-steps", s.Train.FinishSteps, "with --train-signs: the last N of the --steps steps are a scale-only finish (signs frozen, the scales and norm gains trained on the KL at the schedule's learning rates; 0: none)")
}
