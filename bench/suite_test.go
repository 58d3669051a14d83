package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestSuiteRunSkipped: past the deadline every geometry × teacher dtype × GEMM path is
// recorded as skipped (nothing is measured, so no device is needed), each failure is
// printed, the JSON holds them all, and the run fails because every result did.
func TestSuiteRunSkipped(t *testing.T) {
	var out bytes.Buffer
	o := bench.Options{Models: []string{"tiny", "0.8B"}, NB: 2, T: 16, K: 4, TensorCores: []string{"on", "off"},
		Deadline: time.Now().Add(-time.Second), Stdout: &out}
	js := filepath.Join(t.TempDir(), "bench.json")
	rep := &bench.Report{Device: "none"}
	err := bench.Suite{DTypes: []string{"f16", "q8"}, JSON: js}.Run(nil, o, rep)
	if err == nil || err.Error() != "every geometry failed (8)" {
		t.Fatalf("error %v, want every geometry failed (8)", err)
	}
	if n := strings.Count(out.String(), "FAILED: skipped: the --deadline passed"); n != 8 ||
		!strings.Contains(out.String(), "0.8B (teacher q8, tensor cores off): FAILED") {
		t.Errorf("%d failures printed:\n%s", n, out.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var got bench.Report
	if err := json.Unmarshal(b, &got); err != nil || len(got.Results) != 8 || got.Results[7].Geom != "0.8B" ||
		got.Results[7].TeacherDType != "q8" || got.Results[0].Tokens != 32 {
		t.Errorf("JSON: %d results, %v", len(got.Results), err)
	}
}

// TestNewReport records the device it measures on and the options' ceilings.
func TestNewReport(t *testing.T) {
	dev := gputest.Open(t)
	r := bench.NewReport(dev, &bench.Options{PeakTF: 67, PeakGB: 4800, PeakTensorTF: 989}, "nvg bench --model tiny")
	if r.Device != dev.Info().Name || r.CPU != dev.Info().CPU || r.Command != "nvg bench --model tiny" || r.PeakTFLOPs != 67 ||
		r.PeakGBps != 4800 || r.PeakTensorTFLOPs != 989 || r.TensorCores != dev.TensorCores().String() || r.Build == "" {
		t.Errorf("%+v", r)
	}
	if _, err := time.Parse(time.RFC3339, r.Date); err != nil {
		t.Errorf("date %q: %v", r.Date, err)
	}
}

// TestSessionOptionsValidate names the first count below 1 by its nvg session bench flag.
func TestSessionOptionsValidate(t *testing.T) {
	o := bench.SessionOptions{Reps: 1, Warm: 1, NB: 1, T: 1, Steps: 1}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	o.T, o.Steps = 0, -2
	if err := o.Validate(); err == nil || err.Error() != "--t 0: want ≥ 1" {
		t.Errorf("T 0: %v", err)
	}
}
