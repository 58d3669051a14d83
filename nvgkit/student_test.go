package nvgkit_test

import (
	"math"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// fixtureStudentModel returns the fixtures' perturbed student: the tiny teacher with
// model.layers.0.input_layernorm.weight stored as w' = (1+w)·1.03 − 1 (F32), every other
// tensor shared with m.
func fixtureStudentModel(t testing.TB, m *cmf.Model) *cmf.Model {
	t.Helper()
	return withTensor(t, m, "model.layers.0.input_layernorm.weight", func(w []float64) {
		for i := range w {
			w[i] = (1+w[i])*1.03 - 1
		}
	})
}

// fixtureTopK is the fixtures' teacher top-k as a TopK: ids and p_T = softmax of
// teacher_topk_logprob over the k (float64, then f32).
func fixtureTopK(t *testing.T, fx tinytest.Fixtures) *nvgkit.TopK {
	tn := fx.File.Tensor("teacher_topk_ids")
	nb, T, K := tn.Shape[0], tn.Shape[1], tn.Shape[2]
	ids := fx.Get(t, "teacher_topk_ids")
	lp := fx.Get(t, "teacher_topk_logprob")
	top := &nvgkit.TopK{NB: nb, T: T, K: K, IDs: make([]int32, len(ids)), Probs: make([]float32, len(ids))}
	for r := 0; r < nb*T; r++ {
		row := lp[r*K : (r+1)*K]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for j, v := range row {
			top.IDs[r*K+j] = int32(ids[r*K+j])
			top.Probs[r*K+j] = float32(math.Exp(v-m) / s)
		}
	}
	return top
}

var fixtureSt struct {
	once sync.Once
	net  *nvgkit.Net
	err  error
}

// fixtureStudent loads the fixtures' perturbed dense student as a Student net once.
func fixtureStudent(t *testing.T) (*gpu.Device, *nvgkit.Net) {
	d, m, _ := kittest.TinyTeacher(t)
	fixtureSt.once.Do(func() {
		fixtureSt.net, fixtureSt.err = nvgkit.LoadNet(d, fixtureStudentModel(t, m), nvgkit.Student)
	})
	if fixtureSt.err != nil {
		t.Fatal(fixtureSt.err)
	}
	return d, fixtureSt.net
}

// TestStudentStepFixtures runs Step on the fixtures' perturbed dense student (its linears
// frozen f16 planes, only the 27 gains train) over the fixtures' 2 windows × 64 tokens
// against their teacher top-32, and compares with the HF float64 reference: the loss
// (relative error), the per-token KL, d loss/d embeddings and every grad.<gain> (relative L2,
// each ≤ 2e-3; f16 weights and f32 arithmetic against float64; on the cooperative-matrix
// path more by the f16 rounding of the GEMMs' activations, kittest.Path.Tol). Every error is
// logged.
func TestStudentStepFixtures(t *testing.T) {
	d, net := fixtureStudent(t)
	fx := tinytest.OpenFixtures(t)
	ids := fx.Windows(t)
	top := fixtureTopK(t, fx)
	kittest.Paths(t, d, func(t *testing.T, path kittest.Path) {
		w := newWork(t, d, net, len(ids), len(ids[0]))
		defer w.Release()
		if got, want := w.Bytes(), nvgkit.StudentWorkBytes(net.Config, len(ids), len(ids[0])); got != want {
			t.Errorf("work holds %d bytes, StudentWorkBytes says %d", got, want)
		}
		// The documented formula, from the config (tiny: attention and GatedDeltaNet layers).
		c := net.Config
		Q, KV := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
		QK, VV := c.LinearNumKeyHeads*c.LinearKeyHeadDim, c.LinearNumValueHeads*c.LinearValueHeadDim
		widths := (c.NumHiddenLayers+1)*c.HiddenSize + 11*c.HiddenSize + 6*c.IntermediateSize + 1 +
			14*Q + 6*KV + c.NumAttentionHeads + 2*(2*QK+VV) + 8*QK + 8*VV + 8*c.LinearNumValueHeads
		if want := uint64(4*len(ids)*len(ids[0])*widths + 8); w.Bytes() != want {
			t.Errorf("work holds %d bytes, the documented formula gives %d", w.Bytes(), want)
		}
		if err := nvgkit.ZeroGrads(net); err != nil {
			t.Fatal(err)
		}
		st, err := nvgkit.Step(net, w, ids, top)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Finite || st.Tokens != 128 {
			t.Errorf("stats: finite %v, tokens %d", st.Finite, st.Tokens)
		}
		// Both passes, forward and backward, through every layer (kittest.Path.Tol).
		tol := path.Tol(2e-3, 2*kittest.ForwardStages(net.Config.NumHiddenLayers, false), 1)
		wantLoss := fx.Get(t, "student_loss")[0]
		rel := math.Abs(st.Loss-wantLoss) / wantLoss
		t.Logf("%-52s %.8g vs %.8g: rel err %.3g", "student_loss", st.Loss, wantLoss, rel)
		if !(rel <= tol) {
			t.Errorf("student_loss: relative error %.3g > %g", rel, tol)
		}
		check := func(name string, got []float32, want []float64) {
			t.Helper()
			tinytest.CheckRelL2(t, name, got, want, tol)
		}
		check("student_kl_per_token", st.KLPerToken, fx.Get(t, "student_kl_per_token"))
		emb, err := nvgkit.EmbedGrads(w)
		if err != nil {
			t.Fatal(err)
		}
		check("grad.embeds", emb, fx.Get(t, "grad.embeds"))
		grads, err := nvgkit.Grads(net)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tn := range fx.File.Tensors {
			if strings.HasPrefix(tn.Name, "grad.") && tn.Name != "grad.embeds" {
				names = append(names, tn.Name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			g, ok := grads[name[5:]]
			if !ok {
				t.Errorf("%s: no gradient %q", name, name[5:])
				continue
			}
			check(name, g, fx.Get(t, name))
		}
		if len(names) != 27 || len(grads) != 27 {
			t.Errorf("fixture has %d gain gradients, the student %d trainables; want 27 each", len(names), len(grads))
		}
		// LossOnly gives the same loss (same kernels) and leaves the gradients alone.
		loss, kl, err := nvgkit.LossOnly(net, w, ids, top)
		if err != nil {
			t.Fatal(err)
		}
		if loss != st.Loss || len(kl) != len(st.KLPerToken) {
			t.Errorf("LossOnly %.17g (%d tokens), Step %.17g", loss, len(kl), st.Loss)
		}
		// A second Step accumulates: every gradient doubles (bit-for-bit, the kernels are
		// deterministic and x + x is exact).
		if _, err := nvgkit.Step(net, w, ids, top); err != nil {
			t.Fatal(err)
		}
		g2, err := nvgkit.Grads(net)
		if err != nil {
			t.Fatal(err)
		}
		for name, g := range grads {
			for i := range g {
				if g2[name][i] != 2*g[i] {
					t.Fatalf("%s[%d]: after two steps %g, want 2×%g", name, i, g2[name][i], g[i])
				}
			}
		}
		// GradNorm is the L2 norm of what Grads reads (summed here in float64); ClipGrads to half
		// of it returns it and halves every gradient.
		var ss float64
		for _, g := range g2 {
			for _, v := range g {
				ss += float64(v) * float64(v)
			}
		}
		norm, err := nvgkit.GradNorm(net)
		if err != nil {
			t.Fatal(err)
		}
		if e := math.Abs(norm-math.Sqrt(ss)) / math.Sqrt(ss); !(e <= 1e-5) {
			t.Errorf("GradNorm %.8g, host norm of Grads %.8g (rel err %.3g)", norm, math.Sqrt(ss), e)
		}
		pre, err := nvgkit.ClipGrads(net, norm/2)
		if err != nil || pre != norm {
			t.Errorf("ClipGrads returned %g, %v; want the norm %g", pre, err, norm)
		}
		if post, err := nvgkit.GradNorm(net); err != nil || math.Abs(post-norm/2) > 1e-5*norm {
			t.Errorf("after ClipGrads(%g) the norm is %g, %v", norm/2, post, err)
		}
		if again, err := nvgkit.ClipGrads(net, norm); err != nil || math.Abs(again-norm/2) > 1e-5*norm {
			t.Errorf("ClipGrads above the norm returned %g, %v", again, err)
		}
		if err := nvgkit.ZeroGrads(net); err != nil {
			t.Fatal(err)
		}
		if n, err := nvgkit.GradNorm(net); err != nil || n != 0 {
			t.Errorf("GradNorm after ZeroGrads = %g, %v", n, err)
		}
	})
}
