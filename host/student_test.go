package host

import (
	"math"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/testkit/tinytest"
)

// fixtureStudent returns the fixture's student: the tiny teacher with layer 0's input norm
// stored as w' = (1+w)·1.03 − 1 (a shallow copy; the shared teacher is not modified).
func fixtureStudent(t *testing.T) *Net {
	t.Helper()
	teacher := tinyNet(t)
	s := *teacher
	s.Layers = append([]*DecoderLayer(nil), teacher.Layers...)
	l0 := *teacher.Layers[0]
	l0.InputNorm = make([]float64, len(teacher.Layers[0].InputNorm))
	for i, w := range teacher.Layers[0].InputNorm {
		l0.InputNorm[i] = (1+w)*1.03 - 1
	}
	s.Layers[0] = &l0
	return &s
}

// fixtureTopK returns the fixture's ids as windows and the teacher top-k: ids and
// p_T = softmax of teacher_topk_logprob over the k.
func fixtureTopK(t *testing.T, fx tinytest.Fixtures, nb, T, K int) ([][]int, []int, []float64) {
	flat := fx.IDs(t, "ids", nb, T)
	ids := make([][]int, nb)
	for b := range ids {
		ids[b] = flat[b*T : (b+1)*T]
	}
	tid := fx.IDs(t, "teacher_topk_ids", nb, T, K)
	lp := fx.Get(t, "teacher_topk_logprob", nb, T, K)
	prob := make([]float64, len(lp))
	for r := 0; r < nb*T; r++ {
		row := lp[r*K : (r+1)*K]
		m := row[0]
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for i, v := range row {
			prob[r*K+i] = math.Exp(v - m)
			s += prob[r*K+i]
		}
		for i := range row {
			prob[r*K+i] /= s
		}
	}
	return ids, tid, prob
}

// relL2 returns ‖a − b‖₂ / ‖b‖₂.
// TestStudentLossGradFixtures checks the student loss, the per-token KL, d loss/d embeddings
// and every norm-gain gradient against the HF float64 fixtures (whose GatedDeltaNet ran in
// float32).
func TestStudentLossGradFixtures(t *testing.T) {
	s := fixtureStudent(t)
	fx := tinytest.OpenFixtures(t)
	const nb, T, K = 2, 64, 32
	H := s.Config.HiddenSize
	ids, tid, prob := fixtureTopK(t, fx, nb, T, K)
	sg, err := s.StudentLossGrad(ids, tid, prob, K)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := fx.Get(t, "student_loss", 1)[0]
	rel := math.Abs(sg.Loss-wantLoss) / math.Abs(wantLoss)
	t.Logf("student_loss %.10g, want %.10g: relative error %.3g", sg.Loss, wantLoss, rel)
	if !(rel <= 1e-6) {
		t.Errorf("student_loss: relative error %.3g > 1e-6", rel)
	}
	// The forward-only loss, with the head in blocks of 5 rows (128 = 25·5 + 3).
	func() {
		defer func(b int) { headBlockLogits = b }(headBlockLogits)
		headBlockLogits = 5 * s.Config.VocabSize
		loss2, _, err := s.StudentLoss(ids, tid, prob, K)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss2-sg.Loss) > 1e-12*sg.Loss {
			t.Errorf("StudentLoss in blocks of 5 rows %.17g differs from StudentLossGrad's %.17g", loss2, sg.Loss)
		}
	}()
	check := func(name string, got, want []float64) { t.Helper(); tinytest.CheckRelL2(t, name, got, want, 1e-3) }
	check("student_kl_per_token", sg.KLPerToken, fx.Get(t, "student_kl_per_token", nb, T))
	check("grad.embeds", sg.Embeds, fx.Get(t, "grad.embeds", nb, T, H))
	seen := 0
	for _, tn := range fx.File.Tensors {
		name := tn.Name
		if len(name) < 5 || name[:5] != "grad." || name == "grad.embeds" {
			continue
		}
		seen++
		got, ok := sg.Grads[name[5:]]
		if !ok {
			t.Errorf("%s: no gradient %q", name, name[5:])
			continue
		}
		check(name, got, fx.Get(t, name, tn.Shape...))
	}
	// 8 layers × 2 norms + 2×(q, k norm) + 6 gated norms + the final norm.
	if seen != 27 || len(sg.Grads) != 27 {
		t.Errorf("fixture has %d norm gradients and StudentLossGrad %d, want 27 each", seen, len(sg.Grads))
	}
}

