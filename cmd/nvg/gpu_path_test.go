package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/eval"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// captureStdout runs f with os.Stdout redirected and returns what it printed.
func captureStdout(t *testing.T, f func()) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return <-done
}

// evalResult is the part of `nvg eval --json`'s output the tests read.
type evalResult struct {
	Perplexity float64 `json:"perplexity"`
	Tokens     int     `json:"tokens"`
	Path       string  `json:"path"`
	TokensPerS float64 `json:"tokens_per_second"`
	PeakGPU    *int64  `json:"peak_gpu_bytes"`
}

// evalJSON runs `nvg eval --json [--host] args…` (--host when onHost) and returns the
// command line and its parsed output; a failure fails t.
func evalJSON(t *testing.T, onHost bool, args ...string) ([]string, evalResult) {
	t.Helper()
	a := []string{"eval", "--json"}
	if onHost {
		a = append(a, "--host")
	}
	a = append(a, args...)
	var code int
	out := captureStdout(t, func() { code = run(a) })
	if code != 0 {
		t.Fatalf("nvg %v: exit %d", a, code)
	}
	var res evalResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("nvg %v: output %q: %v", a, out, err)
	}
	return a, res
}

// TestEvalGPUMatchesHost runs `nvg eval` on the GPU (the default) and with --host on three
// held-out windows of 64 tokens cut from one of the project's own Go files, and checks that
// the perplexities agree to 0.5 %.
func TestEvalGPUMatchesHost(t *testing.T) {
	gputest.Open(t) // fail (not skip) under NVG_REQUIRE_GPU=1 when there is no adapter
	t.Setenv("NVG_CACHE", t.TempDir())
	src, err := filepath.Abs("eval.go")
	if err != nil {
		t.Fatal(err)
	}
	ppl := map[bool]float64{}
	for _, onHost := range []bool{false, true} {
		args, res := evalJSON(t, onHost, "--files", src, "--windows", "3", "--t", "64", "--batch", "2")
		wantPath := map[bool]string{false: "gpu-f16", true: "host-f64"}[onHost]
		if res.Tokens != 3*64 || res.Path != wantPath || !(res.Perplexity > 1) || !(res.TokensPerS > 0) {
			t.Fatalf("nvg %v: %+v", args, res)
		}
		if (res.PeakGPU == nil) != onHost || (!onHost && *res.PeakGPU <= 0) {
			t.Errorf("nvg %v: peak_gpu_bytes %v (want it, positive, on the GPU path only)", args, res.PeakGPU)
		}
		ppl[onHost] = res.Perplexity
	}
	rel := math.Abs(ppl[false]-ppl[true]) / ppl[true]
	t.Logf("perplexity on 3×64 tokens: GPU %.5f, host %.5f (relative difference %.3g)", ppl[false], ppl[true], rel)
	if !(rel <= 5e-3) {
		t.Errorf("GPU perplexity %.5f and host %.5f differ by %.3g > 0.5 %%", ppl[false], ppl[true], rel)
	}
}

