package nvgkit_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// blrHidden runs TeacherTopKHidden on the BLR case's uncompressed teacher over its windows,
// capturing both layers' outputs.
func blrHidden(t *testing.T, d *gpu.Device, c *blrCase) (*nvgkit.TopK, *nvgkit.HiddenStates, *nvgkit.Trace) {
	t.Helper()
	tn, err := nvgkit.LoadNet(d, c.teacher, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	tw := newWork(t, d, tn, blrNB, blrT)
	defer tw.Release()
	top, hs, err := nvgkit.TeacherTopKHidden(tn, tw, c.ids, blrK, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := nvgkit.Forward(tn, tw, c.ids, nvgkit.ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return top, hs, tr
}

// f16Values decodes binary16 bits.
func f16Values(p []uint16) []float64 {
	out := make([]float64, len(p))
	for i, b := range p {
		out[i] = float64(float16.Frombits(b).Float32())
	}
	return out
}

// TestTeacherTopKHidden: the top-k of TeacherTopKHidden is TeacherTopK's bit for bit; its
// layer-0 plane is Forward's hidden state after layer 0 rounded to binary16, bit for bit;
// every plane is within 2e-3 relative L2 of the float64 host teacher's layer output (f16 weights
// and f32 arithmetic, then binary16 rounding, against float64); HiddenStateBytes is the bytes
// held; bad layers are refused.
func TestTeacherTopKHidden(t *testing.T) {
	d, c := blrStudent(t)
	top, hs, tr := blrHidden(t, d, c)
	if !slices.Equal(top.IDs, c.top.IDs) || !slices.Equal(top.Probs, c.top.Probs) || !slices.Equal(top.LSE, c.top.LSE) {
		t.Error("TeacherTopKHidden's top-k differs from TeacherTopK's")
	}
	H := c.teacher.Config.HiddenSize
	if hs.NB != blrNB || hs.T != blrT || hs.H != H || !slices.Equal(hs.Layers, []int{0, 1}) || len(hs.F16) != 2 {
		t.Fatalf("hidden states %d×%d×%d of layers %v (%d planes)", hs.NB, hs.T, hs.H, hs.Layers, len(hs.F16))
	}
	held := int64(2 * len(hs.F16[0]) * len(hs.F16))
	if got := nvgkit.HiddenStateBytes(H, blrT, 2) * blrNB; got != held {
		t.Errorf("HiddenStateBytes·windows = %d, the states hold %d bytes", got, held)
	}
	for i, v := range tr.Hidden[1] {
		if b := float16.Fromfloat32(v).Bits(); b != hs.F16[0][i] {
			t.Fatalf("layer 0 element %d: %#04x, want f16(%g) = %#04x", i, hs.F16[0][i], v, b)
		}
	}
	hn, err := host.Load(c.teacher)
	if err != nil {
		t.Fatal(err)
	}
	for b := range blrNB {
		x, err := host.Embedding(hn.Embed, hn.Config.VocabSize, H, c.ids[b])
		if err != nil {
			t.Fatal(err)
		}
		for l := range 2 {
			if x, err = hn.Layer(l, x, 1, blrT); err != nil {
				t.Fatal(err)
			}
			got := f16Values(hs.F16[l][b*blrT*H : (b+1)*blrT*H])
			var d2, n2 float64
			for i := range x {
				d2 += (got[i] - x[i]) * (got[i] - x[i])
				n2 += x[i] * x[i]
			}
			if e := math.Sqrt(d2 / n2); !(e <= 2e-3) {
				t.Errorf("window %d layer %d: relative L2 error %.3g against the host teacher", b, l, e)
			}
		}
	}
	tn, err := nvgkit.LoadNet(d, c.teacher, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	tw := newWork(t, d, tn, blrNB, blrT)
	defer tw.Release()
	for _, layers := range [][]int{nil, {1, 0}, {2}} {
		if _, _, err := nvgkit.TeacherTopKHidden(tn, tw, c.ids, blrK, layers); err == nil || !strings.Contains(err.Error(), "HiddenLoss.Layers") {
			t.Errorf("layers %v: error %v, want one naming HiddenLoss.Layers", layers, err)
		}
	}
}

// TestStepHiddenGradients checks StepHidden on the BLR student with both layers' outputs
// matched to the teacher's (TeacherTopKHidden), for the normalised MSE and the cosine,
// against the float64 host oracle (host.Net.StudentLossGradHidden with the same binary16
// targets): the loss and its parts, the per-token KL, d loss/d embeddings and every trainable
// within 2e-3 relative L2 (as TestStudentBLRGradients); the term must move the gradients by
// more than 1 % (on the cooperative-matrix path, with tensor cores on, the tolerance grows by
// the f16 rounding of the forward's and backward's GEMMs: kittest.Path.Tol). Then, on the f32
// path, central differences of LossOnlyHidden's loss at the largest-gradient
// coordinate of a set of vectors (TestStudentBLRGradients' steps and tolerance). With λ = 0
// the gradients are Step's bit for bit (the term adds 0·∂e to the residual gradient).
func TestStepHiddenGradients(t *testing.T) {
	d, c := blrStudent(t)
	_, hs, _ := blrHidden(t, d, c)
	work := newWork(t, d, c.net, blrNB, blrT) // its own: the term's buffers stay out of the shared work
	defer work.Release()
	hn, err := host.Load(c.student)
	if err != nil {
		t.Fatal(err)
	}
	tid, prob := c.hostTopK()
	targets := [][]float64{f16Values(hs.F16[0]), f16Values(hs.F16[1])}
	path := kittest.DevicePath(d) // tolerances follow the GEMM path that runs
	step := func(h nvgkit.HiddenLoss) (nvgkit.StepStats, map[string][]float32) {
		t.Helper()
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		st, err := nvgkit.StepHidden(c.net, work, c.ids, c.top, h, hs)
		if err != nil {
			t.Fatal(err)
		}
		g, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		return st, g
	}
	klSt, klGrads := step(nvgkit.HiddenLoss{})
	if klSt.Loss != klSt.KL || klSt.Hidden != 0 || klSt.HiddenPerLayer != nil {
		t.Errorf("without the term: Loss %g, KL %g, Hidden %g, per layer %v", klSt.Loss, klSt.KL, klSt.Hidden, klSt.HiddenPerLayer)
	}
	zeroSt, zeroGrads := step(nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: 0, Layers: []int{0, 1}})
	if zeroSt.Loss != klSt.Loss || !(zeroSt.Hidden > 0) {
		t.Errorf("λ = 0: Loss %.17g (KL alone %.17g), Hidden %g", zeroSt.Loss, klSt.Loss, zeroSt.Hidden)
	}
	for name, g := range klGrads {
		for i := range g {
			if math.Float32bits(g[i]) != math.Float32bits(zeroGrads[name][i]) {
				t.Fatalf("λ = 0: %s[%d] = %g, Step's %g", name, i, zeroGrads[name][i], g[i])
			}
		}
	}
	for _, h := range []nvgkit.HiddenLoss{
		{Kind: nvgkit.HiddenMSE, Weight: 2, Layers: []int{0, 1}},
		{Kind: nvgkit.HiddenCosine, Weight: 3, Layers: []int{0, 1}},
		{Kind: nvgkit.HiddenMSE, Weight: 2, Layers: []int{1}},
	} {
		t.Run(fmt.Sprintf("%s layers=%v", h.Kind, h.Layers), func(t *testing.T) {
			sub := &nvgkit.HiddenStates{NB: hs.NB, T: hs.T, H: hs.H}
			var tg [][]float64
			for _, l := range h.Layers {
				sub.Layers = append(sub.Layers, l)
				sub.F16 = append(sub.F16, hs.F16[l])
				tg = append(tg, targets[l])
			}
			if err := nvgkit.ZeroGrads(c.net); err != nil {
				t.Fatal(err)
			}
			st, err := nvgkit.StepHidden(c.net, work, c.ids, c.top, h, sub)
			if err != nil {
				t.Fatal(err)
			}
			grads, err := nvgkit.Grads(c.net)
			if err != nil {
				t.Fatal(err)
			}
			sg, err := hn.StudentLossGradHidden(c.ids, tid, prob, blrK, host.HiddenTerm{Cosine: h.Kind == nvgkit.HiddenCosine, Weight: h.Weight, Layers: h.Layers, Targets: tg})
			if err != nil {
				t.Fatal(err)
			}
			tol := path.Tol(2e-3, 2*kittest.ForwardStages(2, true), 1)
			for _, p := range []struct {
				name      string
				gpu, host float64
			}{{"loss", st.Loss, sg.Loss}, {"KL", st.KL, sg.KL}, {"hidden", st.Hidden, sg.Hidden}} {
				rel := math.Abs(p.gpu-p.host) / math.Abs(p.host)
				t.Logf("%-8s GPU %.8g host %.8g rel err %.3g", p.name, p.gpu, p.host, rel)
				if !(rel <= tol) {
					t.Errorf("%s: GPU %.8g, host %.8g: relative error %.3g > %g", p.name, p.gpu, p.host, rel, tol)
				}
			}
			var mean float64
			for _, v := range st.HiddenPerLayer {
				mean += v / float64(len(st.HiddenPerLayer))
			}
			if len(st.HiddenPerLayer) != len(h.Layers) || math.Abs(mean-st.Hidden) > 1e-12*st.Hidden || st.Loss != st.KL+h.Weight*st.Hidden {
				t.Errorf("parts: per layer %v (mean %.17g), Hidden %.17g, Loss %.17g, KL %.17g", st.HiddenPerLayer, mean, st.Hidden, st.Loss, st.KL)
			}
			check := func(name string, got []float32, want []float64) float64 {
				t.Helper()
				return tinytest.CheckRelL2(t, name, got, want, tol)
			}
			check("kl per token", st.KLPerToken, sg.KLPerToken)
			emb, err := nvgkit.EmbedGrads(work)
			if err != nil {
				t.Fatal(err)
			}
			check("embeds", emb, sg.Embeds)
			worst, where := 0.0, ""
			var d2, n2 float64
			for _, name := range sg.Names() {
				if e := check(name, grads[name], sg.Grads[name]); e > worst {
					worst, where = e, name
				}
				for i, v := range klGrads[name] {
					d2 += float64(grads[name][i]-v) * float64(grads[name][i]-v)
					n2 += float64(v) * float64(v)
				}
			}
			t.Logf("%d gradients, worst rel L2 %.3g at %s; the term moves them by %.3g", len(sg.Grads), worst, where, math.Sqrt(d2/n2))
			if !(math.Sqrt(d2/n2) > 1e-2) {
				t.Errorf("the term moves the gradients by only %.3g relative L2", math.Sqrt(d2/n2))
			}
			// Finite differences on the f32 path only (as TestStudentBLRGradients: f16-rounded
			// activations move the loss in steps comparable to the difference).
			if path.Coopmat {
				t.Log("finite differences: on the f32 path only")
				return
			}
			fdCheck(t, c, grads, func() float64 {
				st, err := nvgkit.LossOnlyHidden(c.net, work, c.ids, c.top, h, sub)
				if err != nil {
					t.Fatal(err)
				}
				return st.Loss
			}, []string{
				"model.layers.0.linear_attn.in_proj_qkv.weight.p0.l",
				"model.layers.0.mlp.down_proj.weight.p0.h",
				"model.layers.1.self_attn.o_proj.weight.p0.g",
				"model.layers.1.mlp.up_proj.weight.p0.g",
				"model.layers.0.input_layernorm.weight",
				"model.layers.1.post_attention_layernorm.weight",
			})
		})
	}
}

// TestStepHiddenErrors: a bad hidden-state term or teacher states are refused before
// anything is submitted (the gradients stay as they were), each error naming what is wrong.
func TestStepHiddenErrors(t *testing.T) {
	d, c := blrStudent(t)
	_, hs, _ := blrHidden(t, d, c)
	work := newWork(t, d, c.net, blrNB, blrT)
	defer work.Release()
	ok := nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: 1, Layers: []int{0, 1}}
	short := *hs
	short.F16 = [][]uint16{hs.F16[0], hs.F16[1][:10]}
	for _, tc := range []struct {
		name string
		h    nvgkit.HiddenLoss
		hs   *nvgkit.HiddenStates
		want string
	}{
		{"kind", nvgkit.HiddenLoss{Kind: "l1", Weight: 1, Layers: []int{0}}, hs, `HiddenLoss.Kind = "l1"`},
		{"weight", nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: -1, Layers: []int{0, 1}}, hs, "HiddenLoss.Weight = -1"},
		{"no layers", nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: 1}, hs, "HiddenLoss.Layers is empty"},
		{"layer range", nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: 1, Layers: []int{0, 2}}, hs, "in [0, 2)"},
		{"no states", ok, nil, "no teacher hidden states"},
		{"other layers", nvgkit.HiddenLoss{Kind: nvgkit.HiddenMSE, Weight: 1, Layers: []int{1}}, hs, "of layers [0 1], the loss matches layers [1]"},
		{"short plane", ok, &short, "layer 1 has 10 values"},
		{"other windows", ok, &nvgkit.HiddenStates{NB: 1, T: blrT, H: hs.H, Layers: hs.Layers, F16: hs.F16}, "1 windows × 16 tokens"},
	} {
		before, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		_, err = nvgkit.StepHidden(c.net, work, c.ids, c.top, tc.h, tc.hs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: StepHidden error %v, want one containing %q", tc.name, err, tc.want)
		}
		if _, err := nvgkit.LossOnlyHidden(c.net, work, c.ids, c.top, tc.h, tc.hs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LossOnlyHidden error %v, want one containing %q", tc.name, err, tc.want)
		}
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
}

// TestParseHiddenLayers reads the layer selections of --hidden-layers.
func TestParseHiddenLayers(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []int
		err  string
	}{
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7}, ""},
		{"every:4", []int{3, 7}, ""},
		{"every:3", []int{2, 5}, ""},
		{"every:1", []int{0, 1, 2, 3, 4, 5, 6, 7}, ""},
		{" 7, 2 ,5", []int{2, 5, 7}, ""},
		{"every:9", []int{7}, ""}, // fewer layers than K: the last
		{"every:0", nil, "K must be an integer ≥ 1"},
		{"3,3", nil, "layer 3 is named twice"},
		{"8", nil, "layer 8 is outside [0, 8)"},
		{"", nil, `"" is not a layer index`},
		{"last", nil, `"last" is not a layer index`},
	} {
		got, err := nvgkit.ParseHiddenLayers(c.spec, 8)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one containing %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
}
