package train

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

func TestCheckpointAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ckpt")
	old := &Checkpoint{Meta: CheckpointMeta{Version: 2, Step: 3, Loss: Losses{2, math.NaN(), 1}, TeacherPPL: 8.5, BestPPL: math.NaN(),
		Config: TrainConfig{Steps: 7}, Evals: []EvalPoint{{Step: 0, Loss: 1, Perplexity: math.E}, {Step: 2, Loss: math.NaN(), Perplexity: math.Inf(1)}}},
		Tensors: map[string][]float32{"a": {1, 2, 3}, "b.h": {-0.5}}}
	if err := old.Save(p); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	next := &Checkpoint{Meta: CheckpointMeta{Version: 2, Step: 4}, Tensors: map[string][]float32{"a": {9, 9, 9}}}
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
	// Corruption is detected: in the data, in the header (metadata, a tensor's entry),
	// truncation, an empty file and the old format, each an error naming the file.
	raw, _ := os.ReadFile(p)
	hlen := int(binary.LittleEndian.Uint64(raw))
	header := string(raw[8 : 8+hlen])
	metaAt := 8 + strings.Index(header, `\"step\":4`) + len(`\"step\":`)
	entryAt := 8 + strings.Index(header, `"shape":[3]`) + len(`"shape":[`)
	if metaAt < 8+len(`\"step\":`) || entryAt < 8+len(`"shape":[`) {
		t.Fatalf("header layout not as expected: %s", header)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"truncated":      {raw[:len(raw)-5], "file truncated"},
		"flipped-data":   {flipByte(raw, len(raw)-6), "tensor a: checksum"},
		"flipped-meta":   {flipByte(raw, metaAt), "nvg.meta checksum"},
		"flipped-shape":  {flipByte(raw, entryAt), "shape [2] of F32 needs 8 bytes"},
		"empty":          {nil, "too short"},
		"old-format":     {append([]byte("NVGCKPT1"), make([]byte, 40)...), "NVGCKPT1 checkpoint of an older nvg"},
		"not-checkpoint": {safetensorsWithoutMeta(t), "not an nvg checkpoint"},
	} {
		q := filepath.Join(dir, name)
		os.WriteFile(q, tc.data, 0o644)
		if _, err := LoadCheckpoint(q); err == nil || !strings.Contains(err.Error(), q) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", name, err, q, tc.want)
		}
	}
}

