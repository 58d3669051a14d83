package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/eval"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// importQ8 runs `nvg import --quantize q8` on the embedded tiny teacher's checkpoint into
// dir and returns the .cmf's path and the command's stdout.
func importQ8(t *testing.T, dir string) (string, string) {
	t.Helper()
	out := filepath.Join(dir, "q8.cmf")
	stdout, stderr, code := capture(t, []string{"import", "--quantize", "q8", "../../cmf/tinyteacher/model", out})
	if code != 0 {
		t.Fatalf("nvg import --quantize q8: exit %d: %s", code, stderr)
	}
	return out, stdout
}

// TestImportQuantizeInfo writes the tiny teacher with q8 projections (nvg import --quantize
// q8) and reads it back: every decoder projection (6 GatedDeltaNet layers × 8 + 2 attention
// layers × 7 = 62) is q8 with its f16 scales, nvg info prints and reports them (8.125 bits
// per weight), and the flag's bad values and an already 8-bit source are refused (and nvg
// bench's 8-bit flags' bad values).
func TestImportQuantizeInfo(t *testing.T) {
	dir := t.TempDir()
	out, stdout := importQ8(t, dir)
	const line = "8-bit weights  q8 (I8 codes, F16 scales per row and 128 inputs): 62 tensors"
	if !strings.Contains(stdout, line) {
		t.Errorf("import's output lacks %q:\n%s", line, stdout)
	}
	m, err := cmf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	q := m.Quantization()
	m.Close()
	if len(q) != 1 || q[0].Scheme != cmf.QuantQ8 || q[0].Tensors != 62 || q[0].BitsPerWeight() != 8.125 {
		t.Fatalf("quantization of the written file: %+v", q)
	}
	stdout, _, code := capture(t, []string{"info", out})
	if code != 0 || !strings.Contains(stdout, line) || !strings.Contains(stdout, "8.125 bits/weight") {
		t.Errorf("nvg info: exit %d, output lacks %q:\n%s", code, line, stdout)
	}
	stdout, _, code = capture(t, []string{"info", "--json", out})
	var info struct {
		Quantization []struct {
			Scheme  string  `json:"scheme"`
			Tensors int     `json:"tensors"`
			BPW     float64 `json:"bits_per_weight"`
			Block   [2]int  `json:"block"`
		} `json:"quantization"`
	}
	if err := json.Unmarshal([]byte(stdout), &info); code != 0 || err != nil || len(info.Quantization) != 1 ||
		info.Quantization[0].Scheme != "q8" || info.Quantization[0].Tensors != 62 || info.Quantization[0].BPW != 8.125 || info.Quantization[0].Block != [2]int{1, 128} {
		t.Errorf("nvg info --json: exit %d, %v, %+v", code, err, info)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", "--quantize", "int4", "../../cmf/tinyteacher/model", filepath.Join(dir, "x.cmf")}, 2, `--quantize must be q8 or fp8, got "int4"`},
		{[]string{"import", "--quantize", "q8", out, filepath.Join(dir, "y.cmf")}, 1, "quantize from a bf16, f16 or f32 checkpoint"},
		{[]string{"bench", "--teacher-gap"}, 2, "--teacher-gap needs an 8-bit --teacher-dtype"},
		{[]string{"bench", "--teacher-dtype", "f16,int4"}, 2, `unknown teacher dtype "int4"`},
	} {
		_, stderr, code := capture(t, tc.args)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("nvg %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// compareResult is the part of `nvg eval --compare --json`'s output the tests read.
type compareResult struct {
	Path       string   `json:"path"`
	Gap        eval.Gap `json:"gap"`
	Perplexity float64  `json:"perplexity"`
	Other      float64  `json:"compare_perplexity"`
}

// TestEvalCompareQuantTeacher compares the q8 tiny teacher with the bf16 one (nvg eval
// --compare) on the GPU and on the host, on 3 windows of 32 tokens of a Go file: the top-32
// KL agrees within 10 % + 1e-5 nats, the top-1 agreement within one token, the perplexities
// within 0.5 %; the host adds the full KL, at least the top-k one. A student is refused.
func TestEvalCompareQuantTeacher(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	q8, _ := importQ8(t, t.TempDir())
	src, err := filepath.Abs("eval.go")
	if err != nil {
		t.Fatal(err)
	}
	res := map[bool]compareResult{}
	for _, onHost := range []bool{false, true} {
		a := []string{"eval", "--json", "--files", src, "--windows", "3", "--t", "32", "--batch", "2", "--compare", q8}
		if onHost {
			a = append(a, "--host")
		}
		var code int
		out := captureStdout(t, func() { code = run(a) })
		var r compareResult
		if err := json.Unmarshal(out, &r); code != 0 || err != nil {
			t.Fatalf("nvg %v: exit %d, output %q: %v", a, code, out, err)
		}
		res[onHost] = r
		t.Logf("%s: %+v", r.Path, r)
	}
	g, h := res[false], res[true]
	if g.Path != "gpu-f16" || h.Path != "host-f64" || g.Gap.Tokens != 3*32 || h.Gap.Tokens != 3*32 || g.Gap.K != 32 ||
		math.Abs(g.Gap.TopKKL-h.Gap.TopKKL) > 0.1*h.Gap.TopKKL+1e-5 || math.Abs(g.Gap.Top1-h.Gap.Top1)*96 > 1 ||
		math.Abs(g.Perplexity-h.Perplexity) > 5e-3*h.Perplexity || math.Abs(g.Other-h.Other) > 5e-3*h.Other ||
		!(h.Gap.KL >= h.Gap.TopKKL*0.5) || !(h.Gap.TopKKL > 0) {
		t.Errorf("GPU %+v, host %+v", g, h)
	}
	student := filepath.Join(t.TempDir(), "s.cmf")
	captureStdout(t, func() { run([]string{"compress", "--bpw", "0.5", "--paths", "1", "--power-iters", "0", "-o", student}) })
	if _, stderr, code := capture(t, []string{"eval", "--windows", "1", "--t", "8", "--compare", student}); code != 2 || !strings.Contains(stderr, "--compare compares teachers") {
		t.Errorf("--compare with a student: exit %d, %q", code, stderr)
	}
}

// TestDistillQuantTeacher distills from the q8 tiny teacher (nvg distill --teacher q8.cmf,
// streamed): the run compresses the 8-bit teacher (the student holds no 8-bit tensor),
// trains two steps and evaluates the teacher (a finite perplexity) and the student.
func TestDistillQuantTeacher(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	q8, _ := importQ8(t, t.TempDir())
	src := filepath.Join(runtime.GOROOT(), "src")
	files := []string{"--train-files", filepath.Join(src, "strings", "strings.go"), "--eval-files", filepath.Join(src, "sort", "sort.go")}
	out := filepath.Join(t.TempDir(), "run")
	args := append([]string{"distill", "--teacher", q8, "--bpw", "0.5", "--paths", "1", "--steps", "2", "--nb", "2", "--t", "16", "--k", "8",
		"--eval-windows", "2", "--stream-teacher", "-o", out}, append(files, plainRun...)...)
	if code := run(args); code != 0 {
		t.Fatalf("nvg %v: exit %d", args, code)
	}
	rep, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cmf.Open(filepath.Join(out, "student.cmf"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, tn := range s.Tensors {
		if tn.Quant != nil {
			t.Errorf("student tensor %s is 8-bit (%s)", name, tn.DType)
		}
	}
	if rep.Steps != 2 || !(rep.TeacherPPL > 1) || math.IsInf(rep.TeacherPPL, 0) || !(rep.DistilledPPL > 1) {
		t.Fatalf("report %+v", rep)
	}
	t.Logf("q8 teacher: perplexity %.4f, compressed student %.4f, distilled %.4f", rep.TeacherPPL, rep.CompressedPPL, rep.DistilledPPL)
}
