package train_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestTrainerSignsResumeExact: a TrainSigns run of 3 steps and the same run interrupted after
// 2 steps and resumed for the third end with byte-identical checkpoints (metric, Adam state,
// sign bits and scores), and signs did flip (the knobs are set so they do at this size).
func TestTrainerSignsResumeExact(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	dir := t.TempDir()
	cfg := train.TrainConfig{Steps: 3, NB: 1, T: 8, K: 4, EvalWindows: 1, Seed: 3, CheckpointEvery: -1, TrainSigns: true, Signs: nvgkit.SignConfig{Alpha: 8, Beta: 0.9, Tau: 16, MaxFlipFrac: 0.01, Seed: 5}, Settings: schedule(0.02, 1, 0, 1)}
	flips := 0
	run := func(cfg train.TrainConfig, stopAfter int) error {
		tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		_, err = runUntil(tr, stopAfter, func(i train.StepInfo) {
			for _, f := range i.SignFlips {
				flips += f
			}
		})
		return err
	}
	cfg.OutDir = filepath.Join(dir, "straight")
	os.Mkdir(cfg.OutDir, 0o755)
	if err := run(cfg, -1); err != nil {
		t.Fatal(err)
	}
	if flips == 0 {
		t.Fatal("no sign flipped in 3 steps")
	}
	cfg.OutDir = filepath.Join(dir, "resumed")
	os.Mkdir(cfg.OutDir, 0o755)
	if err := run(cfg, 2); !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("interrupted run: %v", err)
	}
	tr, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, _, err := train.LatestCheckpoint(filepath.Join(dir, "straight"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := train.LatestCheckpoint(cfg.OutDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Meta.Step != 3 || b.Meta.Step != 3 {
		t.Fatalf("checkpoints at steps %d and %d, want 3", a.Meta.Step, b.Meta.Step)
	}
	signs := 0
	for name, va := range a.Tensors {
		vb, ok := b.Tensors[name]
		if !ok || len(va) != len(vb) {
			t.Fatalf("%s: missing or of another size in the resumed checkpoint", name)
		}
		for i := range va {
			if math.Float32bits(va[i]) != math.Float32bits(vb[i]) {
				t.Fatalf("%s[%d]: %#x straight, %#x resumed", name, i, math.Float32bits(va[i]), math.Float32bits(vb[i]))
			}
		}
		if len(name) > 12 && name[:12] == "state/signs/" {
			signs++
		}
	}
	if signs == 0 || len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d sign tensors; %d and %d tensors", signs, len(a.Tensors), len(b.Tensors))
	}
	t.Logf("%d flips in the straight run; %d tensors identical (%d sign matrices)", flips, len(a.Tensors), signs)
}
