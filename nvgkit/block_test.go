package nvgkit_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// TestBlockStepGradients checks BlockStep on the BLR student ([GatedDeltaNet, attention]) for
// each layer l against the teacher's binary16 layer-l output (TeacherTopKHidden), on both
// GEMM paths: the loss and the gradient of every trainable of layer l against the float64
// host oracle (host.Net.BlockLossGrad with the same targets, layer l fed by the student's own
// layer 0 for l = 1) within 2e-3 relative L2 (kittest.Path.Tol on the cooperative-matrix
// path); every other trainable's gradient exactly 0. On the f32 path: central differences of
// BlockLoss at the largest-gradient coordinate of a set of layer l's vectors (fdCheck's steps
// and tolerance), and a work that keeps its activations gives the same gradients bit for bit.
func TestBlockStepGradients(t *testing.T) {
	d, c := blrStudent(t)
	_, hs, _ := blrHidden(t, d, c)
	work := newWork(t, d, c.net, blrNB, blrT) // its own: the term's buffers stay out of the shared work
	defer work.Release()
	hn, err := host.Load(c.student)
	if err != nil {
		t.Fatal(err)
	}
	fd := map[int][]string{
		0: {"model.layers.0.linear_attn.in_proj_qkv.weight.p0.l", "model.layers.0.linear_attn.out_proj.weight.p0.g",
			"model.layers.0.mlp.down_proj.weight.p0.h", "model.layers.0.input_layernorm.weight", "model.layers.0.linear_attn.norm.weight"},
		1: {"model.layers.1.self_attn.q_proj.weight.p0.l", "model.layers.1.self_attn.o_proj.weight.p0.h",
			"model.layers.1.mlp.up_proj.weight.p0.g", "model.layers.1.post_attention_layernorm.weight", "model.layers.1.self_attn.k_norm.weight"},
	}
	kittest.Paths(t, d, func(t *testing.T, path kittest.Path) {
		for l := range 2 {
			t.Run(fmt.Sprintf("layer=%d", l), func(t *testing.T) {
				grads := blockGrads(t, c, work, l, hs)
				st, err := nvgkit.BlockLoss(c.net, work, c.ids, l, hs)
				if err != nil {
					t.Fatal(err)
				}
				bg, err := hn.BlockLossGrad(c.ids, l, f16Values(hs.F16[l]))
				if err != nil {
					t.Fatal(err)
				}
				tol := path.Tol(2e-3, 2*kittest.ForwardStages(l+1, true), 1)
				rel := math.Abs(st.Loss-bg.Loss) / bg.Loss
				t.Logf("loss GPU %.8g host %.8g rel err %.3g", st.Loss, bg.Loss, rel)
				if !(rel <= tol) || st.Hidden != st.Loss || st.KL != 0 || len(st.HiddenPerLayer) != 1 || st.Tokens != blrNB*blrT || !st.Finite {
					t.Errorf("BlockLoss %+v: relative error %.3g (> %g?) or parts not the block's", st, rel, tol)
				}
				prefix := fmt.Sprintf("model.layers.%d.", l)
				worst, where := 0.0, ""
				for name, g := range grads {
					want, ok := bg.Grads[name]
					if !ok {
						if !strings.HasPrefix(name, prefix) && slices.ContainsFunc(g, func(v float32) bool { return v != 0 }) {
							t.Errorf("%s: a gradient outside layer %d", name, l)
						}
						continue
					}
					if e := tinytest.CheckRelL2(t, name, g, want, tol); e > worst {
						worst, where = e, name
					}
				}
				t.Logf("%d gradients of layer %d, worst rel L2 %.3g at %s", len(bg.Grads), l, worst, where)
				for _, name := range bg.Names() {
					if _, ok := grads[name]; !ok {
						t.Errorf("no GPU gradient %s", name)
					}
				}
				if path.Coopmat {
					return
				}
				fdCheck(t, c, grads, func() float64 {
					st, err := nvgkit.BlockLoss(c.net, work, c.ids, l, hs)
					if err != nil {
						t.Fatal(err)
					}
					return st.Loss
				}, fd[l])
				kept, err := nvgkit.NewWork(d, c.net, blrNB, blrT, nvgkit.KeepActivations(), nvgkit.KeepBLROutputs())
				if err != nil {
					t.Fatal(err)
				}
				defer kept.Release()
				for name, g := range blockGrads(t, c, kept, l, hs) {
					if !slices.Equal(g, grads[name]) {
						t.Fatalf("kept activations: the gradient of %s differs from the recomputing step's", name)
					}
				}
			})
		}
	})
}

