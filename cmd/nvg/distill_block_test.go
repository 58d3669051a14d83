package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// TestDistillBlockFlags: --block-steps reaches the run's TrainConfig (0 by default), a
// --config file's block_steps too; a negative value, and one whose block phase would leave
// no KL step with the teacher's layers (known once the teacher is opened, before any work),
// are usage errors naming the flag, its bound and the layers; a resume cannot change it.
func TestDistillBlockFlags(t *testing.T) {
	s, _, _, err := parseDistillFlags(commands["distill"], nil)
	if err != nil || s.Train.BlockSteps != 0 || s.Train.BlockLayers != 0 {
		t.Fatalf("defaults: block steps %d, layers %d, %v", s.Train.BlockSteps, s.Train.BlockLayers, err)
	}
	if s, _, _, err = parseDistillFlags(commands["distill"], []string{"--block-steps", "3", "--steps", "40"}); err != nil || s.Train.BlockSteps != 3 {
		t.Fatalf("--block-steps 3: %d, %v", s.Train.BlockSteps, err)
	}
	conf := writeConfig(t, `{"config": {"steps": 40, "block_steps": 4}}`)
	if s, _, _, err = parseDistillFlags(commands["distill"], []string{"--config", conf}); err != nil || s.Train.BlockSteps != 4 {
		t.Fatalf("--config: block steps %d, %v", s.Train.BlockSteps, err)
	}
	run0 := filepath.Join(t.TempDir(), "none")
	checkUsageErrors(t, []usageCase{
		{[]string{"distill", "--block-steps", "-1"}, "--block-steps must be ≥ 0 (0: no block-wise reconstruction phase), got -1"},
		{[]string{"distill", "--block-steps", "30"}, "--block-steps must be ≤ 23 with --steps = 24, --finish-steps = 0 and at least one decoder layer"},
		{[]string{"distill", "--block-steps", "3", "-o", filepath.Join(t.TempDir(), "run")},
			"--block-steps must be ≤ 2 with --steps = 24, --finish-steps = 0 and 8 decoder layers: the block phase takes --block-steps steps per decoder layer out of --steps, and at least one KL step stays, got 3"},
		{[]string{"distill", "--resume", run0, "--block-steps", "1"}, "--block-steps cannot be changed"},
	})
}

// TestDistillBlockSteps runs `nvg distill --block-steps 1` end to end on the tiny teacher cut
// to 2 layers (block 0, block 1, then one KL step): stderr prints the plan, stdout the phases
// done with their tokens, distill.json records block_steps, metrics.jsonl each step's phase
// and layer, report.json the phases; the training plot is drawn.
func TestDistillBlockSteps(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	teacher, tok := twoLayerTeacher(t)
	out, args := goDistill(t, "--teacher", teacher, "--tokenizer", tok, "--block-steps", "1", "--steps", "3",
		"--nb", "2", "--t", "8", "--k", "4", "--eval-windows", "1")
	stdout, stderr, code := capture(t, args)
	if code != 0 {
		t.Fatalf("nvg %v: exit %d\n%s", args, code, stderr)
	}
	if !strings.Contains(stderr, "phases: block 0 steps 1…1, block 1 steps 2…2, kl steps 3…3") {
		t.Errorf("stderr lacks the plan:\n%s", stderr)
	}
	if !strings.Contains(stdout, "phases: block 0 1 steps (16 tokens), block 1 1 steps (16 tokens), kl 1 steps (16 tokens)") {
		t.Errorf("stdout lacks the phases done:\n%s", stdout)
	}
	settings, err := train.ReadRunFile(out)
	if err != nil || settings.Train.BlockSteps != 1 {
		t.Fatalf("distill.json: block steps %d, %v", settings.Train.BlockSteps, err)
	}
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, r := range recs {
		if r.Kind == train.MetricsStep {
			phases = append(phases, train.Phase{Kind: r.Phase, Layer: r.Layer}.Name())
		}
	}
	if !slices.Equal(phases, []string{"block 0", "block 1", "kl"}) {
		t.Errorf("metrics phases %v", phases)
	}
	rep, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || len(rep.Phases) != 3 || rep.Phases[1].Kind != "block" || rep.Phases[1].Layer != 1 || rep.Tokens != 48 {
		t.Fatalf("report phases %+v, tokens %d, %v", rep.Phases, rep.Tokens, err)
	}
	if st, err := os.Stat(filepath.Join(out, "training.png")); err != nil || st.Size() == 0 {
		t.Errorf("training.png: %v", err)
	}
}
