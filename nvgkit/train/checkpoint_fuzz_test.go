package train

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoadCheckpoint feeds LoadCheckpoint arbitrary files, seeded with a real checkpoint:
// it never panics, and a file it accepts saves and loads back to the same checkpoint.
func FuzzLoadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed")
	ck := &Checkpoint{Meta: CheckpointMeta{Version: ckptVersion, Step: 2, Loss: Losses{1.5, math.NaN()}, TeacherPPL: 3, BestPPL: math.NaN()},
		Tensors: map[string][]float32{"state/param/a": {1, -2}, "state/m/a": {0, 0}, "state/v/a": {}}}
	if err := ck.Save(seed); err != nil {
		f.Fatal(err)
	}
	raw, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "ck")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCheckpoint(p)
		if err != nil {
			return
		}
		q := filepath.Join(t.TempDir(), "again")
		if err := got.Save(q); err != nil {
			t.Fatalf("an accepted checkpoint does not save: %v", err)
		}
		again, err := LoadCheckpoint(q)
		if err != nil {
			t.Fatalf("an accepted checkpoint saved does not load: %v", err)
		}
		if !reflect.DeepEqual(bitsOf(got.Tensors), bitsOf(again.Tensors)) || again.Meta.Step != got.Meta.Step {
			t.Fatal("round trip changed the checkpoint")
		}
	})
}

// bitsOf maps each tensor to its values' bit patterns (NaN compares equal to itself).
func bitsOf(ts map[string][]float32) map[string][]uint32 {
	out := map[string][]uint32{}
	for n, v := range ts {
		out[n] = make([]uint32, len(v))
		for i, x := range v {
			out[n][i] = math.Float32bits(x)
		}
	}
	return out
}