// blockGrads runs BlockStep of layer l from cleared gradients and returns them.
func blockGrads(t *testing.T, c *blrCase, work *nvgkit.Work, l int, hs *nvgkit.HiddenStates) map[string][]float32 {
	t.Helper()
	if err := nvgkit.ZeroGrads(c.net); err != nil {
		t.Fatal(err)
	}
	if _, err := nvgkit.BlockStep(c.net, work, c.ids, l, hs); err != nil {
		t.Fatal(err)
	}
	g, err := nvgkit.Grads(c.net)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestBlockStepMovesOneLayer: after full steps that leave non-zero Adam moments everywhere,
// ResetOptimizer then BlockStep of layer 1 and Adam move layer 1's values and nothing else
// (every other value bit for bit as before), and a second ResetOptimizer leaves the moments
// zero.
func TestBlockStepMovesOneLayer(t *testing.T) {
	d, c := blrStudent(t)
	_, hs, _ := blrHidden(t, d, c)
	work := newWork(t, d, c.net, blrNB, blrT)
	defer work.Release()
	o := optim.Default()
	for s := 1; s <= 2; s++ {
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		if _, err := nvgkit.Step(c.net, work, c.ids, c.top); err != nil {
			t.Fatal(err)
		}
		if err := nvgkit.Adam(c.net, o, 0.01, s); err != nil {
			t.Fatal(err)
		}
	}
	before, err := nvgkit.Params(c.net)
	if err != nil {
		t.Fatal(err)
	}
	if err := nvgkit.ResetOptimizer(c.net); err != nil {
		t.Fatal(err)
	}
	blockGrads(t, c, work, 1, hs)
	if err := nvgkit.Adam(c.net, o, 0.01, 1); err != nil {
		t.Fatal(err)
	}
	after, err := nvgkit.Params(c.net)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for name, v := range before {
		same := slices.Equal(v, after[name])
		switch {
		case strings.HasPrefix(name, "model.layers.1.") && !same:
			moved++
		case !strings.HasPrefix(name, "model.layers.1.") && !same:
			t.Errorf("%s moved in a block step of layer 1", name)
		}
	}
	if moved == 0 {
		t.Error("no value of layer 1 moved")
	}
	if err := nvgkit.ResetOptimizer(c.net); err != nil {
		t.Fatal(err)
	}
	snap, err := nvgkit.Snapshot(c.net)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range snap.Names() {
		if slices.ContainsFunc(append(snap.M(name), snap.V(name)...), func(v float32) bool { return v != 0 }) {
			t.Fatalf("%s: Adam moments not zero after ResetOptimizer", name)
		}
	}
}

// TestBlockStepErrors: a bad layer, bad teacher states or a wrong number of windows are
// refused before anything is submitted (the gradients stay as they were), each error naming
// what is wrong.
func TestBlockStepErrors(t *testing.T) {
	d, c := blrStudent(t)
	_, hs, _ := blrHidden(t, d, c)
	work := newWork(t, d, c.net, blrNB, blrT)
	defer work.Release()
	only0, err := hs.Select([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ids   [][]int
		layer int
		hs    *nvgkit.HiddenStates
		want  string
	}{
		{"layer 2", c.ids, 2, hs, "layer 2 is outside the student's decoder layers [0, 2)"},
		{"layer -1", c.ids, -1, hs, "layer -1 is outside"},
		{"no states", c.ids, 0, nil, "no teacher hidden states"},
		{"other layer", c.ids, 1, only0, "of layers [0], not of layer 1"},
		{"other windows", c.ids, 0, &nvgkit.HiddenStates{NB: 1, T: blrT, H: hs.H, Layers: hs.Layers, F16: hs.F16}, "1 windows × 16 tokens"},
		{"one window", c.ids[:1], 0, hs, "a step takes exactly the work's nb = 2 windows"},
	} {
		before, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		_, err = nvgkit.BlockStep(c.net, work, tc.ids, tc.layer, tc.hs)
		refused(t, tc.name, tc.want, err)
		after, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		for name, g := range before {
			if !slices.Equal(g, after[name]) {
				t.Fatalf("%s: the refused step changed %s", tc.name, name)
			}
		}
	}
	if _, err := nvgkit.BlockLoss(c.net, work, c.ids, 0, only0); err != nil {
		t.Errorf("BlockLoss with the layer's states alone: %v", err)
	}
}
