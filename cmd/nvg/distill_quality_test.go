package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// TestDistillInitFlags: --init and --calib-* reach the run's Setup (the calibration left
// zero, its defaults, unless a flag changes it), --finish-steps its TrainConfig; a --config
// file sets them too; bad values are usage errors naming the flag, and a resume cannot
// change them.
func TestDistillInitFlags(t *testing.T) {
	s, _, _, err := parseDistillFlags(commands["distill"], nil)
	if err != nil || s.Init != "refine" || s.Calibration != (train.CalibrationConfig{}) || s.Train.FinishSteps != 0 {
		t.Fatalf("defaults: init %q, calibration %+v, finish %d, %v", s.Init, s.Calibration, s.Train.FinishSteps, err)
	}
	s, _, _, err = parseDistillFlags(commands["distill"], []string{"--init", "refine", "--calib-windows", "4", "--train-signs", "--finish-steps", "5"})
	want := train.CalibrationConfig{Windows: 4, T: 256, GramMax: 4096}
	if err != nil || s.Init != "refine" || s.Calibration != want || s.Train.FinishSteps != 5 {
		t.Fatalf("flags: init %q, calibration %+v, finish %d, %v", s.Init, s.Calibration, s.Train.FinishSteps, err)
	}
	conf := writeConfig(t, `{"init": "refine", "calibration": {"windows": 8, "t": 64, "gram_max": 512}, "config": {"steps": 10, "train_signs": true, "finish_steps": 3}}`)
	s, _, _, err = parseDistillFlags(commands["distill"], []string{"--config", conf, "--calib-t", "32"})
	if want := (train.CalibrationConfig{Windows: 8, T: 32, GramMax: 512}); err != nil || s.Init != "refine" || s.Calibration != want || s.Train.FinishSteps != 3 {
		t.Fatalf("--config: init %q, calibration %+v, finish %d, %v", s.Init, s.Calibration, s.Train.FinishSteps, err)
	}
	run0 := filepath.Join(t.TempDir(), "none")
	checkUsageErrors(t, []usageCase{
		{[]string{"distill", "--init", "svd"}, `--init must be dual-svid or refine, got "svd"`},
		{[]string{"distill", "--hidden-loss", "bogus"}, `--hidden-loss must be "mse", "cosine" or none (off), got bogus`},
		{[]string{"distill", "--calib-windows", "0"}, "--calib-windows must be ≥ 1"},
		{[]string{"distill", "--calib-t", "-1"}, "--calib-t must be ≥ 1"},
		{[]string{"distill", "--calib-gram-max", "-1"}, "--calib-gram-max must be ≥ 0"},
		{[]string{"distill", "--finish-steps", "2"}, "--finish-steps must be 0 without --train-signs"},
		{[]string{"distill", "--train-signs", "--finish-steps", "24"}, "--finish-steps must be 0 (none) or fewer than --steps = 24"},
		{[]string{"distill", "--resume", run0, "--init", "refine"}, "--init cannot be changed"},
		{[]string{"distill", "--resume", run0, "--finish-steps", "1"}, "--finish-steps cannot be changed"},
		{[]string{"compress", "--init", "svd", "-o", run0}, `--init must be dual-svid or refine`},
		{[]string{"compress", "--train-files", "a.go", "-o", run0}, "--train-files is the calibration text of --init refine"},
	})
}

