package nvgkit

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCheckpointAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ckpt")
	old := &Checkpoint{Meta: CheckpointMeta{Version: 1, Step: 3, Loss: Losses{2, math.NaN(), 1}, TeacherPPL: 8.5, BestPPL: math.NaN(),
		Config: TrainConfig{Steps: 7}, Evals: []EvalPoint{{Step: 0, Loss: 1, Perplexity: math.E}, {Step: 2, Loss: math.NaN(), Perplexity: math.Inf(1)}}},
		Tensors: map[string][]float32{"a": {1, 2, 3}, "b.h": {-0.5}}}
	if err := old.Save(p); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	next := &Checkpoint{Meta: CheckpointMeta{Version: 1, Step: 4}, Tensors: map[string][]float32{"a": {9, 9, 9}}}
	// A write that fails after the tensors went out (disk full, I/O error) keeps the old one.
	if err := next.save(p, func() error { return errors.New("injected failure") }); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("failed save: %v", err)
	}
	after, _ := os.ReadFile(p)
	if string(after) != string(before) {
		t.Fatal("a failed save changed the checkpoint")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	got, err := LoadCheckpoint(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Step != 3 || !reflect.DeepEqual(got.Tensors, old.Tensors) || len(got.Meta.Loss) != 3 || !math.IsNaN(got.Meta.Loss[1]) ||
		got.Meta.TeacherPPL != 8.5 || !math.IsNaN(got.Meta.BestPPL) || got.Meta.Config.Steps != 7 || len(got.Meta.Evals) != 2 ||
		got.Meta.Evals[0] != old.Meta.Evals[0] || !math.IsNaN(got.Meta.Evals[1].Perplexity) || got.Meta.Evals[1].Step != 2 {
		t.Errorf("loaded %+v", got)
	}
	// A successful save replaces it.
	if err := next.Save(p); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadCheckpoint(p); got == nil || got.Meta.Step != 4 || got.Tensors["a"][0] != 9 {
		t.Errorf("replaced checkpoint: %+v", got)
	}
	// Corruption is detected.
	raw, _ := os.ReadFile(p)
	for name, data := range map[string][]byte{"truncated": raw[:len(raw)-5], "flipped": flipByte(raw, len(raw)-6), "empty": nil} {
		q := filepath.Join(dir, name)
		os.WriteFile(q, data, 0o644)
		if _, err := LoadCheckpoint(q); err == nil || !strings.Contains(err.Error(), q) {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

func flipByte(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}
