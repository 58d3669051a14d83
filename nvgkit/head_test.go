package nvgkit_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// firstVocab returns m with its vocabulary cut to its first V rows (the embedding's and the
// untied head's).
func firstVocab(t testing.TB, m *cmf.Model, V int) *cmf.Model {
	t.Helper()
	cfg := m.Config
	cfg.VocabSize = V
	l := cfg.Layout()
	out := cmf.NewModel(cfg)
	for name, tn := range m.Tensors {
		if name == l.EmbedTokens.Name || l.LMHead != nil && name == l.LMHead.Name {
			raw, err := tn.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			row := len(raw) / tn.Shape[0]
			if tn, err = cmf.NewTensor(name, tn.DType, []int{V, tn.Shape[1]}, raw[:V*row]); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.Set(tn); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestStreamedHead checks the streamed head (the head uploaded a block of vocabulary rows at
// a time, DESIGN.md §9) against the resident net, in its slices of the same size: TeacherTopK,
// Forward's hidden states and logits of window 0, NLL and TeacherDistribution give the same
// bits. Heads: the tiny teacher's tied one (8192 rows in blocks of 768: ten and a ragged 512)
// and an untied q8 teacher's of 1000 rows, no multiple of 128 (blocks of 384: two and a
// ragged 232, whose last slice has 104 rows), and the automatic sizes (one block: the whole
// head, larger than the layers' staging slots). The streamed top-k is also checked against
// the float64 host model. Each pass uploads every layer and the head once, and the streamed
// peak is the resident one less every layer and the embedding and head, plus the larger of
// the two largest layers and the two largest head blocks.
func TestStreamedHead(t *testing.T) {
	d, m, _ := kittest.TinyTeacher(t)
	d.SetScratchLimit(0) // exact peaks
	defer d.SetScratchLimit(gpu.DefaultScratchLimit)
	two := tinytest.FirstLayers(t, m, 2)
	win := tinytest.OpenFixtures(t).Windows(t) // 2 windows of 64 tokens
	for _, c := range []struct {
		name         string
		m            *cmf.Model
		slice, block int
	}{
		{"tied, blocks of 768", two, 256, 768},
		{"untied q8, vocabulary 1000, blocks of 384", quantized(t, firstVocab(t, untied(t, two), 1000), cmf.QuantQ8), 128, 384},
		{"tied, automatic", two, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer nvgkit.SetHeadBlocks(c.slice, c.block)()
			cfg := c.m.Config
			V, H := cfg.VocabSize, cfg.HiddenSize
			ids := make([][]int, len(win))  // the windows' first 63 tokens (TeacherTopK, Forward)
			next := make([][]int, len(win)) // all 64 (NLL, TeacherDistribution)
			for b, w := range win {
				for _, id := range w {
					next[b] = append(next[b], id%V)
				}
				ids[b] = next[b][:len(w)-1]
			}
			const k = 16
			res := runTeacher(t, d, c.m, ids, k, false, 1)
			str := runTeacher(t, d, c.m, ids, k, true, 2)
			if diff := diffTopK(res.top, str.top); diff != "" {
				t.Errorf("streamed and resident top-k: %s", diff)
			}
			// Bytes: uploads per pass, and the peak.
			head := uint64(2*V*H+3) &^ 3
			// all: the layers' bytes resident; sall, a, b: streamed (q8's scales stay f16
			// there, f32 resident), all of them and the two largest.
			var all, sall, a, b uint64
			for l, x := range str.layerBytes {
				all += res.layerBytes[l]
				sall += x
				if x > a {
					a, b = x, a
				} else if x > b {
					b = x
				}
			}
			if str.uploadedBytes != 2*(sall+head) {
				t.Errorf("streamed net uploaded %d bytes in 2 passes, want 2 × (layers %d + head %d)", str.uploadedBytes, sall, head)
			}
			blk := c.block
			if blk == 0 {
				blk = V // the automatic block of this tiny net: one slice, the whole head
			}
			blocks := uint64(2*min(blk, V)*H) + uint64(2*min(blk, max(V-blk, 0))*H)
			resident := all + head // the embedding, and the head when untied
			if cfg.Layout().LMHead != nil {
				resident += head
			}
			if want := res.peak - resident + max(a+b, blocks); str.peak > want {
				t.Errorf("streamed peak %d B > resident peak %d B − embedding, head and layers %d B + max(two layers %d B, two head blocks %d B) = %d",
					str.peak, res.peak, resident, a+b, blocks, want)
			}
			t.Logf("resident peak %d B, streamed %d B; layers %d B (two largest %d B), head %d B, two blocks %d B", res.peak, str.peak, all, a+b, head, blocks)
			// The host's float64 model of the same weights.
			hn, err := host.Load(c.m)
			if err != nil {
				t.Fatal(err)
			}
			htr, err := hn.Forward(ids, host.ForwardOptions{TopK: k})
			if err != nil {
				t.Fatal(err)
			}
			ref := 0.0
			for _, v := range htr.LogSumExp {
				ref = math.Max(ref, math.Abs(v))
			}
			stages := kittest.ForwardStages(cfg.NumHiddenLayers, false)
			if c.m != two {
				stages = 2*stages - 1 // two roundings per 8-bit projection (TestQuantTeacherMatchesHost)
			}
			checkTopK(t, "streamed", kittest.DevicePath(d), stages, ref, str.top, htr.TopKIDs, htr.TopKLogProbs, htr.LogSumExp)
			// Forward, NLL and TeacherDistribution: the same bits on both nets.
			var outs [2]struct {
				tr   *nvgkit.Trace
				nll  float64
				dist *nvgkit.Distribution
				at   *nvgkit.Distribution // against the resident net's top-k (At)
			}
			for i, streamed := range []bool{false, true} {
				var opts []nvgkit.LoadOption
				if streamed {
					opts = append(opts, nvgkit.StreamLayers())
				}
				net, err := nvgkit.LoadNet(d, c.m, nvgkit.Teacher, opts...)
				if err != nil {
					t.Fatal(err)
				}
				w := newWork(t, d, net, len(ids), len(ids[0]))
				o := &outs[i]
				if o.tr, err = nvgkit.Forward(net, w, ids, nvgkit.ForwardOptions{TopK: k, Logits0: true}); err == nil {
					if o.nll, _, err = nvgkit.NLL(net, w, next, nil); err == nil {
						if o.dist, err = nvgkit.TeacherDistribution(context.Background(), net, w, next, k, nil, nil); err == nil {
							o.at, err = nvgkit.TeacherDistribution(context.Background(), net, w, next, 1, outs[0].dist, nil)
						}
					}
				}
				w.Release()
				net.Release()
				if err != nil {
					t.Fatalf("streamed %v: %v", streamed, err)
				}
			}
			r, s := outs[0], outs[1]
			if diff := diffTopK(r.tr.TopK, s.tr.TopK); diff != "" {
				t.Errorf("Forward's top-k: %s", diff)
			}
			for l := range r.tr.Hidden {
				if i := sameBits(r.tr.Hidden[l], s.tr.Hidden[l]); i >= 0 {
					t.Errorf("Forward's hidden state %d differs at %d", l, i)
				}
			}
			if len(s.tr.Logits0) != len(ids[0])*V {
				t.Errorf("Forward's logits of window 0: %d values, want %d", len(s.tr.Logits0), len(ids[0])*V)
			} else if i := sameBits(r.tr.Logits0, s.tr.Logits0); i >= 0 {
				t.Errorf("Forward's logits of window 0 differ at %d: %g resident, %g streamed", i, r.tr.Logits0[i], s.tr.Logits0[i])
			}
			if math.Float64bits(r.nll) != math.Float64bits(s.nll) {
				t.Errorf("NLL: %v resident, %v streamed", r.nll, s.nll)
			}
			for name, p := range map[string][2][]float32{"target": {r.dist.Target, s.dist.Target}, "log-probs": {r.dist.LogProbs, s.dist.LogProbs},
				"log-probs at the reference's top-k": {r.at.At, s.at.At}} {
				if len(p[0]) != len(p[1]) || sameBits(p[0], p[1]) >= 0 {
					t.Errorf("TeacherDistribution's %s differ", name)
				}
			}
			if fmt.Sprint(r.dist.IDs) != fmt.Sprint(s.dist.IDs) {
				t.Errorf("TeacherDistribution's ids differ")
			}
		})
	}
}
