package train_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestTrainerHiddenLoss runs a short run with the hidden-state loss (normalised MSE, λ 0.5,
// the outputs of every 4th layer) on the tiny model: every step record of metrics.jsonl
// carries the two parts with loss = kl + λ·hidden_loss; the teacher's states are written to
// TopKFile + ".hidden" (HiddenCacheSize bytes); the same run in two micro-batches gives the
// same losses and parts (to f32 rounding, f16's with tensor cores on: the parts' gradients are
// summed on the host); a
// resumed Trainer reads both files instead of running the teacher pass, and runs it again
// when the hidden-state file is gone; bad settings are refused.
func TestTrainerHiddenLoss(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	dir := t.TempDir()
	cfg := train.TrainConfig{Steps: 3, NB: 2, T: 16, K: 8, EvalWindows: 2, Seed: 5, Settings: schedule(0.02, 1, 0.1, 1),
		OutDir: dir, TopKFile: filepath.Join(dir, "topk.bin"), Keep: 0,
		HiddenLoss: "mse", HiddenWeight: 0.5, HiddenLayers: "every:4"}
	run := func(cfg train.TrainConfig, opts ...train.Option) []train.StepInfo {
		t.Helper()
		tr, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		var infos []train.StepInfo
		tr.OnStep = func(i train.StepInfo) { infos = append(infos, i) }
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return infos
	}
	whole := run(cfg)
	recs, _, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, r := range recs {
		if r.Kind != train.MetricsStep {
			continue
		}
		steps++
		if !r.HasParts || !(r.Hidden > 0) || r.Loss != r.KL+0.5*r.Hidden {
			t.Errorf("step %d record: loss %.17g, kl %.17g, hidden %.17g (parts %v)", r.Step, r.Loss, r.KL, r.Hidden, r.HasParts)
		}
	}
	if steps != 3 {
		t.Errorf("%d step records, want 3", steps)
	}
	b, err := os.ReadFile(filepath.Join(dir, train.MetricsFile))
	if err != nil || !bytes.Contains(b, []byte(`"hidden_loss":`)) || !bytes.Contains(b, []byte(`"kl":`)) {
		t.Errorf("metrics.jsonl lacks the parts (%v)", err)
	}
	st, err := os.Stat(cfg.TopKFile + ".hidden")
	if want := train.HiddenCacheSize(6, 16, teacher.Config.HiddenSize, 2); err != nil || st.Size() != want {
		t.Errorf("hidden-state file: %v, want %d bytes", err, want)
	}

	micro := cfg
	micro.OutDir, micro.TopKFile = "", ""
	parts := run(micro, train.WithMicroBatches(2))
	// With tensor cores on, a micro-batch changes the f16 scaling of the weight-gradient
	// GEMMs' operands (a power of two per row, over the batch's tokens): the forward's and
	// backward's f16 rounding (kittest.Path.Tol) instead of f32's.
	tol := kittest.DevicePath(d).Tol(1e-5, 2*kittest.ForwardStages(teacher.Config.NumHiddenLayers, true), 1)
	for i := range whole {
		for _, v := range [][2]float64{{whole[i].Loss, parts[i].Loss}, {whole[i].KL, parts[i].KL}, {whole[i].Hidden, parts[i].Hidden}} {
			if math.Abs(v[0]-v[1]) > tol*math.Abs(v[0]) {
				t.Errorf("step %d: whole %+v, micro-batched %+v", i+1, whole[i], parts[i])
				break
			}
		}
	}

	resume := func() string {
		t.Helper()
		tr, err := train.Resume(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		var log bytes.Buffer
		tr.Log = &log
		if err := tr.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.TrainStep(); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	if l := resume(); !strings.Contains(l, "teacher hidden states: layers [3 7] of 6 windows from") || strings.Contains(l, "teacher pass") {
		t.Errorf("resume with both files logged:\n%s", l)
	}
	if err := os.Remove(cfg.TopKFile + ".hidden"); err != nil {
		t.Fatal(err)
	}
	if l := resume(); !strings.Contains(l, "the teacher pass runs again") || !strings.Contains(l, "saved to "+cfg.TopKFile+".hidden") {
		t.Errorf("resume without the hidden-state file logged:\n%s", l)
	}

	for _, c := range []struct {
		loss, layers string
		weight       float64
		want         string
	}{
		{"l2", "all", 1, "TrainConfig.HiddenLoss = l2"},
		{"cosine", "all", -1, "TrainConfig.HiddenWeight = -1"},
		{"mse", " ", 1, "TrainConfig.HiddenLayers"},
		{"mse", "9", 1, "layer 9 is outside [0, 8)"},
	} {
		bad := micro
		bad.HiddenLoss, bad.HiddenLayers, bad.HiddenWeight = c.loss, c.layers, c.weight
		if _, err := train.NewTrainer(teacher, kittest.LoadStudent(t, d, sm), trainIDs, heldOut, bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c, err, c.want)
		}
	}
}
