package host

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

const (
	tinyDir = "../cmf/tinyteacher/model"
)

var tiny struct {
	once sync.Once
	net  *Net
	err  error
}

// tinyNet loads the tiny teacher once per test binary.
func tinyNet(t testing.TB) *Net {
	t.Helper()
	tiny.once.Do(func() {
		m, err := cmf.Open(tinyDir)
		if err != nil {
			tiny.err = err
			return
		}
		defer m.Close()
		tiny.net, tiny.err = Load(m)
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	return tiny.net
}

func maxAbs(v []float64) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

func maxAbsDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		d := math.Abs(a[i] - b[i])
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = math.Max(m, d)
	}
	return m
}

// TestForwardFixtures compares the whole-model forward with the HF float64 fixtures.
func TestForwardFixtures(t *testing.T) {
	n := tinyNet(t)
	fx := tinytest.OpenFixtures(t)
	c := n.Config
	const nb, T, K = 2, 64, 32
	H, V := c.HiddenSize, c.VocabSize
	flat := fx.IDs(t, "ids", nb, T)
	ids := [][]int{flat[:T], flat[T:]}
	tr, err := n.Forward(ids, ForwardOptions{TopK: K, Logits0: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Hidden) != c.NumHiddenLayers+1 {
		t.Fatalf("%d hidden states, want %d", len(tr.Hidden), c.NumHiddenLayers+1)
	}
	for L := 0; L <= c.NumHiddenLayers; L++ {
		want := fx.Get(t, "hidden."+strconv.Itoa(L), nb, T, H)
		ref := maxAbs(want)
		d := maxAbsDiff(tr.Hidden[L], want)
		t.Logf("hidden.%d: max abs err %.3g, relative to max abs %.3g: %.3g", L, d, ref, d/ref)
		if !(d <= 1e-4*ref) {
			t.Errorf("hidden.%d: max abs error %.3g > 1e-4 · %.3g", L, d, ref)
		}
	}
	logits := fx.Get(t, "logits_row0", T, V)
	if d, ref := maxAbsDiff(tr.Logits0, logits), maxAbs(logits); !(d <= 1e-5*ref) {
		t.Errorf("logits_row0: max abs error %.3g > 1e-5 · %.3g", d, ref)
	} else {
		t.Logf("logits_row0: max abs err %.3g, relative %.3g", d, d/ref)
	}
	lse := fx.Get(t, "logsumexp", nb, T)
	var worst float64
	for i := range lse {
		worst = math.Max(worst, math.Abs(tr.LogSumExp[i]-lse[i])/math.Abs(lse[i]))
	}
	t.Logf("logsumexp: max relative err %.3g", worst)
	if !(worst <= 1e-5) {
		t.Errorf("logsumexp: max relative error %.3g > 1e-5", worst)
	}
	wantIDs := fx.IDs(t, "teacher_topk_ids", nb, T, K)
	wantLP := fx.Get(t, "teacher_topk_logprob", nb, T, K)
	var lpErr float64
	mismatch, swapped := 0, 0
	for r := 0; r < nb*T; r++ {
		for j := 0; j < K; j++ {
			i := r*K + j
			lpErr = math.Max(lpErr, math.Abs(tr.TopKLogProbs[i]-wantLP[i]))
			if tr.TopKIDs[i] == wantIDs[i] {
				continue
			}
			swapped++
			// A swap is acceptable only between near-equal neighbours.
			p := math.Exp(wantLP[i])
			near := false
			if j > 0 && math.Abs(math.Exp(wantLP[i-1])-p) <= 1e-6 {
				near = true
			}
			if j+1 < K && math.Abs(math.Exp(wantLP[i+1])-p) <= 1e-6 {
				near = true
			}
			if !near {
				mismatch++
				if mismatch <= 5 {
					t.Errorf("token %d rank %d: id %d, want %d (p %.6g)", r, j, tr.TopKIDs[i], wantIDs[i], p)
				}
			}
		}
	}
	t.Logf("top-%d: %d ids differ (%d not between near-equal neighbours), max log-prob abs err %.3g", K, swapped, mismatch, lpErr)
	if !(lpErr <= 1e-4) {
		t.Errorf("top-k log-probs: max abs error %.3g > 1e-4", lpErr)
	}
}

// TestLayerMatchesFixture checks Net.Layer alone, starting from the fixture's input of each
// layer rather than from our own previous layer.
func TestLayerMatchesFixture(t *testing.T) {
	n := tinyNet(t)
	fx := tinytest.OpenFixtures(t)
	const nb, T = 2, 64
	H := n.Config.HiddenSize
	for l := 0; l+1 < n.Config.NumHiddenLayers; l++ {
		x := fx.Get(t, "hidden."+strconv.Itoa(l), nb, T, H)
		want := fx.Get(t, "hidden."+strconv.Itoa(l+1), nb, T, H)
		y, err := n.Layer(l, x, nb, T)
		if err != nil {
			t.Fatal(err)
		}
		ref := maxAbs(want)
		if d := maxAbsDiff(y, want); !(d <= 1e-4*ref) {
			t.Errorf("layer %d alone: max abs error %.3g > 1e-4 · %.3g", l, d, ref)
		}
	}
	if _, err := n.Layer(n.Config.NumHiddenLayers, make([]float64, H), 1, 1); err == nil {
		t.Error("layer index out of range accepted")
	}
	if _, err := n.Layer(0, make([]float64, H+1), 1, 1); err == nil {
		t.Error("wrong input length accepted")
	}
}

// TestNLLMatchesLogSoftmax checks NLL against the fixture's log-sum-exp and logits: the NLL
// of predicting ids[1:] from ids[:63] of window 0 equals Σ (lse − logit[target]) over
// positions 0..62, which depend only on their prefix (causal model).
func TestNLLMatchesLogSoftmax(t *testing.T) {
	n := tinyNet(t)
	fx := tinytest.OpenFixtures(t)
	const T = 64
	V := n.Config.VocabSize
	flat := fx.IDs(t, "ids", 2, T)
	logits := fx.Get(t, "logits_row0", T, V)
	lse := fx.Get(t, "logsumexp", 2, T)
	var want float64
	for p := 0; p+1 < T; p++ {
		want += lse[p] - logits[p*V+flat[p+1]]
	}
	var calls []int
	sum, count, err := n.NLL([][]int{flat[:T]}, func(done, total int) { calls = append(calls, done, total) })
	if err != nil {
		t.Fatal(err)
	}
	if count != T-1 {
		t.Errorf("count %d, want %d", count, T-1)
	}
	if math.Abs(sum-want) > 1e-5*math.Abs(want) {
		t.Errorf("NLL sum %.10g, want %.10g", sum, want)
	}
	if len(calls) != 2 || calls[0] != 1 || calls[1] != 1 {
		t.Errorf("progress calls %v, want [1 1]", calls)
	}
	if _, _, err := n.NLL([][]int{{1}}); err == nil {
		t.Error("1-token window accepted")
	}
}

func TestForwardRejectsBadIDs(t *testing.T) {
	n := tinyNet(t)
	V := n.Config.VocabSize
	for name, ids := range map[string][][]int{
		"none":     nil,
		"empty":    {{}},
		"unequal":  {{1, 2}, {3}},
		"negative": {{1, -1}},
		"too big":  {{V}},
	} {
		if _, err := n.Forward(ids, ForwardOptions{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := n.Forward([][]int{{1}}, ForwardOptions{TopK: V + 1}); err == nil {
		t.Error("TopK > vocab accepted")
	}
}

func TestLoadErrorsNameTensor(t *testing.T) {
	m, err := cmf.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const name = "model.layers.2.linear_attn.in_proj_z.weight"
	orig := m.Tensors[name]
	delete(m.Tensors, name)
	_, err = Load(m)
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("missing tensor: error %v does not name %s", err, name)
	}
	bad, err := cmf.NewFloatTensor(name, cmf.F32, []int{256, 255}, make([]float64, 256*255))
	if err != nil {
		t.Fatal(err)
	}
	m.Tensors[name] = bad
	if _, err = Load(m); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("wrong shape: error %v does not name %s", err, name)
	}
	blr, err := cmf.NewTensor(name, cmf.BLR, orig.Shape, []byte{0x4c})
	if err != nil {
		t.Fatal(err)
	}
	m.Tensors[name] = blr
	if _, err = Load(m); err == nil || !strings.Contains(err.Error(), "BLR") || !strings.Contains(err.Error(), name) {
		t.Errorf("BLR tensor: error %v", err)
	}
}

// TestUntiedHead checks that an untied model uses lm_head.weight: with lm_head = 2·E the
// logits are exactly twice the tied ones.
func TestUntiedHead(t *testing.T) {
	tied := tinyNet(t)
	m, err := cmf.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := m.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := e.Float64()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ev {
		ev[i] *= 2
	}
	head, err := cmf.NewFloatTensor("lm_head.weight", cmf.F64, e.Shape, ev)
	if err != nil {
		t.Fatal(err)
	}
	m.Config.TieWordEmbeddings = false
	if _, err := Load(m); err == nil || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Fatalf("untied model without lm_head: error %v", err)
	}
	m.Tensors["lm_head.weight"] = head
	untied, err := Load(m)
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{5, 17, 300, 8000, 2}}
	a, err := tied.Forward(ids, ForwardOptions{Logits0: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := untied.Forward(ids, ForwardOptions{Logits0: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Logits0 {
		if b.Logits0[i] != 2*a.Logits0[i] {
			t.Fatalf("untied logit %d = %g, want 2·%g", i, b.Logits0[i], a.Logits0[i])
		}
	}
}

// TestWindowsIndependent checks at the model level that windows share nothing (conv
// padding, delta-rule state, attention, positions): window 1 of a batch equals that window
// run alone.
func TestWindowsIndependent(t *testing.T) {
	n := tinyNet(t)
	w0 := []int{11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 222, 333}
	w1 := []int{7, 7, 8000, 1, 2, 3, 4, 5, 6, 900, 901, 902}
	both, err := n.Forward([][]int{w0, w1}, ForwardOptions{TopK: 4})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := n.Forward([][]int{w1}, ForwardOptions{TopK: 4})
	if err != nil {
		t.Fatal(err)
	}
	H, T := n.Config.HiddenSize, len(w1)
	for L := range both.Hidden {
		near(t, "hidden."+strconv.Itoa(L)+" window 1", both.Hidden[L][T*H:], alone.Hidden[L], 1e-12)
	}
	near(t, "logsumexp window 1", both.LogSumExp[T:], alone.LogSumExp, 1e-12)
	for i, id := range alone.TopKIDs {
		if both.TopKIDs[4*T+i] != id {
			t.Fatalf("top-k id %d of window 1: %d batched, %d alone", i, both.TopKIDs[4*T+i], id)
		}
	}
}
