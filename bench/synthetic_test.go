package bench_test

import (
	"math"
	"testing"

	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
)

// TestSyntheticTiny builds the tiny geometry as a resident and a streamed Teacher and as a
// Student, runs a teacher pass and one Step + ClipGrads + Adam: finite top-k and loss, the
// expected layer residency, and the Student's trainables in place.
func TestSyntheticTiny(t *testing.T) {
	d := gputest.Open(t)
	cfg, err := bench.Config("tiny")
	if err != nil {
		t.Fatal(err)
	}
	const nb, T, k = 2, 16, 8
	ids := make([][]int, nb)
	for i := range ids {
		for j := 0; j < T; j++ {
			ids[i] = append(ids[i], (i*7919+j*104729)%cfg.VocabSize)
		}
	}
	var top *nvgkit.TopK
	for _, streamed := range []bool{false, true} {
		var opts []nvgkit.LoadOption
		if streamed {
			opts = append(opts, nvgkit.StreamLayers())
		}
		done := 0
		opts = append(opts, nvgkit.LoadProgress(func(i, n int) { done = i }))
		tn, err := bench.NewNet(d, cfg, nvgkit.Teacher, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if done != cfg.NumHiddenLayers {
			t.Errorf("progress reached %d of %d layers", done, cfg.NumHiddenLayers)
		}
		w, err := nvgkit.NewWork(d, tn, nb, T)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := nvgkit.TeacherTopK(tn, w, ids, k)
		if err != nil {
			t.Fatal(err)
		}
		for i, lse := range tp.LSE {
			if math.IsNaN(float64(lse)) || math.IsInf(float64(lse), 0) {
				t.Fatalf("streamed=%v: lse[%d] = %g", streamed, i, lse)
			}
		}
		// Random logits of σ ≈ 2 over 8192 tokens: the top-8 mass is far from 1 and from 0.
		var mass float64
		for _, lp := range tp.LogProbs[:k] {
			mass += math.Exp(float64(lp))
		}
		if !(mass > 1e-4 && mass < 0.9) {
			t.Errorf("streamed=%v: top-%d mass of token 0 = %g", streamed, k, mass)
		}
		wantOn := cfg.NumHiddenLayers
		if streamed {
			wantOn = 2
		}
		if got := tn.MaxLayersOnGPU(); got != wantOn {
			t.Errorf("streamed=%v: MaxLayersOnGPU = %d, want %d", streamed, got, wantOn)
		}
		w.Release()
		tn.Release()
		top = tp
	}
	sn, err := bench.NewNet(d, cfg, nvgkit.Student, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	// tiny: per layer gate/up/down, 6 delta layers × (qkv, z, out) + 2 attention × (q, k, v, o),
	// 2 paths × (h, ℓ, g); gains: 2 per layer + 1 gated norm per delta layer + 2 per attention + final.
	if got, want := len(sn.Trainables()), 8*3*6+6*3*6+2*4*6+8*2+6+2*2+1; got != want {
		t.Errorf("%d trainables, want %d", got, want)
	}
	sw, err := nvgkit.NewWork(d, sn, nb, T)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Release()
	st, err := nvgkit.Step(sn, sw, ids, top)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Finite || !(st.Loss > 0) {
		t.Fatalf("step: loss %g finite %v", st.Loss, st.Finite)
	}
	if _, err := nvgkit.ClipGrads(sn, 1); err != nil {
		t.Fatal(err)
	}
	if err := nvgkit.Adam(sn, optim.Default(), optim.Default().LR, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := bench.NewNet(d, cfg, nvgkit.Student, 1, nvgkit.StreamLayers()); err == nil {
		t.Error("streamed Student: no error")
	}
}
