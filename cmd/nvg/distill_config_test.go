package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// Without --config the flags' defaults are train.DefaultTrainConfig, the one table of
// defaults (the values nvg distill always had: 24 steps × 4 × 64 tokens, lr 0.05, …).
func TestDistillDefaultsAreTheLibrarys(t *testing.T) {
	s, _, set, err := parseDistillFlags(commands["distill"], nil)
	if err != nil || len(set) != 0 {
		t.Fatal(err, set)
	}
	want := train.TrainConfig{Steps: 24, NB: 4, T: 64, K: 32, EvalEvery: 8, EvalWindows: 8, Seed: 1, Keep: 2, ActivationBudget: 1 << 30,
		Settings:   optim.Settings{LR: 0.05, Warmup: 3, MinLRFrac: 0.1, ClipNorm: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-12, MetricFloor: 0.05},
		HiddenLoss: "mse", HiddenWeight: 1, HiddenLayers: "every:4"}
	if s.Train != want || s.Train != train.DefaultTrainConfig() || s.BitsPerWeight != 1 || s.Paths != "auto" || s.Init != "refine" || s.Seed != 1 || s.Teacher != "" || s.TrainFiles != nil {
		t.Errorf("defaults %+v, want config %+v", s, want)
	}
	// --hidden-loss none is the KL alone (TrainConfig's ""), also over a --config file's term.
	conf := writeConfig(t, `{"config": {"hidden_loss": "cosine"}}`)
	for _, args := range [][]string{{"--hidden-loss", "none"}, {"--config", conf, "--hidden-loss", "none"}} {
		if s, _, _, err := parseDistillFlags(commands["distill"], args); err != nil || s.Train.HiddenLoss != "" {
			t.Errorf("%v: HiddenLoss %q, %v; want \"\"", args, s.Train.HiddenLoss, err)
		}
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A --config file sets what it gives over the defaults; flags on the command line override
// it, before or after --config.
func TestDistillConfigFile(t *testing.T) {
	p := writeConfig(t, `{"bits_per_weight_target": 0.5, "paths": "1", "seed": 7, "train_files": ["a.go", "b.go"],
		"config": {"steps": 7, "lr": 0.01, "min_lr_frac": 0.2, "eval_every": 0, "clip_norm": 0}}`)
	for _, args := range [][]string{{"--config", p, "--steps", "3", "--clip", "0.5"}, {"--steps", "3", "--config", p, "--clip", "0.5"}} {
		s, _, set, err := parseDistillFlags(commands["distill"], args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		c := s.Train
		if c.Steps != 3 || c.ClipNorm != 0.5 || c.LR != 0.01 || c.MinLRFrac != 0.2 || c.EvalEvery != 0 || c.NB != 4 || c.Warmup != 3 ||
			s.BitsPerWeight != 0.5 || s.Paths != "1" || s.Seed != 7 || c.Seed != 7 || strings.Join(s.TrainFiles, ",") != "a.go,b.go" {
			t.Errorf("%v: settings %+v", args, s)
		}
		if !set["config"] || !set["steps"] || set["lr"] {
			t.Errorf("%v: flags set %v", args, set)
		}
	}
	// config.seed alone is the seed too.
	if s, _, _, err := parseDistillFlags(commands["distill"], []string{"--config", writeConfig(t, `{"config": {"seed": 9}}`)}); err != nil || s.Seed != 9 || s.Train.Seed != 9 {
		t.Errorf("config.seed alone: seed %d, config.seed %d, %v", s.Seed, s.Train.Seed, err)
	}
}

// A bad --config file is a usage error naming the file and what is wrong with it.
func TestDistillConfigErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"config": {"stepz": 3}}`, `unknown field "stepz"`},
		{`{"bogus": 1}`, `unknown field "bogus"`},
		{`{"config": {"steps": "ten"}}`, `field "config.steps" is a JSON string, want an integer`},
		{`{"bits_per_weight_target": true}`, `field "bits_per_weight_target" is a JSON bool, want a number`},
		{`{"train_files": "a.go"}`, `field "train_files" is a JSON string, want an array`},
		{`{"config": {"steps": 3}`, "not JSON"},
		{``, "empty file"},
		{" \n", "empty file"},
		{`null`, "holds null, want a JSON object"},
		{`[1, 2]`, "holds an array, want a JSON object"},
		{`3`, "holds a number or not JSON, want a JSON object"},
		{`{} {}`, "more than one JSON value"},
		{`{"seed": 2, "config": {"seed": 3}}`, "config.seed 3 differs from seed 2"},
		// One rule for JSON (issue 34: the last of two took effect silently).
		{`{"config": {"steps": 3, "steps": 300}}`, `duplicate key "steps" in config`},
		{`{"bits_per_weight_target": 1, "bits_per_weight_target": 2}`, `duplicate key "bits_per_weight_target" at the top level`},
	} {
		p := writeConfig(t, tc.body)
		_, _, _, err := parseDistillFlags(commands["distill"], []string{"--config", p})
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error naming %s and %q", tc.body, err, p, tc.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.json")
	if _, _, _, err := parseDistillFlags(commands["distill"], []string{"--config", missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	// A file's value that no flag checks is still checked (Validate), and --config cannot
	// change a run being resumed.
	for _, args := range [][]string{
		{"distill", "--config", writeConfig(t, `{"config": {"min_lr_frac": 3}}`)},
		{"distill", "--resume", t.TempDir(), "--config", writeConfig(t, `{}`)},
	} {
		if _, stderr, code := capture(t, args); code != 2 || !strings.Contains(stderr, "MinLRFrac") && !strings.Contains(stderr, "--config cannot") {
			t.Errorf("nvg %v: exit %d, %q; want 2", args, code, stderr)
		}
	}
}

// --activation-budget-mib sets TrainConfig.ActivationBudget in MiB and refuses what is not a
// whole number of MiB ≥ 0, naming the flag.
func TestDistillActivationBudgetFlag(t *testing.T) {
	for arg, want := range map[string]int64{"0": 0, "64": 64 << 20, "2048": 2 << 30} {
		s, _, set, err := parseDistillFlags(commands["distill"], []string{"--activation-budget-mib", arg})
		if err != nil || !set["activation-budget-mib"] || s.Train.ActivationBudget != want {
			t.Errorf("--activation-budget-mib %s: budget %d, set %v, err %v; want %d", arg, s.Train.ActivationBudget, set, err, want)
		}
	}
	for _, arg := range []string{"-1", "1.5", "lots", "8796093022208"} { // the last: 2⁴³ MiB = 2⁶³ bytes
		_, _, _, err := parseDistillFlags(commands["distill"], []string{"--activation-budget-mib", arg})
		if err == nil || !strings.Contains(err.Error(), "activation-budget-mib") {
			t.Errorf("--activation-budget-mib %s: err %v, want an error naming the flag", arg, err)
		}
	}
}

// A budget of 0 survives a settings file (a run's distill.json read back with --config): the
// field is written even when 0, so the 1 GiB default does not come back.
func TestDistillActivationBudgetZeroRoundTrip(t *testing.T) {
	s, _, _, err := parseDistillFlags(commands["distill"], []string{"--activation-budget-mib", "0"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, _, err := parseDistillFlags(commands["distill"], []string{"--config", writeConfig(t, string(b))})
	if err != nil || s2.Train.ActivationBudget != 0 {
		t.Errorf("budget 0 through --config: %d, %v (file %s)", s2.Train.ActivationBudget, err, b)
	}
}
