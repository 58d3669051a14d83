package main

import (
	"flag"
	"strconv"

	"github.com/nvg-project/nvg/nvgkit/train"
)

// signFlags holds nvg distill's --sign-* knobs until apply puts them in the run's
// TrainConfig (only for a --train-signs run, so that a metric-only run's distill.json and
// outputs stay as they were).
type signFlags struct {
	alpha, beta, maxFlip float64
	tau                  int
	seed                 uint
}

// signFlagSet adds --train-signs and the --sign-* knobs to fs, their defaults tc's
// (train.TrainConfig.SignKnobs: a --config file's, else nvgkit.DefaultSigns).
func signFlagSet(fs *flag.FlagSet, tc *train.TrainConfig, f *signFlags) {
	k := tc.SignKnobs()
	fs.BoolVar(&tc.TrainSigns, "train-signs", tc.TrainSigns, "also train the BLR factors' signs (8 bits of state per sign; DESIGN.md \"Sign learning\"); implies --keep-final")
	fs.Float64Var(&f.alpha, "sign-alpha", shortest64(k.Alpha), "with --train-signs: score units added per RMS of sign-gradient pressure per step")
	fs.Float64Var(&f.beta, "sign-beta", shortest64(k.Beta), "with --train-signs: score decay per step, in [0, 1]")
	fs.IntVar(&f.tau, "sign-tau", k.Tau, "with --train-signs: least score (1…127) at which a sign may flip")
	fs.Float64Var(&f.maxFlip, "sign-max-flip", k.MaxFlipFrac, "with --train-signs: most flips per step, as a fraction of each sign matrix")
	fs.UintVar(&f.seed, "sign-seed", uint(k.Seed), "with --train-signs: seed of the scores' stochastic rounding")
}

// apply sets tc.Signs from the flags when the run trains signs (TrainConfig.Validate checks
// the values).
func (f signFlags) apply(tc *train.TrainConfig) {
	if !tc.TrainSigns {
		return
	}
	tc.Signs.Alpha, tc.Signs.Beta, tc.Signs.Tau = float32(f.alpha), float32(f.beta), f.tau
	tc.Signs.MaxFlipFrac, tc.Signs.Seed = f.maxFlip, uint32(f.seed)
}

// shortest64 is x as the float64 of its shortest decimal form (0.95, not 0.949999988…), so a
// float32 knob's flag default prints and round-trips as it was written.
func shortest64(x float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	return v
}
