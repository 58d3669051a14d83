package eval

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// tiny returns the embedded tiny teacher's first two decoder layers (closed when t ends).
func tiny(t *testing.T) *cmf.Model {
	t.Helper()
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return tinytest.FirstLayers(t, m, 2)
}

// TestParseIDs: windows of one length are read; every malformed file is refused, saying
// what is wrong.
func TestParseIDs(t *testing.T) {
	ids, err := ParseIDs([]byte(`[[1,2,3],[4,5,6]]`))
	if err != nil || !slices.Equal(ids[0], []int{1, 2, 3}) || !slices.Equal(ids[1], []int{4, 5, 6}) || len(ids) != 2 {
		t.Fatalf("%v, %v", ids, err)
	}
	for in, want := range map[string]string{
		`{"ids": 1}`:      "want a JSON array of windows of token ids",
		`[]`:              "no windows, or an empty first window",
		`[[]]`:            "no windows, or an empty first window",
		`[[1,2],[3]]`:     "window 1 has 1 ids but window 0 has 2",
		`[[1,2],[3,"x"]]`: "want a JSON array",
	} {
		if _, err := ParseIDs([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

// TestCheckIDs names the first id outside the vocabulary, by window and position.
func TestCheckIDs(t *testing.T) {
	if err := CheckIDs([][]int{{0, 7}, {3, 1}}, 8); err != nil {
		t.Errorf("ids inside [0, 8): %v", err)
	}
	for _, tc := range []struct {
		ids  [][]int
		want string
	}{
		{[][]int{{0, 8}}, "window 0, position 1: id 8 is outside the vocabulary [0, 8)"},
		{[][]int{{0, 1}, {-1, 9}}, "window 1, position 0: id -1 is outside"},
	} {
		if err := CheckIDs(tc.ids, 8); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.ids, err, tc.want)
		}
	}
}

// TestRenormalised: each row of k log-probabilities becomes probabilities summing to 1 in
// their ratios, also for log-probabilities far from 0 (the row's maximum is taken out).
func TestRenormalised(t *testing.T) {
	e := math.Exp(-1)
	got := Renormalised([]float64{math.Log(0.5), math.Log(0.25), -1, -1, 1000, 999}, 2)
	want := []float64{2.0 / 3, 1.0 / 3, 0.5, 0.5, 1 / (1 + e), e / (1 + e)}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-15 {
			t.Errorf("[%d] = %.17g, want %.17g", i, got[i], want[i])
		}
	}
}

// TestCheckStudent: the same config passes; another hidden size is refused with both sizes.
func TestCheckStudent(t *testing.T) {
	m := tiny(t)
	if err := CheckStudent(m.Config, m.Config); err != nil {
		t.Fatal(err)
	}
	s := m.Config
	s.HiddenSize = 128
	err := CheckStudent(m.Config, s)
	if err == nil || !strings.Contains(err.Error(), "teacher vocab 8192, hidden 256, 2 layers; student vocab 8192, hidden 128, 2 layers") {
		t.Errorf("error %v", err)
	}
}

// TestOptionsBatch: 0 fits 4096 tokens, and no batch exceeds the windows or falls below 1.
func TestOptionsBatch(t *testing.T) {
	for _, tc := range []struct{ batch, n, t, want int }{
		{0, 100, 128, 32}, {0, 3, 128, 3}, {0, 100, 8192, 1}, {5, 3, 16, 3}, {2, 9, 16, 2},
	} {
		if got := (Options{Batch: tc.batch}).batch(tc.n, tc.t); got != tc.want {
			t.Errorf("Batch %d, %d windows of %d: %d, want %d", tc.batch, tc.n, tc.t, got, tc.want)
		}
	}
}

// TestHeldOutWindows draws windows of T+1 ids from one held-out file with the default
// model's tokenizer: N of them when the text has that many, all of them (fewer than asked)
// when N is larger, and says what the text was.
func TestHeldOutWindows(t *testing.T) {
	t.Setenv("NVG_CACHE", t.TempDir())
	src, err := filepath.Abs("eval.go")
	if err != nil {
		t.Fatal(err)
	}
	cfg := tiny(t).Config
	h := HeldOut{Files: []string{src}, T: 32, Seed: 1}
	all, what, err := h.Windows("", cfg, nil)
	if err != nil || what != "1 file" || len(all) < 3 {
		t.Fatalf("all: %d windows of %q, %v", len(all), what, err)
	}
	h.N = 2
	two, _, err := h.Windows("", cfg, nil)
	if err != nil || len(two) != 2 || len(two[0]) != 33 || len(two[1]) != 33 {
		t.Fatalf("N 2: %d windows, %v", len(two), err)
	}
	h.N = 1 << 20
	if w, _, err := h.Windows("", cfg, nil); err != nil || len(w) != len(all) {
		t.Errorf("N %d: %d windows (want all %d), %v", h.N, len(w), len(all), err)
	}
	if _, _, err := (HeldOut{T: 0}).Windows("", cfg, nil); err == nil {
		t.Error("T 0 accepted")
	}
}

// TestTraceTensorsHost traces the two-layer teacher on the host and checks the fixture
// schema: the tensors in order, with their dtypes and shapes, ids and log-sum-exp the
// trace's; an id outside the vocabulary is refused before anything runs.
func TestTraceTensorsHost(t *testing.T) {
	m := tiny(t)
	ids := [][]int{{1, 2, 3, 4, 5}, {300, 20, 7, 7, 8191}}
	const k = 3
	tr, err := Trace(nil, m, ids, k, false)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := TraceTensors(ids, tr, m.Config, k)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		dtype cmf.DType
		shape []int
	}{
		{"ids", cmf.I64, []int{2, 5}}, {"hidden.0", cmf.F32, []int{2, 5, 256}}, {"hidden.1", cmf.F32, []int{2, 5, 256}},
		{"hidden.2", cmf.F32, []int{2, 5, 256}}, {"logits_row0", cmf.F32, []int{5, 8192}}, {"logsumexp", cmf.F64, []int{2, 5}},
		{"teacher_topk_ids", cmf.I64, []int{2, 5, k}}, {"teacher_topk_logprob", cmf.F64, []int{2, 5, k}},
	}
	if len(ts) != len(want) {
		t.Fatalf("%d tensors, want %d", len(ts), len(want))
	}
	for i, w := range want {
		if ts[i].Name != w.name || ts[i].DType != w.dtype || !slices.Equal(ts[i].Shape, w.shape) {
			t.Errorf("tensor %d: %s %s%v, want %s %s%v", i, ts[i].Name, ts[i].DType, ts[i].Shape, w.name, w.dtype, w.shape)
		}
	}
	got, _ := ts[0].Float64()
	if !slices.Equal(got, []float64{1, 2, 3, 4, 5, 300, 20, 7, 7, 8191}) {
		t.Errorf("ids %v", got)
	}
	if lse, _ := ts[5].Float64(); !slices.Equal(lse, tr.LogSumExp) {
		t.Errorf("logsumexp %v, trace %v", lse, tr.LogSumExp)
	}
	if _, err := Trace(nil, m, [][]int{{1, 8192}}, k, false); err == nil || !strings.Contains(err.Error(), "id 8192 is outside the vocabulary") {
		t.Errorf("id 8192: %v", err)
	}
}

