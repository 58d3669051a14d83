package nvgkit_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// withTensor returns a copy of m (tensors shared) whose tensor name holds set(values), stored
// as F32.
func withTensor(t testing.TB, m *cmf.Model, name string, set func(v []float64)) *cmf.Model {
	t.Helper()
	out := cmf.NewModel(m.Config)
	for _, tn := range m.Tensors {
		if err := out.Set(tn); err != nil {
			t.Fatal(err)
		}
	}
	v, err := m.Tensors[name].Float64()
	if err != nil {
		t.Fatal(err)
	}
	set(v)
	nt, err := cmf.NewFloatTensor(name, cmf.F32, m.Tensors[name].Shape, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Set(nt); err != nil {
		t.Fatal(err)
	}
	return out
}

// randWindows returns n windows of t random ids below vocab.
func randWindows(rng *rand.Rand, n, t, vocab int) [][]int {
	w := make([][]int, n)
	for b := range w {
		w[b] = make([]int, t)
		for i := range w[b] {
			w[b][i] = rng.IntN(vocab)
		}
	}
	return w
}

// TestDeltaRuleHugeALog: the tiny teacher with layer 1's A_log = (90, 85): head 0's
// exp(A_log) overflows f32, so g = −∞ at every token; head 1's g ≈ −1e37 is finite, but a
// chunk's cumulative sum of two overflows. The state is then forgotten at every token
// (exp(g) = 0), as the float64 host computes. Two windows of t = 80 tokens (two chunks, the
// second short) on a work of 2 windows take the chunked delta rule (nb·hv = 4 ≤ 64, as
// gpu.GatedDeltaRuleAuto picks it), on a work of 33 windows (the two padded; nb·hv = 66) the
// token-by-token one: every hidden state of both is finite, within 1e-3·max|h| of each
// other (the GPU mixers agree to ~1e-5 relative, TestGatedDeltaRuleChunkedInfDecay; seven
// more layers of f16 weights follow) and within 2e-3·max|h| of the host's (the bound of
// TestTraceGPUAndHostSchema for the f16 weights).
func TestDeltaRuleHugeALog(t *testing.T) {
	d, m, _ := kittest.TinyTeacher(t)
	m2 := withTensor(t, m, "model.layers.1.linear_attn.A_log", func(v []float64) { v[0], v[1] = 90, 85 })
	net, err := nvgkit.LoadNet(d, m2, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Release()
	const T = 80
	ids := randWindows(rand.New(rand.NewPCG(5, 6)), 2, T, m.Config.VocabSize)
	hn, err := host.Load(m2)
	if err != nil {
		t.Fatal(err)
	}
	want, err := hn.Forward(ids, host.ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var traces [][][]float32
	for _, nb := range []int{2, 33} {
		w := newWork(t, d, net, nb, T)
		tr, err := nvgkit.Forward(net, w, ids, nvgkit.ForwardOptions{})
		w.Release()
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, tr.Hidden)
	}
	for l, h := range want.Hidden {
		ref := 0.0
		for _, v := range h {
			ref = math.Max(ref, math.Abs(v))
		}
		var eHost, eTok float64
		for i, v := range traces[0][l] {
			eHost = math.Max(eHost, math.Abs(float64(v)-h[i]))
			eTok = math.Max(eTok, math.Abs(float64(v)-float64(traces[1][l][i])))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("hidden %d element %d is %v on the chunked path (token-by-token %v, host %v)", l, i, v, traces[1][l][i], h[i])
			}
		}
		if !(eTok <= 1e-3*ref) {
			t.Errorf("hidden %d: chunked vs token-by-token max |Δ| %.3g > 1e-3 · %.3g", l, eTok, ref)
		}
		if !(eHost <= 2e-3*ref) {
			t.Errorf("hidden %d: chunked vs host max |Δ| %.3g > 2e-3 · %.3g", l, eHost, ref)
		}
	}
}

// hugeNorm is m with layer l's post-attention RMSNorm gain 3e38 (finite, so LoadNet takes
// it): the MLP's input overflows f32 and the layer's output is the first non-finite hidden
// state.
func hugeNorm(t testing.TB, m *cmf.Model, l string) *cmf.Model {
	return withTensor(t, m, "model.layers."+l+".post_attention_layernorm.weight", func(v []float64) {
		for i := range v {
			v[i] = 3e38
		}
	})
}

// TestFirstNonFinite: on copies of the tiny teacher with a huge gain in layer 5
// (linear_attention) or layer 3 (full_attention), NLL's sum is not finite and
// FirstNonFinite names that layer and its kind, as a Teacher and (layer 5) as a Student;
// on the unmodified teacher it finds nothing; and it refuses no windows and windows of the
// wrong length.
func TestFirstNonFinite(t *testing.T) {
	d, m, teacher := kittest.TinyTeacher(t)
	const T = 40
	windows := randWindows(rand.New(rand.NewPCG(7, 8)), 3, T+1, m.Config.VocabSize)
	for _, tc := range []struct {
		layer string
		kind  nvgkit.NetKind
		want  string
	}{
		{"5", nvgkit.Teacher, "layer 5 (linear_attention)"},
		{"3", nvgkit.Teacher, "layer 3 (full_attention)"},
		{"5", nvgkit.Student, "layer 5 (linear_attention)"},
	} {
		net, err := nvgkit.LoadNet(d, hugeNorm(t, m, tc.layer), tc.kind)
		if err != nil {
			t.Fatal(err)
		}
		w := newWork(t, d, net, 2, T)
		var sum float64
		if tc.kind == nvgkit.Teacher {
			sum, _, err = nvgkit.NLL(net, w, windows, nil)
		} else {
			sum, _, err = nvgkit.StudentNLL(net, w, windows, nil)
		}
		if err != nil || !math.IsNaN(sum) && !math.IsInf(sum, 0) {
			t.Errorf("%v with a huge gain in layer %s: NLL %v, %v; want a non-finite sum", tc.kind, tc.layer, sum, err)
		}
		nf, err := nvgkit.FirstNonFinite(net, w, windows)
		if err != nil {
			t.Fatal(err)
		}
		if nf == nil || nf.Where() != tc.want || nf.Window != 0 || nf.Token < 0 || nf.Token >= T || !math.IsNaN(float64(nf.Value)) && !math.IsInf(float64(nf.Value), 0) {
			t.Errorf("%v with a huge gain in layer %s: FirstNonFinite %+v, want %s in window 0", tc.kind, tc.layer, nf, tc.want)
		} else if !strings.HasPrefix(nf.String(), tc.want+": ") {
			t.Errorf("String() = %q", nf.String())
		}
		w.Release()
		net.Release()
	}
	w := newWork(t, d, teacher, 2, T)
	defer w.Release()
	if nf, err := nvgkit.FirstNonFinite(teacher, w, windows); nf != nil || err != nil {
		t.Errorf("the tiny teacher: FirstNonFinite %v, %v; want nothing", nf, err)
	}
	if nf, err := nvgkit.FirstNonFinite(teacher, w, [][]int{windows[0][:T]}); nf != nil || err != nil {
		t.Errorf("a window of work.T tokens: %v, %v", nf, err)
	}
	if _, err := nvgkit.FirstNonFinite(teacher, w, nil); err == nil || !strings.Contains(err.Error(), "no windows") {
		t.Errorf("no windows: %v", err)
	}
	if _, err := nvgkit.FirstNonFinite(teacher, w, [][]int{windows[0], windows[1][:T]}); err == nil || !strings.Contains(err.Error(), "window 1 has 40 tokens") {
		t.Errorf("windows of mixed lengths: %v", err)
	}
}

// TestFirstNonFiniteTrainable: on the 1-bit student every value is finite (""); with +Inf
// written at index 5 of the third trainable and NaN at index 0 of a later one, it names the
// third and index 5. TrainableLimit is f16's largest finite value for every BLR metric scale
// (stored as f16 in the .cmf) and f32's for every norm gain. A Teacher is refused.
func TestFirstNonFiniteTrainable(t *testing.T) {
	_, teacher, s := kittest.RobustNets(t)
	names := s.Trainables()
	if n, i, v, err := nvgkit.FirstNonFiniteTrainable(s); n != "" || err != nil {
		t.Fatalf("the compressed student: %s[%d] = %v, %v; want every value finite", n, i, v, err)
	}
	metrics := 0
	for _, n := range names {
		lim, err := s.TrainableLimit(n)
		want := float64(math.MaxFloat32)
		if strings.Contains(n, ".weight.p") { // "<tensor>.p<path>.<h|l|g>"
			want = 65504
			metrics++
		}
		if err != nil || lim != want {
			t.Errorf("TrainableLimit(%s) = %g, %v; want %g", n, lim, err, want)
		}
	}
	if metrics == 0 || metrics == len(names) {
		t.Fatalf("%d of %d trainables are metric scales", metrics, len(names))
	}
	poison := func(name string, i int, x float32) {
		v, err := s.ReadTrainable(name, false)
		if err != nil || len(v) <= i {
			t.Fatalf("%s: %d values, %v", name, len(v), err)
		}
		v[i] = x
		if err := s.WriteTrainable(name, v, false); err != nil {
			t.Fatal(err)
		}
	}
	poison(names[2], 5, float32(math.Inf(1)))
	poison(names[len(names)-1], 0, float32(math.NaN()))
	if n, i, v, err := nvgkit.FirstNonFiniteTrainable(s); n != names[2] || i != 5 || !math.IsInf(float64(v), 1) || err != nil {
		t.Errorf("FirstNonFiniteTrainable = %s[%d] = %v, %v; want %s[5] = +Inf", n, i, v, err, names[2])
	}
	if _, _, _, err := nvgkit.FirstNonFiniteTrainable(teacher); err == nil {
		t.Error("a Teacher net: no error")
	}
}