// safetensorsWithoutMeta is a valid safetensors file that is not a checkpoint.
func safetensorsWithoutMeta(t *testing.T) []byte {
	p := filepath.Join(t.TempDir(), "plain.safetensors")
	a, _ := cmf.NewFloatTensor("a", cmf.F32, []int{1}, []float64{1})
	if err := cmf.WriteSafetensors(p, []*cmf.Tensor{a}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	return b
}

// TestLatestCheckpoint: the latest valid checkpoint of a directory is found by the step in
// its name; a newer corrupt one is passed over with a warning naming it; a file whose name
// says another step than it holds is not used; none valid is an error listing each; Keep
// pruning leaves the latest Keep of steps ≤ the current one and removes later ones.
func TestLatestCheckpoint(t *testing.T) {
	dir := t.TempDir()
	save := func(step int) string {
		p := filepath.Join(dir, CheckpointName(step))
		ck := &Checkpoint{Meta: CheckpointMeta{Version: 2, Step: step}, Tensors: map[string][]float32{"x": {float32(step)}}}
		if err := ck.Save(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, s := range []int{3, 12, 120} {
		save(s)
	}
	os.WriteFile(filepath.Join(dir, "checkpoint-xyz.safetensors"), []byte("junk"), 0o644) // not a checkpoint name: ignored
	if ps, err := CheckpointPaths(dir); err != nil || len(ps) != 3 || filepath.Base(ps[0]) != "checkpoint-000120.safetensors" || filepath.Base(ps[2]) != "checkpoint-000003.safetensors" {
		t.Fatalf("CheckpointPaths %v, %v", ps, err)
	}
	ck, p, err := LatestCheckpoint(dir, nil)
	if err != nil || ck.Meta.Step != 120 || ck.Tensors["x"][0] != 120 || filepath.Base(p) != "checkpoint-000120.safetensors" {
		t.Fatalf("latest: %v %s %v", ck, p, err)
	}
	// Truncate the latest: the one before is used and the warning names the bad one.
	latest := filepath.Join(dir, CheckpointName(120))
	raw, _ := os.ReadFile(latest)
	os.WriteFile(latest, raw[:len(raw)-3], 0o644)
	var warned []error
	ck, _, err = LatestCheckpoint(dir, func(e error) { warned = append(warned, e) })
	if err != nil || ck.Meta.Step != 12 || len(warned) != 1 || !strings.Contains(warned[0].Error(), latest) {
		t.Fatalf("fallback: step %v, warnings %v, %v", ck, warned, err)
	}
	// A checkpoint renamed to another step is refused.
	os.Rename(filepath.Join(dir, CheckpointName(12)), filepath.Join(dir, CheckpointName(13)))
	ck, _, err = LatestCheckpoint(dir, nil)
	if err != nil || ck.Meta.Step != 3 {
		t.Fatalf("renamed checkpoint: %v, %v", ck, err)
	}
	// None valid: the error lists every one.
	os.WriteFile(filepath.Join(dir, CheckpointName(3)), nil, 0o644)
	if _, _, err := LatestCheckpoint(dir, nil); err == nil || !strings.Contains(err.Error(), CheckpointName(3)) ||
		!strings.Contains(err.Error(), CheckpointName(13)) || !strings.Contains(err.Error(), CheckpointName(120)) {
		t.Errorf("no valid checkpoint: %v", err)
	}
	if _, _, err := LatestCheckpoint(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("empty directory: %v", err)
	}
	// Keep 2 at step 12: 12 and 3 stay (≤ 12), 13 and 120 (later) go.
	save(12)
	removed, err := pruneCheckpoints(dir, 12, 2)
	ps, _ := CheckpointPaths(dir)
	if err != nil || len(removed) != 2 || len(ps) != 2 || filepath.Base(ps[0]) != CheckpointName(12) || filepath.Base(ps[1]) != CheckpointName(3) {
		t.Errorf("prune: removed %v, left %v, %v", removed, ps, err)
	}
}

// TestCheckpointExtend: extending keeps the schedule's span at the original steps, so the
// learning rates of the steps already planned are the same bit for bit and the steps after
// run at the floor MinLRFrac·LR; fewer steps are refused.
func TestCheckpointExtend(t *testing.T) {
	cfg := DefaultTrainConfig()
	cfg.Steps, cfg.LR, cfg.Warmup, cfg.MinLRFrac = 10, 0.5, 2, 0.2
	cfg = cfg.Resolved()
	ck := &Checkpoint{Meta: CheckpointMeta{Config: cfg}}
	if err := ck.Extend(10); err == nil {
		t.Error("Extend to the same steps accepted")
	}
	// Steps whose tokens overflow an int (the windows are the run's 40, cycled): refused,
	// nothing changed.
	if err := ck.Extend(math.MaxInt); err == nil || !strings.Contains(err.Error(), "Steps = ") || ck.Meta.Config != cfg {
		t.Errorf("Extend(MaxInt): %v, config %+v", err, ck.Meta.Config)
	}
	if err := ck.Extend(25); err != nil {
		t.Fatal(err)
	}
	ext := ck.Meta.Config
	if ext.Steps != 25 || ext.ScheduleSteps != 10 {
		t.Fatalf("extended config %+v", ext)
	}
	for s := 1; s <= 10; s++ {
		if a, b := cfg.LRAt(s), ext.LRAt(s); a != b {
			t.Errorf("step %d: lr %g planned, %g extended", s, a, b)
		}
	}
	for s := 11; s <= 25; s++ {
		if got := ext.LRAt(s); math.Abs(got-0.1) > 1e-15 {
			t.Errorf("step %d after the schedule: lr %g, want the floor 0.2·0.5 = 0.1", s, got)
		}
	}
	// The cosine over the planned 10 steps: step 5 is half-way, (0.2 + 0.8·½)·0.5 = 0.3.
	if got := ext.LRAt(5); math.Abs(got-0.3) > 1e-15 {
		t.Errorf("lr at step 5 = %g, want 0.3", got)
	}
}

func flipByte(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}

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
