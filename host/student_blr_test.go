package host

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// subTeacher returns an in-memory copy (F32) of the tiny teacher restricted to the decoder
// layers src, renumbered 0, 1, … in that order, with the embedding and the final norm.
func subTeacher(t *testing.T, src []int) *cmf.Model {
	t.Helper()
	m, err := cmf.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sub := tinytest.SubModel(t, m, src)
	out := cmf.NewModel(sub.Config)
	for _, name := range sub.Names() {
		tn := sub.Tensors[name]
		v, err := tn.Float64()
		if err != nil {
			t.Fatal(err)
		}
		nt, err := cmf.NewFloatTensor(name, cmf.F32, tn.Shape, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Set(nt); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// blrStudent is a BLR student (compress.Model at 1 bit per weight, paths auto) and the top-k
// of its uncompressed teacher on ids.
type blrStudent struct {
	net    *Net
	teach  *Net // the uncompressed teacher
	ids    [][]int
	tid    []int
	prob   []float64
	k      int
	hidden HiddenTerm // the hidden-state term of the loss (none: the KL alone)
}

func newBLRStudent(t *testing.T, teacher *cmf.Model, nb, T, k int) blrStudent {
	t.Helper()
	t0 := time.Now()
	cm, reps, err := compress.Model(teacher, compress.Options{BitsPerWeight: 1, SVD: compress.SVDOptions{PowerIters: -1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compressed %d tensors at %.3g bpw in %v", len(reps), compress.OverallBitsPerWeight(reps), time.Since(t0))
	tn, err := Load(teacher)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := Load(cm)
	if err != nil {
		t.Fatal(err)
	}
	fx := tinytest.OpenFixtures(t)
	flat := fx.IDs(t, "ids", 2, 64)
	ids := make([][]int, nb)
	for b := range ids {
		ids[b] = flat[b*64 : b*64+T]
	}
	tr, err := tn.Forward(ids, ForwardOptions{TopK: k})
	if err != nil {
		t.Fatal(err)
	}
	prob := make([]float64, len(tr.TopKLogProbs))
	for i, lp := range tr.TopKLogProbs {
		prob[i] = math.Exp(lp) // renormalised by the loss
	}
	return blrStudent{net: sn, teach: tn, ids: ids, tid: tr.TopKIDs, prob: prob, k: k}
}

func (s blrStudent) loss(t *testing.T) float64 {
	l, _, _, _, err := s.net.StudentLossHidden(s.ids, s.tid, s.prob, s.k, s.hidden)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sampleCoords returns the index of the largest |g| and n−1 further random indices.
func sampleCoords(rng *rand.Rand, g []float64, n int) []int {
	best := 0
	for i, v := range g {
		if math.Abs(v) > math.Abs(g[best]) {
			best = i
		}
	}
	idx := []int{best}
	for len(idx) < min(n, len(g)) {
		idx = append(idx, rng.IntN(len(g)))
	}
	return idx
}

// fdStats tracks the worst finite-difference error of a group of parameters.
type fdStats struct {
	worst float64
	where string
	count int
}

// check compares the gradient g at the coordinates idx of a parameter, read and written
// through get/set, with central differences of loss. The step is relative to the value
// (rel·|v|, at least abs), and the step actually taken (after set rounds, e.g. to float32)
// is the denominator. The error is |fd − g| / (|fd| + 1e-2·max|g|), relative to the
// coordinate's own size, floored at 1 % of the tensor's largest gradient.
func (st *fdStats) check(t *testing.T, name string, g []float64, idx []int, get func(i int) float64, set func(i int, v float64), rel, abs, tol float64, loss func() float64) {
	t.Helper()
	gmax := 0.0
	for _, v := range g {
		gmax = math.Max(gmax, math.Abs(v))
	}
	for _, i := range idx {
		v0 := get(i)
		h := math.Max(rel*math.Abs(v0), abs)
		set(i, v0+h)
		vp := get(i)
		lp := loss()
		set(i, v0-h)
		vm := get(i)
		lm := loss()
		set(i, v0)
		fd := (lp - lm) / (vp - vm)
		e := math.Abs(fd-g[i]) / (math.Abs(fd) + 1e-2*gmax)
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		st.count++
		if e > st.worst || st.where == "" {
			st.worst, st.where = math.Max(e, st.worst), fmt.Sprintf("%s[%d]", name, i)
		}
		t.Logf("%-52s[%4d] grad %+.6e  fd %+.6e  err %.2g", name, i, g[i], fd, e)
		if !(e <= tol) {
			t.Errorf("%s[%d]: gradient %.8g, central difference %.8g (error %.3g > %.3g)", name, i, g[i], fd, e, tol)
		}
	}
}

// checkBLRStudent compares StudentLossGrad's gradients of sampled metric scales (h, ℓ, g of
// every path of the given linears) and norm gains with central differences of StudentLoss.
func checkBLRStudent(t *testing.T, s blrStudent, linears map[string]Linear, gains map[string][]float64, coords int) {
	t0 := time.Now()
	sg, err := s.net.StudentLossGradHidden(s.ids, s.tid, s.prob, s.k, s.hidden)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %.8g (KL %.8g, hidden %.8g), StudentLossGrad in %v", sg.Loss, sg.KL, sg.Hidden, time.Since(t0))
	if l := s.loss(t); math.Abs(l-sg.Loss) > 1e-12*math.Abs(l) {
		t.Errorf("StudentLoss %.17g differs from StudentLossGrad's %.17g", l, sg.Loss)
	}
	rng := rand.New(rand.NewPCG(42, 7))
	loss := func() float64 { return s.loss(t) }
	// The loss is not linear in a scale once two of them (or a norm downstream) interact, so
	// the step is kept small: 1e-3 relative; float32 rounding of the perturbed scale is
	// exact in the denominator.
	const tol = 1e-4
	var blr, gain fdStats
	names := make([]string, 0, len(linears))
	for name := range linears {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, ok := linears[name].(*BLRLinear)
		if !ok {
			t.Fatalf("%s is a %T, not a BLR linear", name, linears[name])
		}
		for p := range b.W.Paths {
			q := &b.W.Paths[p]
			for _, sc := range []struct {
				key string
				v   []float32
			}{{"h", q.H}, {"l", q.L}, {"g", q.G}} {
				key := arch.MetricName(name, p, sc.key)
				g, ok := sg.Grads[key]
				if !ok || len(g) != len(sc.v) {
					t.Fatalf("gradient %s: missing or %d values, want %d", key, len(g), len(sc.v))
				}
				v := sc.v
				blr.check(t, key, g, sampleCoords(rng, g, coords),
					func(i int) float64 { return float64(v[i]) },
					func(i int, x float64) { v[i] = float32(x) }, 1e-3, 1e-5, tol, loss)
			}
		}
	}
	gnames := make([]string, 0, len(gains))
	for name := range gains {
		gnames = append(gnames, name)
	}
	sort.Strings(gnames)
	for _, name := range gnames {
		w := gains[name]
		g, ok := sg.Grads[name]
		if !ok || len(g) != len(w) {
			t.Fatalf("gradient %s: missing or %d values, want %d", name, len(g), len(w))
		}
		gain.check(t, name, g, sampleCoords(rng, g, coords),
			func(i int) float64 { return w[i] }, func(i int, x float64) { w[i] = x }, 0, 1e-4, tol, loss)
	}
	t.Logf("BLR metric: %d coordinates, worst error %.3g at %s", blr.count, blr.worst, blr.where)
	t.Logf("norm gains: %d coordinates, worst error %.3g at %s", gain.count, gain.worst, gain.where)
	// Every compressed linear and every gain of the net has a gradient.
	want := 1 // final norm
	for _, L := range s.net.Layers {
		want += 2
		if L.Attn != nil {
			want += 2
		} else {
			want++
		}
		for _, l := range layerLinears(L) {
			if b, ok := l.(*BLRLinear); ok {
				want += 3 * len(b.W.Paths)
			}
		}
	}
	if len(sg.Grads) != want {
		t.Errorf("%d gradients, want %d (every gain and every BLR scale vector)", len(sg.Grads), want)
	}
}

func layerLinears(L *DecoderLayer) []Linear {
	ls := []Linear{L.GateProj, L.UpProj, L.DownProj}
	if L.Attn != nil {
		return append(ls, L.Attn.QProj, L.Attn.KProj, L.Attn.VProj, L.Attn.OProj)
	}
	return append(ls, L.Delta.InProjQKV, L.Delta.InProjZ, L.Delta.InProjA, L.Delta.InProjB, L.Delta.OutProj)
}

// TestStudentBLRFiniteDifferences checks the gradients of a BLR student — the tiny teacher's
// layers 2 (GatedDeltaNet) and 3 (full attention), compressed with compress.Model at 1 bit per
// weight — of the metric (h, ℓ, g of every path) of every compressed linear of both layers
// and of every norm gain, at sampled coordinates, against central differences of the host
// loss. NVG_SLOW_TESTS=1 also runs the whole 8-layer tiny teacher compressed (TestStudentBLRWhole).
func TestStudentBLRFiniteDifferences(t *testing.T) {
	s := newBLRStudent(t, subTeacher(t, []int{2, 3}), 1, 10, 8)
	// Blocks of 4 rows (4, 4, 2): the loss and its gradient cross head blocks.
	defer func(b int) { headBlockLogits = b }(headBlockLogits)
	headBlockLogits = 4 * s.net.Config.VocabSize
	linears, gains := subStudentParams(t, s)
	checkBLRStudent(t, s, linears, gains, 2)
}

// subStudentParams returns the compressed linears and the gains of a [GatedDeltaNet,
// attention] student (subTeacher(t, []int{2, 3}) compressed), named as the checkpoint.
func subStudentParams(t *testing.T, s blrStudent) (map[string]Linear, map[string][]float64) {
	d, a := s.net.Layers[0], s.net.Layers[1]
	if d.Delta == nil || a.Attn == nil {
		t.Fatal("sub-model layers are not [GatedDeltaNet, attention]")
	}
	linears := map[string]Linear{
		"model.layers.0.linear_attn.in_proj_qkv.weight": d.Delta.InProjQKV,
		"model.layers.0.linear_attn.in_proj_z.weight":   d.Delta.InProjZ,
		"model.layers.0.linear_attn.out_proj.weight":    d.Delta.OutProj,
		"model.layers.0.mlp.gate_proj.weight":           d.GateProj,
		"model.layers.0.mlp.up_proj.weight":             d.UpProj,
		"model.layers.0.mlp.down_proj.weight":           d.DownProj,
		"model.layers.1.self_attn.q_proj.weight":        a.Attn.QProj,
		"model.layers.1.self_attn.k_proj.weight":        a.Attn.KProj,
		"model.layers.1.self_attn.v_proj.weight":        a.Attn.VProj,
		"model.layers.1.self_attn.o_proj.weight":        a.Attn.OProj,
		"model.layers.1.mlp.gate_proj.weight":           a.GateProj,
		"model.layers.1.mlp.up_proj.weight":             a.UpProj,
		"model.layers.1.mlp.down_proj.weight":           a.DownProj,
	}
	gains := map[string][]float64{
		"model.layers.0.input_layernorm.weight":          d.InputNorm,
		"model.layers.0.post_attention_layernorm.weight": d.PostNorm,
		"model.layers.0.linear_attn.norm.weight":         d.Delta.Norm,
		"model.layers.1.input_layernorm.weight":          a.InputNorm,
		"model.layers.1.post_attention_layernorm.weight": a.PostNorm,
		"model.layers.1.self_attn.q_norm.weight":         a.Attn.QNorm,
		"model.layers.1.self_attn.k_norm.weight":         a.Attn.KNorm,
		"model.norm.weight":                              s.net.FinalNorm,
	}
	return linears, gains
}

// TestStudentHiddenFiniteDifferences checks the student step with the hidden-state term
// (StudentLossGradHidden) on the BLR student of TestStudentBLRFiniteDifferences, matching
// both layers' outputs to the uncompressed teacher's: the parts (Loss = KL + λ·Hidden, Hidden
// the mean of HiddenLoss over the layers and tokens), then every metric scale and gain at
// sampled coordinates against central differences of StudentLossHidden, for the normalised
// MSE and the cosine. The term must move the gradients (by more than 1 % of the KL's alone
// in relative L2), so that a dropped term cannot pass.
func TestStudentHiddenFiniteDifferences(t *testing.T) {
	s := newBLRStudent(t, subTeacher(t, []int{2, 3}), 1, 10, 8)
	c := s.teach.Config
	rows, H := len(s.ids)*len(s.ids[0]), c.HiddenSize
	x, err := Embedding(s.teach.Embed, c.VocabSize, H, s.ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var targets [][]float64
	for l := range s.teach.Layers {
		if x, err = s.teach.Layer(l, x, 1, rows); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, x)
	}
	kl, err := s.net.StudentLossGrad(s.ids, s.tid, s.prob, s.k)
	if err != nil {
		t.Fatal(err)
	}
	linears, gains := subStudentParams(t, s)
	for _, tc := range []struct {
		cosine bool
		weight float64
	}{{false, 0.7}, {true, 3}} {
		t.Run(fmt.Sprintf("cosine=%v", tc.cosine), func(t *testing.T) {
			s.hidden = HiddenTerm{Cosine: tc.cosine, Weight: tc.weight, Layers: []int{0, 1}, Targets: targets}
			sg, err := s.net.StudentLossGradHidden(s.ids, s.tid, s.prob, s.k, s.hidden)
			if err != nil {
				t.Fatal(err)
			}
			// Hidden is the mean over both layers and all tokens of HiddenLoss on the
			// student's own layer outputs.
			xs, err := Embedding(s.net.Embed, c.VocabSize, H, s.ids[0])
			if err != nil {
				t.Fatal(err)
			}
			var want float64
			for l := range s.net.Layers {
				if xs, err = s.net.Layer(l, xs, 1, rows); err != nil {
					t.Fatal(err)
				}
				e, _, err := HiddenLoss(xs, targets[l], rows, H, s.hidden.Cosine)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range e {
					want += v / float64(2*rows)
				}
			}
			if math.Abs(sg.Hidden-want) > 1e-12*want {
				t.Errorf("Hidden %.17g, want the mean of HiddenLoss %.17g", sg.Hidden, want)
			}
			if sg.KL != kl.Loss || sg.Loss != sg.KL+tc.weight*sg.Hidden || !(sg.Hidden > 0) {
				t.Errorf("parts: Loss %.17g, KL %.17g (without the term %.17g), Hidden %.17g, λ %g", sg.Loss, sg.KL, kl.Loss, sg.Hidden, tc.weight)
			}
			var d2, n2 float64
			for name, g := range kl.Grads {
				for i, v := range g {
					d2 += (sg.Grads[name][i] - v) * (sg.Grads[name][i] - v)
					n2 += v * v
				}
			}
			t.Logf("the term moves the gradients by %.3g relative L2", math.Sqrt(d2/n2))
			if !(math.Sqrt(d2/n2) > 1e-2) {
				t.Errorf("the term moves the gradients by only %.3g relative L2", math.Sqrt(d2/n2))
			}
			checkBLRStudent(t, s, linears, gains, 1)
		})
	}
}

// TestStudentBLRWhole is the same check on the whole tiny teacher compressed at 1 bit per
// weight (about half a minute to compress on 2 cores), for layers 0 (GatedDeltaNet) and 3
// (attention). It runs only with NVG_SLOW_TESTS=1.
func TestStudentBLRWhole(t *testing.T) {
	if os.Getenv("NVG_SLOW_TESTS") != "1" {
		t.Skip("set NVG_SLOW_TESTS=1 to compress and check the whole tiny teacher")
	}
	s := newBLRStudent(t, subTeacher(t, []int{0, 1, 2, 3, 4, 5, 6, 7}), 1, 24, 16)
	linears, gains := map[string]Linear{}, map[string][]float64{"model.norm.weight": s.net.FinalNorm}
	for _, l := range []int{0, 3} {
		L := s.net.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		linears[p+"mlp.down_proj.weight"] = L.DownProj
		gains[p+"input_layernorm.weight"] = L.InputNorm
		gains[p+"post_attention_layernorm.weight"] = L.PostNorm
		if L.Attn != nil {
			linears[p+"self_attn.q_proj.weight"] = L.Attn.QProj
			linears[p+"self_attn.k_proj.weight"] = L.Attn.KProj
			gains[p+"self_attn.q_norm.weight"] = L.Attn.QNorm
			gains[p+"self_attn.k_norm.weight"] = L.Attn.KNorm
		} else {
			linears[p+"linear_attn.in_proj_qkv.weight"] = L.Delta.InProjQKV
			linears[p+"linear_attn.out_proj.weight"] = L.Delta.OutProj
			gains[p+"linear_attn.norm.weight"] = L.Delta.Norm
		}
	}
	checkBLRStudent(t, s, linears, gains, 2)
}
