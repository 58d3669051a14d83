package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// TestDistillSignFlags: without --train-signs the run's Signs stay zero (a metric-only run's
// distill.json is unchanged); with it, the knobs are the defaults overridden by the flags
// given, and bad values are refused by the config's validation.
func TestDistillSignFlags(t *testing.T) {
	s, _, _, err := parseDistillFlags(commands["distill"], []string{"--sign-tau", "30"})
	if err != nil || s.Train.TrainSigns || s.Train.Signs != (nvgkit.SignConfig{}) {
		t.Fatalf("no --train-signs: %+v, %v", s.Train.Signs, err)
	}
	s, _, _, err = parseDistillFlags(commands["distill"], []string{"--train-signs", "--sign-tau", "30", "--sign-max-flip", "0.002"})
	want := nvgkit.DefaultSigns()
	want.Tau, want.MaxFlipFrac = 30, 0.002
	if err != nil || !s.Train.TrainSigns || s.Train.Signs != want {
		t.Fatalf("--train-signs: %+v, want %+v (%v)", s.Train.Signs, want, err)
	}
	if err := s.Train.Validate(); err != nil {
		t.Fatal(err)
	}
	s, _, _, _ = parseDistillFlags(commands["distill"], []string{"--train-signs", "--sign-tau", "0"})
	if err := s.Train.Validate(); err == nil {
		t.Fatal("--sign-tau 0 accepted")
	}
}

// TestDistillTrainSigns runs `nvg distill --train-signs` end to end on a small run (2 steps,
// a threshold of 1 so signs flip from the first step) and checks what a researcher gets: the
// metrics record flips per layer, sign_flips.png is drawn, and the exported student.cmf
// carries sign bits that differ from the compressed student's (compressed.cmf) while every
// BLR tensor keeps its size (bits per weight unchanged).
func TestDistillTrainSigns(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	out, args := goDistill(t,
		"--steps", "2", "--nb", "2", "--t", "16", "--k", "8", "--eval-windows", "1", "--train-signs", "--sign-tau", "1", "--sign-max-flip", "0.01")
	if code := run(args); code != 0 {
		t.Fatalf("nvg %v: exit %d", args, code)
	}
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	steps, flips := train.SignFlipSeries(recs)
	total := 0.0
	for _, f := range flips {
		for _, v := range f {
			total += v
		}
	}
	if len(steps) != 2 || len(flips) != 8 || total == 0 {
		t.Errorf("metrics: sign flips at steps %v, %d layers, %g in total; want 2 steps, 8 layers, > 0", steps, len(flips), total)
	}
	if fi, err := os.Stat(filepath.Join(out, "sign_flips.png")); err != nil || fi.Size() == 0 {
		t.Errorf("sign_flips.png: %v", err)
	}
	before, err := cmf.Open(filepath.Join(out, "compressed.cmf"))
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	after, err := cmf.Open(filepath.Join(out, "student.cmf"))
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	differ, blrs := 0, 0
	for _, name := range before.Names() {
		tb, _ := before.Tensor(name)
		ta, err := after.Tensor(name)
		if err != nil {
			t.Fatalf("student.cmf lacks %s", name)
		}
		if tb.DType != cmf.BLR {
			continue
		}
		blrs++
		pb, err1 := tb.Bytes()
		pa, err2 := ta.Bytes()
		if err1 != nil || err2 != nil || len(pa) != len(pb) {
			t.Fatalf("%s: payloads of %d and %d bytes (%v, %v)", name, len(pb), len(pa), err1, err2)
		}
		wb, err1 := cmf.DecodeBLR(pb)
		wa, err2 := cmf.DecodeBLR(pa)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for p := range wb.Paths {
			if !bytes.Equal(wb.Paths[p].U, wa.Paths[p].U) || !bytes.Equal(wb.Paths[p].V, wa.Paths[p].V) {
				differ++
				break
			}
		}
	}
	if blrs == 0 || differ == 0 {
		t.Errorf("%d of %d BLR tensors carry learned signs in student.cmf, want > 0", differ, blrs)
	}
	t.Logf("%g flips over 2 steps; %d of %d BLR tensors changed signs", total, differ, blrs)
}
