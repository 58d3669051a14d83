package nvgkit_test

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// blrCase is a BLR student — the tiny teacher's layers 0 (GatedDeltaNet) and 3 (attention),
// compressed at 1 bit per weight (paths auto, seed 1) — with its teacher's top-16 on 2
// windows × 16 tokens of the fixtures' ids.
type blrCase struct {
	teacher, student *cmf.Model
	net              *nvgkit.Net
	work             *nvgkit.Work
	ids              [][]int
	top              *nvgkit.TopK
	init             *nvgkit.TrainableSnapshot
	err              error
}

var blr struct {
	once sync.Once
	c    blrCase
}

const blrNB, blrT, blrK = 2, 16, 16

func blrStudent(t *testing.T) (*gpu.Device, *blrCase) {
	d, m, _ := kittest.TinyTeacher(t)
	blr.once.Do(func() {
		c := &blr.c
		fail := func(err error) { c.err = err }
		c.teacher = tinytest.SubModel(t, m, []int{0, 3})
		t0 := time.Now()
		var reps []compress.TensorReport
		var err error
		c.student, reps, err = compress.Model(c.teacher, compress.Options{BitsPerWeight: 1, Seed: 1, SVD: compress.SVDOptions{PowerIters: -1}}, nil)
		if err != nil {
			fail(err)
			return
		}
		two := 0
		for _, r := range reps {
			if r.Paths == 2 {
				two++
			}
		}
		t.Logf("compressed %d tensors (%d with 2 paths) at %.3f bpw in %v", len(reps), two, compress.OverallBitsPerWeight(reps), time.Since(t0))
		tn, err := nvgkit.LoadNet(d, c.teacher, nvgkit.Teacher)
		if err != nil {
			fail(err)
			return
		}
		defer tn.Release()
		tw, err := nvgkit.NewWork(d, tn, blrNB, blrT)
		if err != nil {
			fail(err)
			return
		}
		defer tw.Release()
		fx := tinytest.OpenFixtures(t)
		for _, w := range fx.Windows(t)[:blrNB] {
			c.ids = append(c.ids, w[:blrT])
		}
		if c.top, err = nvgkit.TeacherTopK(tn, tw, c.ids, blrK); err != nil {
			fail(err)
			return
		}
		if c.net, err = nvgkit.LoadNet(d, c.student, nvgkit.Student); err != nil {
			fail(err)
			return
		}
		if c.work, err = nvgkit.NewWork(d, c.net, blrNB, blrT); err != nil {
			fail(err)
			return
		}
		c.init, c.err = nvgkit.Snapshot(c.net)
	})
	if blr.c.err != nil {
		t.Fatal(blr.c.err)
	}
	// Every test starts from the compressed values with zero Adam state and gradients.
	if err := nvgkit.Restore(blr.c.net, blr.c.init); err != nil {
		t.Fatal(err)
	}
	if err := nvgkit.ZeroGrads(blr.c.net); err != nil {
		t.Fatal(err)
	}
	return d, &blr.c
}

func (c *blrCase) hostTopK() ([]int, []float64) {
	tid := make([]int, len(c.top.IDs))
	prob := make([]float64, len(c.top.Probs))
	for i := range tid {
		tid[i], prob[i] = int(c.top.IDs[i]), float64(c.top.Probs[i])
	}
	return tid, prob
}

