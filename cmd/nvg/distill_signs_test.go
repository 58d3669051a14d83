package main

import (
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
)

// TestDistillSignFlags: without --train-signs the run's Signs stay zero (a metric-only run's
// distill.json is unchanged); with it, the knobs are the defaults overridden by the flags
// given, and bad values are refused by the config's validation.
func TestDistillSignFlags(t *testing.T) {
	s, _, _, err := parseDistillFlags(commands["distill"], []string{"--sign-tau", "30"})
	if err != nil || s.Config.TrainSigns || s.Config.Signs != (nvgkit.SignConfig{}) {
		t.Fatalf("no --train-signs: %+v, %v", s.Config.Signs, err)
	}
	s, _, _, err = parseDistillFlags(commands["distill"], []string{"--train-signs", "--sign-tau", "30", "--sign-max-flip", "0.002"})
	want := nvgkit.DefaultSigns()
	want.Tau, want.MaxFlipFrac = 30, 0.002
	if err != nil || !s.Config.TrainSigns || s.Config.Signs != want {
		t.Fatalf("--train-signs: %+v, want %+v (%v)", s.Config.Signs, want, err)
	}
	if err := s.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	s, _, _, _ = parseDistillFlags(commands["distill"], []string{"--train-signs", "--sign-tau", "0"})
	if err := s.Config.Validate(); err == nil {
		t.Fatal("--sign-tau 0 accepted")
	}
}
