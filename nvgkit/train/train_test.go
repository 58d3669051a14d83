package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func TestLRSchedule(t *testing.T) {
	c := train.TrainConfig{Steps: 100, Settings: schedule(1e-3, 10, 0.1, 0)}
	cos := func(s int) float64 { return 0.1 + 0.9*0.5*(1+math.Cos(math.Pi*float64(s)/100)) }
	for _, tc := range []struct {
		s    int
		want float64
	}{
		{1, 1e-3 * 0.1 * cos(1)},
		{5, 1e-3 * 0.5 * cos(5)},
		{10, 1e-3 * cos(10)},
		{50, 1e-3 * 0.55}, // half-way down the cosine: 0.1 + 0.9·0.5
		{100, 1e-3 * 0.1}, // the floor
	} {
		if got := c.LRAt(tc.s); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("LRAt(%d) = %.17g, want %.17g", tc.s, got, tc.want)
		}
	}
	// Hand values: step 10 of 100 is cos(π/10) = 0.95106 → 0.1 + 0.45·1.95106 = 0.977975.
	if got := c.LRAt(10); math.Abs(got-0.977975e-3) > 1e-9 {
		t.Errorf("LRAt(10) = %g, want 0.977975e-3", got)
	}
	// No warm-up, no floor: the plain cosine, 0 at the end.
	c = train.TrainConfig{Steps: 4, Settings: schedule(2, -1, -1, 0)}
	for s, want := range map[int]float64{1: 1 + math.Sqrt(0.5), 2: 1, 4: 0} {
		if got := c.LRAt(s); math.Abs(got-want) > 1e-12 {
			t.Errorf("no warm-up: LRAt(%d) = %g, want %g", s, got, want)
		}
	}
}

// schedule is optim.Default() with a test run's learning-rate schedule and clip.
func schedule(lr float64, warmup int, minLRFrac, clip float64) optim.Settings {
	o := optim.Default()
	o.LR, o.Warmup, o.MinLRFrac, o.ClipNorm = lr, warmup, minLRFrac, clip
	return o
}