// TestStudentLossGradErrors checks that bad windows and teacher rows are rejected with an
// error naming the problem, before any work.
func TestStudentLossGradErrors(t *testing.T) {
	n := tinyNet(t)
	V := n.Config.VocabSize
	ids := [][]int{{1, 2, 3}, {4, 5, 6}}
	tid := []int{1, 2, 3, 4, 5, 6}
	prob := []float64{1, 1, 1, 1, 1, 1}
	for _, c := range []struct {
		name string
		ids  [][]int
		tid  []int
		prob []float64
		k    int
		want string
	}{
		{"no windows", nil, tid, prob, 1, "no windows"},
		{"ragged", [][]int{{1, 2, 3}, {4}}, tid, prob, 1, "window 1 has 1 tokens"},
		{"id range", [][]int{{1, 2, V}, {4, 5, 6}}, tid, prob, 1, "outside [0, 8192)"},
		{"k zero", ids, tid, prob, 0, "k = 0"},
		{"k > vocab", ids, tid, prob, V + 1, "exceeds the vocabulary"},
		{"short ids", ids, tid[:5], prob, 1, "topkIDs has 5 values"},
		{"short probs", ids, tid, prob[:5], 1, "topkProb has 5 values"},
		{"teacher id", ids, []int{1, 2, 3, 4, 5, -1}, prob, 1, "teacher id [5, 0] = -1"},
		{"teacher dup", ids, tid, prob, 2, ""},
		{"teacher prob", ids, tid, []float64{1, 1, math.Inf(1), 1, 1, 1}, 1, "[2, 0] = +Inf"},
		{"zero row", ids, tid, []float64{1, 1, 1, 0, 1, 1}, 1, "row 3 sum to 0"},
	} {
		if c.name == "teacher dup" {
			// k = 2 over 6 tokens: 12 ids, row 0 repeating one.
			c.tid = []int{7, 7, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}
			c.prob = []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
			c.want = "appears twice in row 0"
		}
		for _, f := range []func() error{
			func() error { _, err := n.StudentLossGrad(c.ids, c.tid, c.prob, c.k); return err },
			func() error { _, _, err := n.StudentLoss(c.ids, c.tid, c.prob, c.k); return err },
		} {
			if err := f(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
			}
		}
	}
	if _, err := n.LayerBackward(nil, nil, map[string][]float64{}); err == nil {
		t.Error("LayerBackward(nil) accepted")
	}
	a, err := n.LayerActs(0, make([]float64, 2*n.Config.HiddenSize), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.LayerBackward(a, make([]float64, 5), map[string][]float64{}); err == nil || !strings.Contains(err.Error(), "dOut 5 values") {
		t.Errorf("short dOut: %v", err)
	}
	a.Layer = 3 // an attention layer given GatedDeltaNet activations
	if _, err := n.LayerBackward(a, make([]float64, 2*n.Config.HiddenSize), map[string][]float64{}); err == nil || !strings.Contains(err.Error(), "mixer kind") {
		t.Errorf("wrong mixer kind: %v", err)
	}
}

// TestStudentHiddenTermErrors: a bad hidden-state term is refused before any work, naming
// what is wrong, by both StudentLossGradHidden and StudentLossHidden; the zero term is none.
func TestStudentHiddenTermErrors(t *testing.T) {
	n := tinyNet(t)
	ids := [][]int{{1, 2, 3}}
	tid, prob := []int{1, 2, 3}, []float64{1, 1, 1}
	H := n.Config.HiddenSize
	ok := make([]float64, 3*H)
	for _, c := range []struct {
		name string
		h    HiddenTerm
		want string
	}{
		{"weight", HiddenTerm{Weight: -1, Layers: []int{0}, Targets: [][]float64{ok}}, "weight -1"},
		{"weight NaN", HiddenTerm{Weight: math.NaN(), Layers: []int{0}, Targets: [][]float64{ok}}, "weight NaN"},
		{"targets", HiddenTerm{Weight: 1, Layers: []int{0, 1}, Targets: [][]float64{ok}}, "1 hidden-state targets for 2 layers"},
		{"order", HiddenTerm{Weight: 1, Layers: []int{1, 0}, Targets: [][]float64{ok, ok}}, "ascending, distinct layers in [0, 8)"},
		{"range", HiddenTerm{Weight: 1, Layers: []int{8}, Targets: [][]float64{ok}}, "in [0, 8)"},
		{"length", HiddenTerm{Weight: 1, Layers: []int{2}, Targets: [][]float64{ok[:H]}}, "layer 2 has 256 values, want nb·t·H = 768"},
	} {
		for _, f := range []func() error{
			func() error { _, err := n.StudentLossGradHidden(ids, tid, prob, 1, c.h); return err },
			func() error { _, _, _, _, err := n.StudentLossHidden(ids, tid, prob, 1, c.h); return err },
		} {
			if err := f(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
			}
		}
	}
}
