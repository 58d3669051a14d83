package train_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// refineSetup is a Setup of the tiny teacher cut to 2 layers (written to dir with its
// tokenizer) compressed with Init "refine" on a small calibration pass, two small corpus
// files and a 2-step schedule.
func refineSetup(t *testing.T, dir string) train.Setup {
	t.Helper()
	_, m, _ := kittest.TinyTeacher(t)
	teacher := filepath.Join(dir, "teacher.cmf")
	tok := filepath.Join(dir, "tokenizer.json")
	if err := cmf.WriteCMF(teacher, tinytest.FirstLayers(t, m, 2)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, tinyteacher.TokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(runtime.GOROOT(), "src")
	c := train.DefaultTrainConfig()
	c.Steps, c.NB, c.T, c.K, c.EvalWindows, c.EvalEvery = 2, 2, 16, 8, 2, 0
	return train.Setup{Teacher: teacher, Tokenizer: tok, BitsPerWeight: 1, Paths: "1", Init: "refine",
		Calibration: train.CalibrationConfig{Windows: 3, T: 32, GramMax: 1024},
		TrainFiles:  []string{filepath.Join(src, "strings/strings.go"), filepath.Join(src, "sort/sort.go")},
		EvalFiles:   []string{filepath.Join(src, "bytes/buffer.go")},
		Train:       c}
}

// TestAssembleRefine: Assemble with Init "refine" runs the calibration pass on the GPU
// before compressing (phases "calibrate" then "compress"), and the student's reports carry
// the refinement's start and the input-weighted errors, lower after than at the start; the
// compressed student is the same file twice (the pass is deterministic); compression.json
// keeps the errors; the checkpoints name the compression, and a Setup that compresses
// otherwise cannot resume them.
func TestAssembleRefine(t *testing.T) {
	d, _, _ := kittest.TinyTeacher(t)
	dir := t.TempDir()
	s := refineSetup(t, dir)
	var digests []train.FileDigest
	var ckpt string
	for i := range 2 {
		runDir := filepath.Join(dir, "run"+string(rune('a'+i)))
		os.Mkdir(runDir, 0o755)
		var phases []string
		var logs []string
		run, err := train.Assemble(context.Background(), s, train.Env{Device: d, RunDir: runDir, Phase: func(p string) { phases = append(phases, p) },
			Log: func(f string, a ...any) { logs = append(logs, f) }})
		if err != nil {
			t.Fatal(err)
		}
		if c, k := slices.Index(phases, "calibrate"), slices.Index(phases, "compress"); c < 0 || k < c {
			t.Errorf("phases %v: want calibrate before compress", phases)
		}
		var start, end float64
		for _, r := range run.Reports {
			if !(r.InitRelErr > 0 && r.InitWeightedRelErr > 0 && r.WeightedRelErr > 0) {
				t.Fatalf("report %+v: want the refinement's errors", r)
			}
			start += r.InitWeightedRelErr
			end += r.WeightedRelErr
		}
		if !(end < start) {
			t.Errorf("input-weighted error %g after the refinement, %g at its start: want lower", end, start)
		}
		if !slices.ContainsFunc(logs, func(l string) bool { return strings.HasPrefix(l, "calibration:") }) {
			t.Errorf("no calibration line in the log %q", logs)
		}
		k := run.Trainer.Compression
		if k == nil || k.Init != "refine" || k.Calibration == nil || *k.Calibration != s.Calibration {
			t.Errorf("Trainer.Compression %v", k)
		}
		dg, err := train.DigestFile(filepath.Join(runDir, train.CompressedStudentFile))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, dg)
		if i == 0 {
			ckpt = filepath.Join(runDir, train.CheckpointName(0))
			if err := run.Trainer.Checkpoint(ckpt); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(runDir, train.CompressionFile))
			if err != nil || !strings.Contains(string(b), `"init_weighted_rel_err"`) {
				t.Errorf("compression.json lacks the refinement's errors (%v)", err)
			}
			if got := train.SessionReports(run.Reports); got[0].Layer != 0 || got[0].InitWeightedRelErr != run.Reports[0].InitWeightedRelErr {
				t.Errorf("SessionReports %+v", got[0])
			}
		}
		run.Close()
	}
	if digests[0] != digests[1] {
		t.Errorf("two refined compressions differ: %+v, %+v", digests[0], digests[1])
	}
	ck, err := train.LoadCheckpoint(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if k := ck.Meta.Compression; k == nil || k.String() != "1 bits/weight, paths 1, init refine (calibration 3 × 32 tokens, Grams ≤ 1024)" {
		t.Errorf("checkpoint compression %v", k)
	}
	other := s
	other.Init, other.Resume = "dual-svid", ckpt
	// Refused before any work: the checkpoint records the Setup's init (CheckpointMeta.Setup,
	// compared first) and its compression key.
	if _, err := train.Assemble(context.Background(), other, train.Env{Device: d}); err == nil || !strings.Contains(err.Error(), `was trained with init = "refine" (Setup.Init)`) {
		t.Errorf("a dual-svid Setup resuming a refined run's checkpoint: %v", err)
	}
}

// The defaults of the calibration pass are one table, train's and the session's; Init "" is
// Dual-SVID (run files written before Init was a setting).
func TestDefaultCalibration(t *testing.T) {
	if a, b := train.DefaultCalibration(), session.DefaultCalibration(); a != train.CalibrationConfig(b) || a != (train.CalibrationConfig{}).Resolved() {
		t.Errorf("train.DefaultCalibration %+v, session's %+v", a, b)
	}
	for init, want := range map[string]compress.Init{"": compress.InitDualSVID, "dual-svid": compress.InitDualSVID, "refine": compress.InitRefine} {
		if o, err := (train.Setup{Paths: "auto", Init: init}).Compression(); err != nil || o.Init != want {
			t.Errorf("Compression of Init %q: %v, %v; want %v", init, o.Init, err, want)
		}
	}
}