// TestStudentBLRGradients checks Step's gradients on the BLR student against the float64
// host oracle (host.Net.StudentLossGrad on the same compressed model and top-k): the loss,
// the per-token KL, d loss/d embeddings and every trainable — h, ℓ, g of every path of every
// BLR projection of both layers (GatedDeltaNet and attention) and every gain — within 2e-3
// relative L2 (f16 embedding and in_proj_a/b on the GPU, bf16-exact in the oracle; f32
// arithmetic), on both GEMM paths (on the cooperative-matrix one with the f16 rounding of the
// activations added, kittest.Path.Tol). Then, on the f32 path, central finite differences of
// the GPU loss (LossOnly) at the largest-gradient coordinate of a set of vectors from both
// layers: the step is 3 % of the value for metric scales and 0.03 absolute for gains, large
// enough that the f32 loss's rounding (~1e-7 relative) stays ~1e-3 of the difference;
// central differences cancel the curvature's first term. The denominator is the step
// actually taken after f32 rounding.
func TestStudentBLRGradients(t *testing.T) {
	d, c := blrStudent(t)
	kittest.Paths(t, d, func(t *testing.T, path kittest.Path) {
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		st, err := nvgkit.Step(c.net, c.work, c.ids, c.top)
		if err != nil {
			t.Fatal(err)
		}
		grads, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		hn, err := host.Load(c.student)
		if err != nil {
			t.Fatal(err)
		}
		tid, prob := c.hostTopK()
		t0 := time.Now()
		sg, err := hn.StudentLossGrad(c.ids, tid, prob, blrK)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("host StudentLossGrad in %v", time.Since(t0))
		// Both passes through both layers, each BLR projection two GEMMs (kittest.Path.Tol).
		tol := path.Tol(2e-3, 2*kittest.ForwardStages(2, true), 1)
		rel := math.Abs(st.Loss-sg.Loss) / sg.Loss
		t.Logf("%-56s GPU %.8g host %.8g rel err %.3g", "loss", st.Loss, sg.Loss, rel)
		if !(rel <= tol) {
			t.Errorf("loss: relative error %.3g > %g", rel, tol)
		}
		check := func(name string, got []float32, want []float64) float64 {
			t.Helper()
			return tinytest.CheckRelL2(t, name, got, want, tol)
		}
		check("kl per token", st.KLPerToken, sg.KLPerToken)
		emb, err := nvgkit.EmbedGrads(c.work)
		if err != nil {
			t.Fatal(err)
		}
		check("embeds", emb, sg.Embeds)
		names := sg.Names()
		worst, where := 0.0, ""
		blrCount := 0
		for _, name := range names {
			g, ok := grads[name]
			if !ok {
				t.Errorf("no GPU gradient %s", name)
				continue
			}
			if strings.HasSuffix(name, ".h") || strings.HasSuffix(name, ".l") || strings.HasSuffix(name, ".g") {
				blrCount++
			}
			if e := check(name, g, sg.Grads[name]); e > worst {
				worst, where = e, name
			}
		}
		t.Logf("%d gradients (%d BLR scale vectors); worst rel L2 %.3g at %s", len(names), blrCount, worst, where)
		if len(grads) != len(names) || blrCount == 0 {
			t.Errorf("GPU has %d gradients, host %d (%d BLR)", len(grads), len(names), blrCount)
		}

		// Finite differences of the GPU loss, on the f32 path only: on the cooperative-matrix
		// path the f16-rounded activations move the loss in steps comparable to the
		// difference a 3 % step makes (DESIGN.md §7).
		if path.Coopmat {
			t.Log("finite differences: on the f32 line only")
			return
		}
		fdCheck(t, c, grads, func() float64 {
			l, _, err := nvgkit.LossOnly(c.net, c.work, c.ids, c.top)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, []string{
			"model.layers.0.linear_attn.in_proj_qkv.weight.p0.l",
			"model.layers.0.linear_attn.in_proj_z.weight.p0.h",
			"model.layers.0.linear_attn.out_proj.weight.p0.g",
			"model.layers.0.mlp.down_proj.weight.p0.h",
			"model.layers.1.self_attn.q_proj.weight.p0.l",
			"model.layers.1.self_attn.k_proj.weight.p0.g",
			"model.layers.1.self_attn.o_proj.weight.p0.h",
			"model.layers.1.mlp.up_proj.weight.p0.g",
			"model.layers.0.input_layernorm.weight",
			"model.layers.0.linear_attn.norm.weight",
			"model.layers.1.self_attn.q_norm.weight",
			"model.norm.weight",
		})
	})
}

// fdCheck compares the gradients grads of the BLR student with central differences of the
// GPU loss (loss, on the net's current values) at the largest-gradient coordinate of each
// of vectors: the step is 3 % of the value for metric scales and 0.03 absolute for gains,
// large enough that the f32 loss's rounding (~1e-7 relative) stays ~1e-3 of the difference;
// central differences cancel the curvature's first term. The denominator is the step
// actually taken after f32 rounding. The net's values are restored at the end.
func fdCheck(t *testing.T, c *blrCase, grads map[string][]float32, loss func() float64, vectors []string) {
	t.Helper()
	snap, err := nvgkit.Snapshot(c.net)
	if err != nil {
		t.Fatal(err)
	}
	at := func() float64 {
		if err := nvgkit.Restore(c.net, snap); err != nil {
			t.Fatal(err)
		}
		return loss()
	}
	const fdTol = 2e-2
	fdWorst := 0.0
	for _, name := range vectors {
		g, p := grads[name], snap.Param(name)
		if g == nil || p == nil {
			t.Errorf("no trainable %s", name)
			continue
		}
		i := 0
		for j := range g {
			if math.Abs(float64(g[j])) > math.Abs(float64(g[i])) {
				i = j
			}
		}
		v0 := p[i]
		step := 0.03 * math.Abs(float64(v0))
		if !strings.HasSuffix(name, ".h") && !strings.HasSuffix(name, ".l") && !strings.HasSuffix(name, ".g") {
			step = 0.03
		}
		p[i] = float32(float64(v0) + step)
		vp := p[i]
		lp := at()
		p[i] = float32(float64(v0) - step)
		vm := p[i]
		lm := at()
		p[i] = v0
		fd := (lp - lm) / float64(vp-vm)
		e := math.Abs(fd-float64(g[i])) / math.Abs(fd)
		fdWorst = math.Max(fdWorst, e)
		t.Logf("FD %-52s[%4d] grad %+.6e fd %+.6e rel err %.2g", name, i, g[i], fd, e)
		if !(e <= fdTol) {
			t.Errorf("%s[%d]: gradient %.6g, central difference %.6g (rel err %.3g > %g)", name, i, g[i], fd, e, fdTol)
		}
	}
	t.Logf("finite differences: %d coordinates, worst rel err %.3g", len(vectors), fdWorst)
	at() // restore the unperturbed values
}

// TestStudentAdamSteps runs 50 steps (ZeroGrads, Step, ClipGrads 1.0, Adam at lr 2e-3)
// on one batch of the BLR student: the loss must fall below 0.7× its initial value and no
// step may raise it by more than 5 %. Masked or not, every metric value stays finite.
func TestStudentAdamSteps(t *testing.T) {
	_, c := blrStudent(t)
	cfg := optim.Default()
	var losses []float64
	for s := 1; s <= 50; s++ {
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		st, err := nvgkit.Step(c.net, c.work, c.ids, c.top)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Finite {
			t.Fatalf("step %d: not finite (loss %g)", s, st.Loss)
		}
		if _, err := nvgkit.ClipGrads(c.net, 1); err != nil {
			t.Fatal(err)
		}
		if err := nvgkit.Adam(c.net, cfg, 2e-3, s); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, st.Loss)
	}
	final, _, err := nvgkit.LossOnly(c.net, c.work, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	losses = append(losses, final)
	minL := losses[0]
	for i, l := range losses {
		minL = math.Min(minL, l)
		if i > 0 && l > 1.05*losses[i-1] {
			t.Errorf("step %d raised the loss %.6g → %.6g (> 5 %%)", i, losses[i-1], l)
		}
	}
	var b strings.Builder
	for i, l := range losses {
		if i%5 == 0 || i == len(losses)-1 {
			fmt.Fprintf(&b, " %d:%.4f", i, l)
		}
	}
	t.Logf("loss curve:%s", b.String())
	t.Logf("first %.6g last %.6g min %.6g (last/first %.3f)", losses[0], final, minL, final/losses[0])
	if !(final < 0.7*losses[0]) {
		t.Errorf("after 50 steps the loss is %.6g, not below 0.7 × %.6g", final, losses[0])
	}
}

// TestStudentExportRoundTrip trains the BLR student a few steps, rounds its metric to f16
// (RoundMetricF16, what Export writes), then Export → cmf.WriteCMF → cmf.Open → LoadNet →
// LossOnly must equal LossOnly of the trained net to 1e-6 relative (the same f32 values on
// the GPU: the metric f16-exact, the gains exported as f32). The exported payloads keep the
// sign bits, rank and paths, and the host oracle gives the GPU's loss on the export too.
func TestStudentExportRoundTrip(t *testing.T) {
	d, c := blrStudent(t)
	cfg := optim.Default()
	for s := 1; s <= 5; s++ {
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		if _, err := nvgkit.Step(c.net, c.work, c.ids, c.top); err != nil {
			t.Fatal(err)
		}
		if err := nvgkit.Adam(c.net, cfg, 2e-3, s); err != nil {
			t.Fatal(err)
		}
	}
	raw, _, err := nvgkit.LossOnly(c.net, c.work, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	if err := nvgkit.RoundMetricF16(c.net); err != nil {
		t.Fatal(err)
	}
	before, _, err := nvgkit.LossOnly(c.net, c.work, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := nvgkit.Export(c.net, c.student)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "student.cmf")
	if err := cmf.WriteCMF(path, ex); err != nil {
		t.Fatal(err)
	}
	m2, err := cmf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	n2, err := nvgkit.LoadNet(d, m2, nvgkit.Student)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Release()
	w2 := newWork(t, d, n2, blrNB, blrT)
	defer w2.Release()
	after, _, err := nvgkit.LossOnly(n2, w2, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	rel := math.Abs(after-before) / before
	t.Logf("loss before export %.10g (f32 metric %.10g, f16 rounding moved it %.2g rel), re-loaded %.10g: rel err %.3g",
		before, raw, math.Abs(raw-before)/raw, after, rel)
	if !(rel <= 1e-6) {
		t.Errorf("round trip: loss %.10g vs %.10g (rel err %.3g > 1e-6)", after, before, rel)
	}
	// Same layout: every BLR tensor keeps its shape, rank, paths and sign bits.
	p1, err := nvgkit.Params(c.net)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := nvgkit.Params(n2)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(p1))
	for k := range p1 {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for i := range p1[k] {
			if p1[k][i] != p2[k][i] {
				t.Fatalf("%s[%d]: exported %g, trained %g", k, i, p2[k][i], p1[k][i])
			}
		}
	}
	for _, name := range c.student.Names() {
		a := c.student.Tensors[name]
		if a.DType != cmf.BLR {
			continue
		}
		w1, err := cmf.BLRFromTensor(a)
		if err != nil {
			t.Fatal(err)
		}
		w2, err := cmf.BLRFromTensor(m2.Tensors[name])
		if err != nil {
			t.Fatal(err)
		}
		if w1.Rank != w2.Rank || len(w1.Paths) != len(w2.Paths) || string(w1.Paths[0].U) != string(w2.Paths[0].U) || string(w1.Paths[len(w1.Paths)-1].V) != string(w2.Paths[len(w2.Paths)-1].V) {
			t.Errorf("%s: layout or sign bits changed by the export", name)
		}
	}
	hn, err := host.Load(m2)
	if err != nil {
		t.Fatal(err)
	}
	tid, prob := c.hostTopK()
	hl, _, err := hn.StudentLoss(c.ids, tid, prob, blrK)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host oracle on the export: %.10g (GPU rel diff %.3g)", hl, math.Abs(hl-after)/hl)
	if math.Abs(hl-after) > 2e-3*hl {
		t.Errorf("host loss of the export %.8g vs GPU %.8g", hl, after)
	}
}

// TestStudentRankPadding pads one BLR projection of the BLR student with 8 extra ranks (ℓ = 0,
// random sign bits: the weight is unchanged) and checks the rank-padding mask: the loss equals
// the unpadded student's, the padded ℓ get exactly zero gradient, and after 3 Adam steps they
// (and only they) are still exactly zero; Export keeps the padded rank.
func TestStudentRankPadding(t *testing.T) {
	d, c := blrStudent(t)
	const name = "model.layers.0.mlp.up_proj.weight"
	w, err := cmf.BLRFromTensor(c.student.Tensors[name]) // the unpadded weight
	if err != nil {
		t.Fatal(err)
	}
	r := w.Rank
	pm, err := kittest.PadRank(c.student, name, 8)
	if err != nil {
		t.Fatal(err)
	}
	net, err := nvgkit.LoadNet(d, pm, nvgkit.Student)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Release()
	work := newWork(t, d, net, blrNB, blrT)
	defer work.Release()
	want, _, err := nvgkit.LossOnly(c.net, c.work, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := nvgkit.LossOnly(net, work, c.ids, c.top)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss unpadded %.10g, padded %.10g", want, got)
	if math.Abs(got-want) > 1e-6*want {
		t.Errorf("padded loss %.10g differs from the unpadded %.10g", got, want)
	}
	cfg := optim.Default()
	for s := 1; s <= 3; s++ {
		if err := nvgkit.ZeroGrads(net); err != nil {
			t.Fatal(err)
		}
		if _, err := nvgkit.Step(net, work, c.ids, c.top); err != nil {
			t.Fatal(err)
		}
		g, err := nvgkit.Grads(net)
		if err != nil {
			t.Fatal(err)
		}
		for p := range w.Paths {
			gl := g[arch.MetricName(name, p, arch.ScaleL)]
			for i := r; i < r+8; i++ {
				if gl[i] != 0 {
					t.Fatalf("step %d: padded dℓ[%d] of path %d = %g, want exactly 0", s, i, p, gl[i])
				}
			}
			if gl[0] == 0 {
				t.Errorf("step %d: live dℓ[0] of path %d is 0", s, p)
			}
		}
		if err := nvgkit.Adam(net, cfg, 2e-3, s); err != nil {
			t.Fatal(err)
		}
	}
	params, err := nvgkit.Params(net)
	if err != nil {
		t.Fatal(err)
	}
	for p := range w.Paths {
		l := params[arch.MetricName(name, p, arch.ScaleL)]
		for i := r; i < r+8; i++ {
			if l[i] != 0 {
				t.Errorf("padded ℓ[%d] of path %d = %g after Adam, want exactly 0", i, p, l[i])
			}
		}
		if l[0] == w.Paths[p].L[0] {
			t.Errorf("live ℓ[0] of path %d did not move", p)
		}
	}
	ex, err := nvgkit.Export(net, pm)
	if err != nil {
		t.Fatal(err)
	}
	we, err := cmf.BLRFromTensor(ex.Tensors[name])
	if err != nil {
		t.Fatal(err)
	}
	if we.Rank != r+8 || we.Paths[0].L[r] != 0 {
		t.Errorf("export: rank %d (want %d), padded ℓ %g", we.Rank, r+8, we.Paths[0].L[r])
	}
}

// TestStudentAdamMatchesHost checks nvgkit.Adam's choice of update per trainable against the
// float64 host.Adam: after one Step, two Adam steps (the second with a second Step's
// gradients) on the BLR student must equal host.Adam applied to the same values and
// gradients — relative steps at lr with cfg.MetricFloor for every h, ℓ, g, plain Adam at lr
// for every gain — within f32 rounding (|Δ| ≤ 1e-6·max(|θ|, RMS) + 1e-5·step).
func TestStudentAdamMatchesHost(t *testing.T) {
	_, c := blrStudent(t)
	cfg, lr := optim.Default(), 0.01
	type state struct{ p, m, v []float64 }
	hs := map[string]*state{}
	f64 := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	p0, err := nvgkit.Params(c.net)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range p0 {
		hs[name] = &state{f64(v), make([]float64, len(v)), make([]float64, len(v))}
	}
	for s := 1; s <= 2; s++ {
		if err := nvgkit.ZeroGrads(c.net); err != nil {
			t.Fatal(err)
		}
		if _, err := nvgkit.Step(c.net, c.work, c.ids, c.top); err != nil {
			t.Fatal(err)
		}
		g, err := nvgkit.Grads(c.net)
		if err != nil {
			t.Fatal(err)
		}
		// The host steps from the GPU's current values (f32), so only this step's arithmetic
		// is compared.
		cur, err := nvgkit.Params(c.net)
		if err != nil {
			t.Fatal(err)
		}
		if err := nvgkit.Adam(c.net, cfg, lr, s); err != nil {
			t.Fatal(err)
		}
		got, err := nvgkit.Params(c.net)
		if err != nil {
			t.Fatal(err)
		}
		worst, where := 0.0, ""
		for name, st := range hs {
			metric := strings.HasSuffix(name, ".h") || strings.HasSuffix(name, ".l") || strings.HasSuffix(name, ".g")
			hc := host.AdamConfig{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps}
			if metric {
				hc = host.AdamConfig{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, Relative: true, Floor: cfg.MetricFloor}
			}
			st.p = f64(cur[name])
			if err := host.Adam(st.p, f64(g[name]), st.m, st.v, nil, s, hc); err != nil {
				t.Fatal(err)
			}
			var rms float64
			for _, x := range st.p {
				rms += x * x
			}
			rms = math.Sqrt(rms / float64(len(st.p)))
			for i, want := range st.p {
				e := math.Abs(float64(got[name][i])-want) / math.Max(math.Abs(want), rms)
				if e > worst {
					worst, where = e, fmt.Sprintf("%s[%d]", name, i)
				}
				// f32 rounding of θ (≤ 1e-6 relative) and of the step's own arithmetic (≤ 1e-5
				// of the step, whose size is at most lr·max(|θ|, rms) or lr).
				stepSize := lr
				if metric {
					stepSize = lr * math.Max(math.Abs(want), rms)
				}
				if !(math.Abs(float64(got[name][i])-want) <= 1e-6*math.Max(math.Abs(want), rms)+1e-5*stepSize) {
					t.Fatalf("step %d: %s[%d] = %.9g after Adam, host %.9g", s, name, i, got[name][i], want)
				}
			}
			if moved := got[name][0] != cur[name][0]; !moved && g[name][0] != 0 {
				t.Errorf("step %d: %s[0] did not move", s, name)
			}
		}
		t.Logf("step %d: %d trainables, worst relative difference from host.Adam %.3g at %s", s, len(hs), worst, where)
	}
}
