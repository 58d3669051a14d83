package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

const fixtures = "../../testdata/fixtures/fixtures-tiny-go.safetensors"

func TestUsageErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	cfgDir := t.TempDir()
	for _, n := range []string{"config.json", "tokenizer.json"} {
		if err := os.Mkdir(filepath.Join(cfgDir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"info", "--bogus"},
		{"info", filepath.Join(dir, "missing")},
		{"info", dir}, // a directory without config.json
		{"import", dir},
		{"eval", "--windows", "zero"},
		{"trace", "--ids", filepath.Join(dir, "missing.json"), "-o", filepath.Join(dir, "o.safetensors")},
		{"trace"},
		{"info", "../../cmf/tinyteacher/model/config.json"},            // a JSON file, not a model
		{"plot-mem", filepath.Join(dir, "missing.csv")},                // one argument of two
		{"distill", "--mem-log-every", "0", "--steps", "1", "-o", dir}, // a bad flag value
		{"tokenize", "--tokenizer", filepath.Join(dir, "missing.json")},
		{"tokenize", "--tokenizer", dir},    // a directory without tokenizer.json
		{"info", cfgDir},                    // config.json is a directory
		{"tokenize", "--tokenizer", cfgDir}, // tokenizer.json is a directory
		{"eval", "../../README.md"},         // UTF-8 text, not a model (a fresh-user test: exit 1)
		{"info", "../../go.sum"},            // text, not a model
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
}

// TestCLIMessages: the usage errors that are easy to get wrong say what to do.
func TestCLIMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"info", "../../cmf/tinyteacher/model/config.json"}, "is a text file, not a model: want an HF checkpoint directory, a .cmf or .safetensors file, or a sharded CMF directory (for the checkpoint it belongs to, give its directory: ../../cmf/tinyteacher/model)"},
	} {
		_, stderr, code := capture(t, tc.args)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("nvg %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, stderr, code := capture(t, nil); code != 2 || !strings.Contains(stderr, "commands:") {
		t.Errorf("nvg with no command: exit %d, stderr %q; want 2 and the usage", code, stderr)
	}
	stdout, _, code := capture(t, []string{"--version"})
	if code != 0 || !strings.HasPrefix(stdout, "nvg ") || !strings.Contains(stdout, runtime.Version()) {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
}

// readJSON returns the JSON file path decoded as a T; a failure fails t.
func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	var v T
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// capture runs nvg with args and returns what it wrote to stdout and stderr and its exit code.
func capture(t *testing.T, args []string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	of, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	so, se := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = of, ef
	code = run(args)
	os.Stdout, os.Stderr = so, se
	of.Close()
	ef.Close()
	o, _ := os.ReadFile(of.Name())
	e, _ := os.ReadFile(ef.Name())
	return string(o), string(e), code
}

// usageCase is a command line and a part of the usage error it must print.
type usageCase struct {
	args []string
	want string
}

// checkUsageErrors runs each case's command line and wants exit status 2 (a usage error) with
// the case's want on stderr.
func checkUsageErrors(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, c := range cases {
		if _, stderr, code := capture(t, c.args); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("nvg %q: exit %d, %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// twoLayerTeacher writes the tiny teacher cut to its first 2 decoder layers (teacher.cmf) and
// its tokenizer (tokenizer.json) into a temporary directory and returns their paths.
func twoLayerTeacher(t *testing.T) (teacher, tok string) {
	t.Helper()
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	teacher, tok = filepath.Join(dir, "teacher.cmf"), filepath.Join(dir, "tokenizer.json")
	if err := cmf.WriteCMF(teacher, tinytest.FirstLayers(t, m, 2)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, tinyteacher.TokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	return teacher, tok
}

// TestTraceMatchesFixtures runs `nvg trace` on the fixture's ids and compares every output
// tensor with the HF float64 reference, within 1e-4 of its max |value| on the f32 path and
// more by the f16 rounding of the forward's GEMMs on tensor cores (kittest.Path.Tol).
func TestTraceMatchesFixtures(t *testing.T) {
	path := kittest.DevicePath(gputest.Open(t))
	ref, err := cmf.OpenSafetensors(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	idsT := ref.Tensor("ids")
	idv, err := idsT.Float64()
	if err != nil {
		t.Fatal(err)
	}
	nb, tt := idsT.Shape[0], idsT.Shape[1]
	ids := make([][]int, nb)
	for b := range ids {
		for i := 0; i < tt; i++ {
			ids[b] = append(ids[b], int(idv[b*tt+i]))
		}
	}
	dir := t.TempDir()
	idsPath, out := filepath.Join(dir, "ids.json"), filepath.Join(dir, "trace.safetensors")
	b, _ := json.Marshal(ids)
	if err := os.WriteFile(idsPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"trace", "--ids", idsPath, "-o", out}); code != 0 {
		t.Fatalf("nvg trace: exit %d", code)
	}
	got, err := cmf.OpenSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for _, name := range []string{"ids", "hidden.0", "hidden.4", "hidden.8", "logits_row0", "logsumexp", "teacher_topk_logprob"} {
		g, w := got.Tensor(name), ref.Tensor(name)
		if g == nil {
			t.Fatalf("trace output lacks %s", name)
		}
		if !slices.Equal(g.Shape, w.Shape) {
			t.Fatalf("%s: shape %v, want %v", name, g.Shape, w.Shape)
		}
		gv, _ := g.Float64()
		wv, _ := w.Float64()
		var maxErr, maxAbs float64
		for i := range wv {
			maxErr = math.Max(maxErr, math.Abs(gv[i]-wv[i]))
			maxAbs = math.Max(maxAbs, math.Abs(wv[i]))
		}
		if tol := path.Tol(1e-4, kittest.ForwardStages(8, false), 1); maxErr > tol*math.Max(maxAbs, 1e-30) {
			t.Errorf("%s: max error %.3g > %.3g · max |ref| %.3g", name, maxErr, tol, maxAbs)
		}
	}
}

// TestBPWMissWarning: a student whose bits per weight miss --bpw by more than 10 % is
// reported on stderr; one within 10 % is not.
func TestBPWMissWarning(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	se := os.Stderr
	os.Stderr = f
	bpwMissWarning(0.001, 0.1407)
	bpwMissWarning(1, 0.95)
	os.Stderr = se
	f.Close()
	b, _ := os.ReadFile(f.Name())
	if got := string(b); strings.Count(got, "warning") != 1 || !strings.Contains(got, "0.1407 bits/weight, not the --bpw 0.001") {
		t.Errorf("stderr %q: want exactly one warning, for 0.1407 vs 0.001", got)
	}
}

// TestDistillWarnsTrainEqualsEval: held-out files that are also training files are named in a
// warning before any work (here the run then stops at a missing teacher).
func TestDistillWarnsTrainEqualsEval(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := capture(t, []string{"distill", "--train-files", "main.go,output.go", "--eval-files", "./output.go",
		"--teacher", filepath.Join(dir, "missing"), "-o", filepath.Join(dir, "run")})
	want := "warning: 1 of the --eval-files are also --train-files (./output.go): the held-out perplexity will be measured on training text"
	if code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}
