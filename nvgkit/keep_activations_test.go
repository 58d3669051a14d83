package nvgkit_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestKeepActivations checks that a Student work with KeepActivations, and with
// KeepBLROutputs as well, and with KeepActivationLayers (each layer alone) gives a step that
// is bit-identical to the recomputing step on the
// BLR student (a GatedDeltaNet and an attention layer): the same loss, per-token KL, d loss/d
// embeddings and every gradient, bit for bit, over two steps (the second also checks the kept
// buffers are rewritten, not stale); that the work grows by exactly KeptActivationBytes (plus
// KeptBLROutputBytes), or the kept layer's KeptActivationLayerBytes; that a teacher's work
// refuses the option; and that KeepBLROutputs alone and bad layer lists are refused.
func TestKeepActivations(t *testing.T) {
	d, c := blrStudent(t)
	t.Run("t1", func(t *testing.T) {
		testKeepActivations(t, c, nvgkit.KeptActivationBytes(c.net, blrNB, blrT), nvgkit.KeepActivations())
	})
	t.Run("t1+c", func(t *testing.T) {
		extra := nvgkit.KeptActivationBytes(c.net, blrNB, blrT) + nvgkit.KeptBLROutputBytes(c.net, blrNB, blrT)
		testKeepActivations(t, c, extra, nvgkit.KeepActivations(), nvgkit.KeepBLROutputs())
	})
	per := nvgkit.KeptActivationLayerBytes(c.net, blrNB, blrT)
	if len(per) < 2 {
		t.Fatalf("KeptActivationLayerBytes = %v: the test student needs ≥ 2 layers", per)
	}
	var sum uint64
	for _, b := range per {
		sum += b
	}
	if sum != nvgkit.KeptActivationBytes(c.net, blrNB, blrT) {
		t.Errorf("KeptActivationLayerBytes sums to %d, KeptActivationBytes = %d", sum, nvgkit.KeptActivationBytes(c.net, blrNB, blrT))
	}
	// One layer kept and the other recomputed, either way round (the student's layers are a
	// GatedDeltaNet and an attention layer): the recompute of one layer must not disturb
	// the other's kept activations.
	for l := range per {
		t.Run(fmt.Sprintf("layer %d only", l), func(t *testing.T) {
			testKeepActivations(t, c, per[l], nvgkit.KeepActivationLayers(l))
		})
	}
	t.Run("last layer with c", func(t *testing.T) {
		l := len(per) - 1
		kw, err := nvgkit.NewWork(d, c.net, blrNB, blrT, nvgkit.KeepActivationLayers(l), nvgkit.KeepBLROutputs())
		if err != nil {
			t.Fatal(err)
		}
		defer kw.Release()
		if got := kw.KeptLayers(); !slices.Equal(got, []int{l}) {
			t.Errorf("KeptLayers = %v, want [%d]", got, l)
		}
	})
	for _, tc := range []struct {
		layers []int
		want   string
	}{
		{nil, "lists no layer"},
		{[]int{len(per)}, fmt.Sprintf("layer %d is not one of the net's %d layers", len(per), len(per))},
		{[]int{-1}, "layer -1 is not one of"},
		{[]int{0, 0}, "lists layer 0 twice"},
	} {
		if _, err := nvgkit.NewWork(d, c.net, blrNB, blrT, nvgkit.KeepActivationLayers(tc.layers...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("KeepActivationLayers(%v): err = %v, want one containing %q", tc.layers, err, tc.want)
		}
	}
	if got := c.work.KeptLayers(); got != nil {
		t.Errorf("a recomputing work's KeptLayers = %v, want nil", got)
	}
	if nvgkit.KeptBLROutputBytes(c.net, blrNB, blrT) == 0 {
		t.Error("KeptBLROutputBytes = 0 for a BLR student")
	}

	_, _, tn := kittest.TinyTeacher(t)
	if _, err := nvgkit.NewWork(d, tn, 1, 4, nvgkit.KeepActivations()); err == nil || !strings.Contains(err.Error(), "Student") {
		t.Errorf("teacher work with KeepActivations: err = %v, want a refusal naming Student", err)
	}
	if _, err := nvgkit.NewWork(d, c.net, 1, 4, nvgkit.KeepBLROutputs()); err == nil || !strings.Contains(err.Error(), "needs KeepActivations") {
		t.Errorf("KeepBLROutputs without KeepActivations: err = %v, want a refusal", err)
	}
	if n := nvgkit.KeptBLROutputBytes(tn, 1, 4); n != 0 {
		t.Errorf("KeptBLROutputBytes(teacher) = %d, want 0", n)
	}
}

// testKeepActivations compares steps through a work made with opts, which must hold extra
// bytes more than c's recomputing work, with steps through c's work.
func testKeepActivations(t *testing.T, c *blrCase, extra uint64, opts ...nvgkit.WorkOption) {
	kw, err := nvgkit.NewWork(c.net.Device(), c.net, blrNB, blrT, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer kw.Release()
	type result struct {
		st    nvgkit.StepStats
		emb   []float32
		grads map[string][]float32
	}
	step := func(w *nvgkit.Work, ids [][]int) result {
		t.Helper()
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		st, err := nvgkit.Step(c.net, w, ids, c.top)
		if err != nil {
			t.Fatal(err)
		}
		emb, err := nvgkit.EmbedGrads(w)
		if err != nil {
			t.Fatal(err)
		}
		g, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		return result{st, emb, g}
	}
	same := func(what string, a, b []float32) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %d values kept, %d recomputed", what, len(a), len(b))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Errorf("%s[%d]: kept %g, recomputed %g (not bit-identical)", what, i, a[i], b[i])
				return
			}
		}
	}
	// The second round runs other token ids through the same work: stale kept activations
	// from the first round would show.
	other := make([][]int, len(c.ids))
	for i, w := range c.ids {
		other[i] = append([]int(nil), w...)
		for j := range other[i] {
			other[i][j] = (other[i][j] + 17*j + 3) % c.net.Config.VocabSize
		}
	}
	for round, ids := range [][][]int{c.ids, other} {
		want := step(c.work, ids)
		got := step(kw, ids)
		if math.Float64bits(got.st.Loss) != math.Float64bits(want.st.Loss) {
			t.Errorf("round %d: loss kept %.17g, recomputed %.17g", round, got.st.Loss, want.st.Loss)
		}
		same("kl per token", got.st.KLPerToken, want.st.KLPerToken)
		same("embeds", got.emb, want.emb)
		blrGrads := 0
		for name, g := range want.grads {
			same(name, got.grads[name], g)
			if strings.HasSuffix(name, ".l") {
				blrGrads++
			}
		}
		if len(got.grads) != len(want.grads) || blrGrads == 0 {
			t.Errorf("round %d: %d gradients kept, %d recomputed (%d BLR ℓ)", round, len(got.grads), len(want.grads), blrGrads)
		}
		t.Logf("round %d: loss %.6f, %d gradients bit-identical", round, got.st.Loss, len(want.grads))
	}
	// After the steps, so both works hold their top-k buffers.
	if got := kw.Bytes() - c.work.Bytes(); got != extra || extra == 0 {
		t.Errorf("kept work holds %d bytes more than the recomputing one, want %d", got, extra)
	}
}
