package nvgkit_test

import (
	"math"
	"testing"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// TestForwardLogitsSliced: Forward's full logits (what `nvg trace` writes as logits_row0) with
// a storage-binding limit lowered to 1.5 MiB, below the tiny teacher's 4 MiB f16 head and its
// 2 MiB [64, 8192] logits, as every real Qwen3.5 head is on lavapipe. Before, the call failed
// with "bind it in slices"; now the head is applied in slices of 3072, 3072 and 2048 rows.
// Checked against (1) the float64 product of the run's own final-normed hidden state with the
// f16-rounded head, within the GEMM's bound (kittest.Path.GEMMRel: f32 accumulation,
// (H+1)·2⁻²⁴·Σ|h·w|, and on the cooperative-matrix path the f16 rounding of h) + 1e-6; (2) the
// HF fixture, within TestForwardFixtures' tolerance of the max |logit|; (3) the run at the
// device's own limit (one slice), value for value. On both GEMM paths.
func TestForwardLogitsSliced(t *testing.T) {
	d, m, net := kittest.TinyTeacher(t)
	fx := tinytest.OpenFixtures(t)
	ids := fx.Windows(t)
	c := net.Config
	H, V, T := c.HiddenSize, c.VocabSize, len(ids[0])
	kittest.Paths(t, d, func(t *testing.T, path kittest.Path) {
		w := newWork(t, d, net, len(ids), T)
		defer w.Release()
		whole, err := nvgkit.Forward(net, w, ids, nvgkit.ForwardOptions{Logits0: true})
		if err != nil {
			t.Fatal(err)
		}
		const limit = 3 << 19 // 1.5 MiB
		if err := d.SetMaxStorageBindingSize(limit); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := d.SetMaxStorageBindingSize(0); err != nil {
				t.Error(err)
			}
		}()
		if d.Info().MaxStorageBindingSize != limit {
			t.Fatalf("limit not applied: %d", d.Info().MaxStorageBindingSize)
		}
		if err := d.SetMaxStorageBindingSize(limit + 4); err == nil {
			t.Error("a limit that is not a multiple of the storage alignment was accepted")
		}
		tr, err := nvgkit.Forward(net, w, ids, nvgkit.ForwardOptions{Logits0: true})
		if err != nil {
			t.Fatalf("Forward with a %d-byte binding limit: %v", limit, err)
		}
		if len(tr.Logits0) != T*V {
			t.Fatalf("%d logits, want %d", len(tr.Logits0), T*V)
		}
		emb, err := m.Tensor("model.embed_tokens.weight") // tied head
		if err != nil {
			t.Fatal(err)
		}
		e32, err := emb.Float32()
		if err != nil {
			t.Fatal(err)
		}
		head := make([]float64, len(e32))
		for i, v := range e32 {
			head[i] = float64(float16.Fromfloat32(v).Float32())
		}
		hf := tr.Hidden[len(tr.Hidden)-1][:T*H] // window 0, after the final norm
		worst := 0.0
		for r := range T {
			for v := range V {
				var s, sa float64
				for j := range H {
					p := float64(hf[r*H+j]) * head[v*H+j]
					s, sa = s+p, sa+math.Abs(p)
				}
				e := math.Abs(float64(tr.Logits0[r*V+v]) - s)
				if bound := path.GEMMRel(H)*sa + 1e-6; !(e <= bound) {
					t.Fatalf("logit [%d, %d] = %g, host %g: |err| %.3g > bound %.3g", r, v, tr.Logits0[r*V+v], s, e, bound)
				}
				worst = math.Max(worst, e)
			}
		}
		fe, ref := maxAbsDiff32(tr.Logits0, fx.Get(t, "logits_row0"))
		t.Logf("sliced logits: max abs err %.3g vs the f64 product, %.3g vs the fixture (max |ref| %.3g)", worst, fe, ref)
		if tol := path.Tol(2e-3, kittest.ForwardStages(c.NumHiddenLayers, false), 1); !(fe <= tol*ref) {
			t.Errorf("logits_row0: max abs error %.3g > %.3g · %.3g", fe, tol, ref)
		}
		diff := 0
		for i := range whole.Logits0 {
			if whole.Logits0[i] != tr.Logits0[i] {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%d of %d logits differ between the sliced run and the one-slice run", diff, len(whole.Logits0))
		}
	})
}