// DefaultTrainConfig is nvg distill's table of defaults (README, DESIGN §6), and 0 is no
// default: a zero config names the first field to set.
func TestTrainConfigDefaults(t *testing.T) {
	c := train.DefaultTrainConfig()
	want := train.TrainConfig{Steps: 24, NB: 4, T: 64, Windows: 0, K: 32, EvalEvery: 8, EvalWindows: 8, Seed: 1, CheckpointEvery: 0, Keep: 2,
		ActivationBudget: 1 << 30, Settings: optim.Settings{LR: 0.05, Warmup: 3, MinLRFrac: 0.1, ClipNorm: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-12, MetricFloor: 0.05},
		HiddenLoss: "mse", HiddenWeight: 1, HiddenLayers: "every:4"}
	if c != want {
		t.Errorf("defaults: %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if err := (train.TrainConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "Steps = 0") || !strings.Contains(err.Error(), "DefaultTrainConfig") {
		t.Errorf("zero config: %v, want an error naming Steps and DefaultTrainConfig", err)
	}
	// Off is 0: a config with no warm-up, no clipping, no periodic evaluation and a decay to
	// 0 is valid, and its schedule has no warm-up.
	off := c
	off.Warmup, off.ClipNorm, off.EvalEvery, off.MinLRFrac, off.Seed = 0, 0, 0, 0, 0
	if err := off.Validate(); err != nil {
		t.Errorf("all off: %v", err)
	}
	if got, want := off.LRAt(1), 0.05*0.5*(1+math.Cos(math.Pi/24)); math.Abs(got-want) > 1e-15 {
		t.Errorf("no warm-up: LRAt(1) = %g, want %g", got, want)
	}
	for _, f := range []func(*train.TrainConfig){
		func(c *train.TrainConfig) { c.Steps = -1 }, func(c *train.TrainConfig) { c.K = 65 }, func(c *train.TrainConfig) { c.K = 0 },
		func(c *train.TrainConfig) { c.Windows = 6 }, func(c *train.TrainConfig) { c.Windows = -4 }, func(c *train.TrainConfig) { c.LR = -1 },
		func(c *train.TrainConfig) { c.T = -3 }, func(c *train.TrainConfig) { c.LR = math.Inf(1) }, func(c *train.TrainConfig) { c.EvalWindows = 0 },
		func(c *train.TrainConfig) { c.MinLRFrac = 2 }, func(c *train.TrainConfig) { c.ClipNorm = math.NaN() },
		func(c *train.TrainConfig) { c.Beta1 = 1 }, func(c *train.TrainConfig) { c.Beta2 = -0.1 }, func(c *train.TrainConfig) { c.Eps = 0 },
		func(c *train.TrainConfig) { c.MetricFloor = 1.5 },
	} {
		bad := train.DefaultTrainConfig()
		f(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	// The error is a *TrainConfigError naming the field, its value and its range.
	bad := train.DefaultTrainConfig()
	bad.Windows = 6
	err := bad.Validate()
	var ce *train.TrainConfigError
	if !errors.As(err, &ce) || ce.Field != "Windows" || ce.Value != 6 ||
		err.Error() != "nvgkit: TrainConfig.Windows = 6, want 0 (Steps·NB) or a positive multiple of NB = 4" {
		t.Errorf("Windows 6: %#v", err)
	}
	// The optimizer's fields are named as TrainConfig's.
	bad = train.DefaultTrainConfig()
	bad.Beta2 = 1
	if err := bad.Validate(); !errors.As(err, &ce) || ce.Field != "Beta2" || err.Error() != "nvgkit: TrainConfig.Beta2 = 1, want a value in [0, 1)" {
		t.Errorf("Beta2 1: %#v", err)
	}
}

// A report (as a checkpoint or a distill.json) written before the optimizer's moments were
// recorded reads back with optim.Default()'s, which it trained with; recorded ones are kept,
// and the defaults make a JSON round trip.
func TestTrainConfigJSONMoments(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, []byte(`{"teacher_perplexity": 8, "config": {"steps": 4, "nb": 2, "t": 8, "k": 4, "lr": 0.02, "warmup": 1, "min_lr_frac": 0.1, "clip_norm": 1, "eval_windows": 2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := train.LoadReport(old)
	if err != nil {
		t.Fatal(err)
	}
	c, d := r.Config, optim.Default()
	if c.Beta1 != d.Beta1 || c.Beta2 != d.Beta2 || c.Eps != d.Eps || c.MetricFloor != d.MetricFloor || c.LR != 0.02 || c.Warmup != 1 || c.Steps != 4 {
		t.Errorf("a report without the moments: %+v, want optim.Default()'s Beta1, Beta2, Eps, MetricFloor and the file's other fields", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	rec := &train.Report{TeacherPPL: 8, CompressedPPL: 20, DistilledPPL: 10, Config: train.DefaultTrainConfig()}
	rec.Config.Beta2 = 0.999
	p := filepath.Join(dir, "new.json")
	if err := rec.Save(p); err != nil {
		t.Fatal(err)
	}
	if back, err := train.LoadReport(p); err != nil || back.Config != rec.Config {
		t.Errorf("round trip: %+v, %v; want %+v", back.Config, err, rec.Config)
	}
}

func TestReportJSON(t *testing.T) {
	r := &train.Report{TeacherPPL: 8, CompressedPPL: 2000, DistilledPPL: 80, Loss: train.Losses{3, math.NaN(), 2.5}, Steps: 3, Skipped: 1}
	r.GapClosed = train.GapFraction(r.TeacherPPL, r.CompressedPPL, r.DistilledPPL)
	// log(2000/80)/log(2000/8) = log 25 / log 250 = 0.582975…
	if math.Abs(r.GapClosed-math.Log(25)/math.Log(250)) > 1e-12 || math.Abs(r.GapClosed-0.582975) > 1e-6 {
		t.Errorf("GapClosed = %g", r.GapClosed)
	}
	p := filepath.Join(t.TempDir(), "report.json")
	if err := r.Save(p); err != nil {
		t.Fatal(err)
	}
	back, err := train.LoadReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Loss) != 3 || back.Loss[0] != 3 || !math.IsNaN(back.Loss[1]) || back.Loss[2] != 2.5 || back.DistilledPPL != 80 {
		t.Errorf("round trip: %+v", back)
	}
	b, _ := json.Marshal(r.Loss)
	if string(b) != "[3,null,2.5]" {
		t.Errorf("losses JSON %s", b)
	}
	r.DistilledPPL = math.NaN()
	if err := r.Save(p); err == nil {
		t.Error("NaN perplexity saved")
	}
}

func TestETA(t *testing.T) {
	if got := train.ETA(10*time.Second, 2, 10); got != 40*time.Second {
		t.Errorf("ETA = %v", got)
	}
	if train.ETA(time.Second, 0, 10) != 0 || train.ETA(time.Second, 10, 10) != 0 {
		t.Error("ETA at the ends")
	}
	for d, want := range map[time.Duration]string{7 * time.Second: "7s", 245 * time.Second: "4m05s", 3723 * time.Second: "1h02m03s"} {
		if got := train.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// Assemble checks what it is given before any expensive work (no device is opened here):
// settings out of range name the field; paths that are missing or not what they must be are
// *InputError naming the path (nvg exits 2 on them; a Lab's Setup returns them wrapped).
func TestAssembleInputErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.json")
	if err := os.WriteFile(text, []byte(`{"not": "a model"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := train.Setup{BitsPerWeight: 1, Paths: "auto", Train: train.DefaultTrainConfig()}
	for _, c := range []struct {
		what  string
		set   func(*train.Setup)
		input bool
		want  string
	}{
		{"a missing teacher", func(s *train.Setup) { s.Teacher = filepath.Join(dir, "missing") }, true, "missing: no such file or directory"},
		{"a text file as the teacher", func(s *train.Setup) { s.Teacher = text }, true, "is a text file, not a model"},
		{"a directory without a model", func(s *train.Setup) { s.Teacher = dir }, true, "directory has no config.json"},
		{"a missing tokenizer", func(s *train.Setup) { s.Tokenizer = filepath.Join(dir, "tok.json") }, true, "tok.json: no such file"},
		{"a tokenizer directory without tokenizer.json", func(s *train.Setup) { s.Tokenizer = dir }, true, "holds no tokenizer.json"},
		{"a missing corpus file", func(s *train.Setup) {
			s.TrainFiles, s.EvalFiles = []string{filepath.Join(dir, "a.go")}, []string{filepath.Join(dir, "b.go")}
		}, true, "a.go: no such file or directory"},
		{"training files without held-out ones", func(s *train.Setup) { s.TrainFiles = []string{"a.go"} }, false, "go together"},
		{"a bits-per-weight target of 0", func(s *train.Setup) { s.BitsPerWeight = 0 }, false, "BitsPerWeight = 0"},
		{"an unknown path mode", func(s *train.Setup) { s.Paths = "3" }, false, "3"},
		{"a schedule out of range", func(s *train.Setup) { s.Train.Steps = 0 }, false, "Steps = 0"},
		{"an unknown init", func(s *train.Setup) { s.Init = "svd" }, false, `"svd"`},
		{"a calibration of no windows", func(s *train.Setup) { s.Calibration = train.CalibrationConfig{Windows: -1, T: 8} }, false, "Calibration.Windows = -1"},
		{"a negative Gram limit", func(s *train.Setup) { s.Calibration = train.CalibrationConfig{Windows: 1, T: 8, GramMax: -1} }, false, "Calibration.GramMax = -1"},
		{"a finish without sign learning", func(s *train.Setup) { s.Train.FinishSteps = 2 }, false, "FinishSteps = 2"},
		{"more steps than their windows' top-k can hold (issue 34: out of memory after compressing)", func(s *train.Setup) { s.Train.Steps = 1e12 }, false,
			"Steps = 1000000000000, want ≤ 262143"},
	} {
		s := base
		c.set(&s)
		_, err := train.Assemble(context.Background(), s, train.Env{})
		var ie *train.InputError
		if err == nil || errors.As(err, &ie) != c.input || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (an InputError: %v), want one containing %q (an InputError: %v)", c.what, err, errors.As(err, &ie), c.want, c.input)
		}
	}
}

// A run whose training windows' teacher top-k cannot be held (issue 34: nvg distill --steps
// 1000000000000 died with "fatal error: out of memory" after compressing) is refused by
// Validate, naming the field and the largest value that fits: that value is accepted and
// the next one is not, on both sides of the 2³¹−1-entry bound.
func TestTrainConfigSizeLimits(t *testing.T) {
	const maxEntries = 1<<31 - 1
	limit := func(c train.TrainConfig, field string) int {
		t.Helper()
		err := c.Validate()
		var ce *train.TrainConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Fatalf("%+v: %v, want a TrainConfigError on %s", c, err, field)
		}
		var n int
		if _, err := fmt.Sscanf(ce.Want, "≤ %d", &n); err != nil {
			t.Fatalf("%s: the range %q names no limit", field, ce.Want)
		}
		return n
	}
	c := train.DefaultTrainConfig()
	c.Steps = 1e12
	n := limit(c, "Steps")
	// At NB 4, T 64, K 32: ⌊(2³¹−1) / (64·32) / 4⌋ = ⌊1048575.99 / 4⌋ = 262143.
	if n != 262143 {
		t.Errorf("Steps limit %d, want 262143", n)
	}
	for _, k := range []int{1, 7, 64} {
		c := train.DefaultTrainConfig()
		c.K, c.T, c.NB, c.Steps = k, 37, 3, math.MaxInt
		n := limit(c, "Steps")
		if n*c.NB*c.T*c.K > maxEntries || (n+1)*c.NB*c.T*c.K <= maxEntries {
			t.Errorf("K %d: Steps limit %d is not the largest whose Steps·NB·T·K ≤ 2³¹−1", k, n)
		}
		c.Steps = n
		if err := c.Validate(); err != nil {
			t.Errorf("K %d: Steps = %d (the limit) refused: %v", k, n, err)
		}
		c.Steps = n + 1
		if err := c.Validate(); err == nil {
			t.Errorf("K %d: Steps = %d (the limit + 1) accepted", k, n+1)
		}
		// A pool of windows cycled: the steps are bounded only by the token count.
		c.Steps, c.Windows = 1e12, 3*c.NB
		if err := c.Validate(); err != nil {
			t.Errorf("K %d: 10¹² steps cycling %d windows refused: %v", k, c.Windows, err)
		}
		c.Steps = math.MaxInt
		if n := limit(c, "Steps"); n != math.MaxInt/(c.NB*c.T) {
			t.Errorf("K %d: token-count limit %d, want %d", k, n, math.MaxInt/(c.NB*c.T))
		}
		c.Steps, c.Windows = 10, 1<<30*c.NB
		if n := limit(c, "Windows"); n%c.NB != 0 || n*c.T*c.K > maxEntries || (n+c.NB)*c.T*c.K <= maxEntries {
			t.Errorf("K %d: Windows limit %d is not the largest multiple of NB whose top-k fits", k, n)
		}
	}
	c = train.DefaultTrainConfig()
	c.T = 1 << 40
	if n := limit(c, "T"); n != maxEntries/c.K/c.NB {
		t.Errorf("T limit %d, want %d", n, maxEntries/c.K/c.NB)
	}
}