// TestDistillRefineFinish runs `nvg distill --init refine --train-signs --finish-steps 1` end
// to end on the tiny teacher cut to 2 layers: it prints the per-layer reconstruction table,
// draws reconstruction_layers.png, records the init and the finish in distill.json, each
// step's phase in metrics.jsonl and the phases in report.json; nvg compress --init refine
// with the same text and seed writes the same student, byte for byte; and a resume from the
// checkpoint at the phase boundary reuses that student and ends with the same losses.
func TestDistillRefineFinish(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	teacher, tok := twoLayerTeacher(t)
	strs := filepath.Join(runtime.GOROOT(), "src", "strings", "strings.go")
	out, args := goDistill(t, "--teacher", teacher, "--tokenizer", tok, "--init", "refine", "--calib-windows", "3", "--calib-t", "32",
		"--train-signs", "--sign-tau", "1", "--sign-max-flip", "0.01", "--steps", "3", "--finish-steps", "1",
		"--nb", "2", "--t", "8", "--k", "4", "--eval-windows", "1", "--checkpoint-every", "1", "--keep", "10")
	stdout, stderr, code := capture(t, args)
	if code != 0 {
		t.Fatalf("nvg %v: exit %d\n%s", args, code, stderr)
	}
	if !strings.Contains(stdout, "reconstruction error per layer") || !strings.Contains(stdout, "input-weighted, Dual-SVID start") ||
		!strings.Contains(stdout, "phases: kl 2 steps (32 tokens), finish 1 steps (16 tokens)") {
		t.Errorf("stdout lacks the per-layer table or the phases:\n%s", stdout)
	}
	if !strings.Contains(stderr, "phases: kl steps 1…2, finish steps 3…3 (signs frozen)") || !strings.Contains(stderr, "calibration: 3 training windows × 32 tokens") {
		t.Errorf("stderr lacks the phases or the calibration line:\n%s", stderr)
	}
	for _, f := range []string{"reconstruction_layers.png", "training.png", "sign_flips.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	var settings train.RunFile
	if b, err := os.ReadFile(filepath.Join(out, train.RunFileName)); err != nil || json.Unmarshal(b, &settings) != nil {
		t.Fatalf("distill.json: %v", err)
	}
	if settings.Init != "refine" || settings.Calibration != (train.CalibrationConfig{Windows: 3, T: 32, GramMax: 4096}) || settings.Train.FinishSteps != 1 {
		t.Errorf("distill.json: init %q, calibration %+v, finish %d", settings.Init, settings.Calibration, settings.Train.FinishSteps)
	}
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, r := range recs {
		if r.Kind == train.MetricsStep {
			phases = append(phases, r.Phase)
			if (r.Phase == train.PhaseFinish) != (r.SignFlips == nil) {
				t.Errorf("step %d (%s): flips %v", r.Step, r.Phase, r.SignFlips)
			}
		}
	}
	if !slices.Equal(phases, []string{"kl", "kl", "finish"}) {
		t.Errorf("metrics phases %v", phases)
	}
	full, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || len(full.Phases) != 2 || full.Phases[1].Kind != "finish" || full.Phases[1].StepsDone != 1 || full.Tokens != 48 {
		t.Fatalf("report phases %+v, tokens %d, %v", full.Phases, full.Tokens, err)
	}
	same := filepath.Join(t.TempDir(), "s.cmf")
	if _, stderr, code := capture(t, []string{"compress", "--init", "refine", "--calib-windows", "3", "--calib-t", "32", "--train-files", strs, "--tokenizer", tok, "-o", same, teacher}); code != 0 {
		t.Errorf("nvg compress --init refine: exit %d\n%s", code, stderr)
	} else if a, err1 := os.ReadFile(same); err1 != nil {
		t.Error(err1)
	} else if b, err2 := os.ReadFile(filepath.Join(out, "compressed.cmf")); err2 != nil || !bytes.Equal(a, b) {
		t.Errorf("nvg compress --init refine's student (%d bytes) is not distill's compressed.cmf (%d bytes, %v)", len(a), len(b), err2)
	}
	// Back to the checkpoint at the phase boundary (after step 2, the last KL step).
	for _, f := range []string{train.CheckpointName(3), "report.json", "student.cmf"} {
		if err := os.Remove(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	var hooks []string
	distillPhaseHook = func(p string) { hooks = append(hooks, p) }
	defer func() { distillPhaseHook = nil }()
	if _, stderr, code := capture(t, []string{"distill", "--resume", out}); code != 0 {
		t.Fatalf("--resume: exit %d\n%s", code, stderr)
	}
	if slices.Contains(hooks, "calibrate") || slices.Contains(hooks, "compress") || !slices.Contains(hooks, "reuse-student") {
		t.Errorf("resume phases %v: the refined student was not reused", hooks)
	}
	resumed, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || len(resumed.Loss) != 3 {
		t.Fatalf("resumed report %+v, %v", resumed, err)
	}
	for i := range full.Loss {
		if full.Loss[i] != resumed.Loss[i] {
			t.Errorf("step %d: loss %.17g uninterrupted, %.17g resumed", i+1, full.Loss[i], resumed.Loss[i])
		}
	}
}