// traceGPUAndHost runs `nvg trace --k 8` with args on two windows of 12 ids, on the GPU and
// with --host, writing into dir, and opens both traces (closed when the test ends).
func traceGPUAndHost(t *testing.T, dir string, args ...string) (gpuTrace, hostTrace *cmf.SafetensorsFile) {
	t.Helper()
	ids := [][]int{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {300, 20, 7, 7, 7, 4000, 8191, 0, 5, 6, 1, 2}}
	idsPath := filepath.Join(dir, "ids.json")
	b, _ := json.Marshal(ids)
	if err := os.WriteFile(idsPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var traces [2]*cmf.SafetensorsFile
	for i, name := range []string{"gpu.safetensors", "host.safetensors"} {
		out := filepath.Join(dir, name)
		a := append([]string{"trace"}, args...)
		a = append(a, "--ids", idsPath, "-o", out, "--k", "8")
		if i == 1 {
			a = append(a, "--host")
		}
		captureStdout(t, func() {
			if code := run(a); code != 0 {
				t.Fatalf("nvg %v: exit %d", a, code)
			}
		})
		f, err := cmf.OpenSafetensors(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		traces[i] = f
	}
	return traces[0], traces[1]
}

// TestTraceGPUAndHostSchema runs `nvg trace` on the GPU and with --host on the same ids and
// checks that both files hold the same tensors (names, dtypes, shapes) with close values,
// and that the metadata says which path produced them.
//
// The same for the tiny teacher with q8 projections (nvg import --quantize q8): the GPU
// dequantizes them in its GEMMs, the host reads code × scale exactly. On the f32 GEMM path,
// where the top-k ids must equal the host's: with tensor cores on, near-tied logits may swap
// (nvgkit's TestForwardFixtures and TestQuantTeacherMatchesHost check that path's top-k).
func TestTraceGPUAndHostSchema(t *testing.T) {
	gputest.Open(t)
	kittest.F32(t)
	q8, _ := importQ8(t, t.TempDir())
	for _, args := range [][]string{nil, {"--teacher", q8}} {
		g, h := traceGPUAndHost(t, t.TempDir(), args...)
		compareTraces(t, g, h)
	}
}

// compareTraces checks that the GPU's and the host's traces of one teacher hold the same
// tensors with ids equal and values within 2e-3 of each tensor's largest.
func compareTraces(t *testing.T, g, h *cmf.SafetensorsFile) {
	t.Helper()
	names := []string{"ids", "logits_row0", "logsumexp", "teacher_topk_ids", "teacher_topk_logprob"}
	for l := 0; l <= 8; l++ {
		names = append(names, "hidden."+string(rune('0'+l)))
	}
	for _, name := range names {
		gt, ht := g.Tensor(name), h.Tensor(name)
		if gt == nil || ht == nil {
			t.Fatalf("%s: GPU has it %v, host has it %v", name, gt != nil, ht != nil)
		}
		if gt.DType != ht.DType || !slices.Equal(gt.Shape, ht.Shape) {
			t.Fatalf("%s: GPU %s%v, host %s%v", name, gt.DType, gt.Shape, ht.DType, ht.Shape)
		}
		gv, _ := gt.Float64()
		hv, _ := ht.Float64()
		if name == "teacher_topk_ids" || name == "ids" {
			if !bytes.Equal(mustBytes(t, gt), mustBytes(t, ht)) {
				t.Errorf("%s differ between GPU and host", name)
			}
			continue
		}
		var e, ref float64
		for i := range hv {
			e = math.Max(e, math.Abs(gv[i]-hv[i]))
			ref = math.Max(ref, math.Abs(hv[i]))
		}
		if !(e <= 2e-3*ref) {
			t.Errorf("%s: GPU vs host max abs difference %.3g > 2e-3 · %.3g", name, e, ref)
		}
	}
}

func mustBytes(t *testing.T, tn *cmf.Tensor) []byte {
	t.Helper()
	b, err := tn.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEvalStudentGPUMatchesHost compresses the tiny teacher with `nvg compress` (no
// tokenizer.json beside the output, as the command writes it) and evaluates the student with
// `nvg eval` on the GPU (a BLR Student net) and with --host: both find the embedded tokenizer
// for the tiny teacher's architecture and agree to 0.1 %.
func TestEvalStudentGPUMatchesHost(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	student := filepath.Join(t.TempDir(), "student.cmf")
	if code := run([]string{"compress", "--paths", "1", "--products", "cpu-f32", "-o", student}); code != 0 {
		t.Fatalf("nvg compress: exit %d", code)
	}
	src, err := filepath.Abs("eval.go")
	if err != nil {
		t.Fatal(err)
	}
	ppl := map[bool]float64{}
	for _, onHost := range []bool{false, true} {
		args, res := evalJSON(t, onHost, "--files", src, "--windows", "2", "--t", "32", student)
		if want := map[bool]string{false: "gpu-blr", true: "host-f64"}[onHost]; res.Path != want || !(res.Perplexity > 1) {
			t.Fatalf("nvg %v: %+v, want path %s", args, res, want)
		}
		ppl[onHost] = res.Perplexity
	}
	rel := math.Abs(ppl[false]-ppl[true]) / ppl[true]
	t.Logf("student perplexity on 2×32 tokens: GPU %.5f, host %.5f (relative difference %.3g)", ppl[false], ppl[true], rel)
	if !(rel <= 1e-3) {
		t.Errorf("student GPU perplexity %.5f and host %.5f differ by %.3g > 0.1 %%", ppl[false], ppl[true], rel)
	}
}

// TestEvalWindowsCapped: asking for more held-out windows than the text holds evaluates all
// of them and says so, instead of silently evaluating fewer.
func TestEvalWindowsCapped(t *testing.T) {
	t.Setenv("NVG_CACHE", t.TempDir())
	src, err := filepath.Abs("plotmem.go")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := capture(t, []string{"eval", "--files", src, "--windows", "100000", "--t", "64", "--host", "--json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Windows int `json:"windows"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	want := fmt.Sprintf("warning: --windows 100000 asked, but the held-out text (1 file) has only %d windows of 64+1 tokens: evaluating all %d", res.Windows, res.Windows)
	if res.Windows < 1 || res.Windows >= 100000 || !strings.Contains(stderr, want) {
		t.Errorf("%d windows evaluated; stderr %q lacks %q", res.Windows, stderr, want)
	}
}

// TestEvalWindowsOut: --windows-out writes the windows nvg eval scored — T+1 token ids each,
// the same ones eval.HeldOut draws — so that another framework can score the same tokens.
func TestEvalWindowsOut(t *testing.T) {
	t.Setenv("NVG_CACHE", t.TempDir())
	src, err := filepath.Abs("plotmem.go")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "w.json")
	stdout, stderr, code := capture(t, []string{"eval", "--files", src, "--windows", "3", "--t", "16", "--host", "--json", "--windows-out", out})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Windows, Tokens int
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		T       int     `json:"t"`
		Windows [][]int `json:"windows"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, _, err := eval.HeldOut{Files: []string{src}, N: 3, T: 16, Seed: 1}.Windows("", m.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.T != 16 || res.Windows != 3 || res.Tokens != 3*16 || !reflect.DeepEqual(got.Windows, want) {
		t.Errorf("--windows-out wrote t %d, %v; eval scored %d windows, %d tokens; want t 16 and %v", got.T, got.Windows, res.Windows, res.Tokens, want)
	}
	for i, w := range got.Windows {
		if len(w) != 17 {
			t.Errorf("window %d has %d ids, want 17", i, len(w))
		}
	}
}