// TestStudentTraceErrors: a student of another architecture and top-k lists of the wrong
// length are refused before any path runs.
func TestStudentTraceErrors(t *testing.T) {
	m := tiny(t)
	other := m.Config
	other.NumHiddenLayers = 3
	ids := [][]int{{1, 2}}
	if _, err := StudentTrace(nil, other, m, ids, []int{1, 2}, []float64{0, 0}, 1); err == nil || !strings.Contains(err.Error(), "architecture differs") {
		t.Errorf("other architecture: %v", err)
	}
	if _, err := StudentTrace(nil, m.Config, m, ids, []int{1, 2, 3}, []float64{0, 0, 0}, 1); err == nil || !strings.Contains(err.Error(), "3 top-k ids") {
		t.Errorf("3 top-k entries for 2 tokens: %v", err)
	}
}

// TestGPUMatchesHost runs each of the package's measurements of the two-layer teacher on the
// GPU and on the host and compares them: the trace's hidden states and log-sum-exp (within
// 2e-3 of each tensor's largest), the held-out NLL (0.5 %), and the gap to its q8 form (top-k
// KL within 10 % + 1e-5 nats, top-1 agreement within a token, NLLs 0.5 %; the host adds the
// full KL, which is at least half the top-k one).
func TestGPUMatchesHost(t *testing.T) {
	dev := gputest.Open(t)
	m := tiny(t)
	tol := kittest.DevicePath(dev).Tol(2e-3, kittest.ForwardStages(2, false), 1)
	ids := [][]int{{1, 2, 3, 4, 5, 6, 7, 8}, {300, 20, 7, 7, 7, 4000, 8191, 0}}
	g, err := Trace(dev, m, ids, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Trace(nil, m, ids, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range append(slices.Clone(h.Hidden), h.LogSumExp) {
		got := g.LogSumExp
		if i < len(g.Hidden) {
			got = g.Hidden[i]
		}
		var e, ref float64
		for j := range want {
			e, ref = math.Max(e, math.Abs(got[j]-want[j])), math.Max(ref, math.Abs(want[j]))
		}
		if !(e <= tol*ref) {
			t.Errorf("tensor %d of the trace: GPU vs host %.3g > %.3g · %.3g", i, e, tol, ref)
		}
	}
	windows := make([][]int, 3)
	for b := range windows {
		for j := range 17 {
			windows[b] = append(windows[b], (b*1009+j*131)%8192)
		}
	}
	nll := map[bool]float64{}
	for _, onHost := range []bool{false, true} {
		d := dev
		if onHost {
			d = nil
		}
		ev, err := NewEvaluator(d, m, windows, Options{Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		sum, n, err := ev.NLL(nil)
		ev.Close()
		if err != nil || n != 3*16 {
			t.Fatalf("%s: %d tokens, %v", ev.Path, n, err)
		}
		nll[onHost] = sum / float64(n)
	}
	if rel := math.Abs(nll[false]-nll[true]) / nll[true]; !(rel <= 5e-3) {
		t.Errorf("NLL GPU %.6f, host %.6f", nll[false], nll[true])
	}
	q8, err := cmf.QuantizeModel(m, cmf.QuantQ8)
	if err != nil {
		t.Fatal(err)
	}
	gg, err := Compare(dev, m, q8, windows, 8, Options{Batch: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hg, err := Compare(nil, m, q8, windows, 8, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("q8 gap: GPU %+v, host %+v", gg, hg)
	if gg.Tokens != 48 || hg.Tokens != 48 || gg.K != 8 || math.Abs(gg.TopKKL-hg.TopKKL) > 0.1*hg.TopKKL+1e-5 ||
		math.Abs(gg.Top1-hg.Top1)*48 > 1 || math.Abs(gg.NLL-hg.NLL) > 5e-3*hg.NLL || math.Abs(gg.RefNLL-nll[true]) > 5e-3*nll[true] ||
		!(hg.KL >= 0.5*hg.TopKKL) || !(hg.TopKKL > 0) || gg.KL != 0 {
		t.Errorf("GPU %+v, host %+v (host NLL %.6f)", gg, hg, nll[true])
	}
}

// TestIsStudentAndRefusals: a teacher is not a student; a model with a BLR tensor is, and
// Compare refuses it.
func TestIsStudentAndRefusals(t *testing.T) {
	m := tiny(t)
	if IsStudent(m) {
		t.Fatal("the teacher is a student")
	}
	s := cmf.NewModel(m.Config)
	s.Tensors["model.layers.0.mlp.up_proj.weight"] = &cmf.Tensor{Name: "model.layers.0.mlp.up_proj.weight", DType: cmf.BLR}
	if !IsStudent(s) {
		t.Fatal("a model with a BLR tensor is not a student")
	}
	if _, err := Compare(nil, m, s, [][]int{{1, 2}}, 1, Options{}, nil); err == nil || !strings.Contains(err.Error(), "compares teachers") {
		t.Errorf("Compare with a student: %v", err)
	}
}
