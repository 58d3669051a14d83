package host

import (
	"math"
	"testing"
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
func fixtureTopK(t *testing.T, fx fixtures, nb, T, K int) ([][]int, []int, []float64) {
	flat := fx.ids(t, "ids", nb, T)
	ids := make([][]int, nb)
	for b := range ids {
		ids[b] = flat[b*T : (b+1)*T]
	}
	tid := fx.ids(t, "teacher_topk_ids", nb, T, K)
	lp := fx.get(t, "teacher_topk_logprob", nb, T, K)
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
func relL2(a, b []float64) float64 {
	var num, den float64
	for i := range b {
		d := a[i] - b[i]
		num += d * d
		den += b[i] * b[i]
	}
	return math.Sqrt(num / den)
}

// TestStudentLossGradFixtures checks the student loss, the per-token KL, d loss/d embeddings
// and every norm-gain gradient against the HF float64 fixtures (whose GatedDeltaNet ran in
// float32).
func TestStudentLossGradFixtures(t *testing.T) {
	s := fixtureStudent(t)
	fx := openFixtures(t)
	const nb, T, K = 2, 64, 32
	H := s.Config.HiddenSize
	ids, tid, prob := fixtureTopK(t, fx, nb, T, K)
	sg, err := s.StudentLossGrad(ids, tid, prob, K)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := fx.get(t, "student_loss", 1)[0]
	rel := math.Abs(sg.Loss-wantLoss) / math.Abs(wantLoss)
	t.Logf("student_loss %.10g, want %.10g: relative error %.3g", sg.Loss, wantLoss, rel)
	if !(rel <= 1e-6) {
		t.Errorf("student_loss: relative error %.3g > 1e-6", rel)
	}
	loss2, _, err := s.StudentLoss(ids, tid, prob, K)
	if err != nil {
		t.Fatal(err)
	}
	if loss2 != sg.Loss {
		t.Errorf("StudentLoss %.17g differs from StudentLossGrad's %.17g", loss2, sg.Loss)
	}
	check := func(name string, got, want []float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d values, want %d", name, len(got), len(want))
			return
		}
		e := relL2(got, want)
		t.Logf("%-52s rel L2 err %.3g", name, e)
		if !(e <= 1e-3) {
			t.Errorf("%s: relative L2 error %.3g > 1e-3", name, e)
		}
	}
	check("student_kl_per_token", sg.KLPerToken, fx.get(t, "student_kl_per_token", nb, T))
	check("grad.embeds", sg.Embeds, fx.get(t, "grad.embeds", nb, T, H))
	seen := 0
	for _, tn := range fx.f.Tensors {
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
		check(name, got, fx.get(t, name, tn.Shape...))
	}
	// 8 layers × 2 norms + 2×(q, k norm) + 6 gated norms + the final norm.
	if seen != 27 || len(sg.Grads) != 27 {
		t.Errorf("fixture has %d norm gradients and StudentLossGrad %d, want 27 each", seen, len(sg.Grads))
	}
}
