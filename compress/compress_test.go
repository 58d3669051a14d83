package compress

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"gonum.org/v1/gonum/floats"
)

func TestBLRRankByHand(t *testing.T) {
	for _, c := range []struct {
		bpw         float64
		paths, m, n int
		want        int
		ok          bool
	}{
		// 256×256 at 1 bit: budget 8192 bytes; one path 16 + 1024 + 66r ≤ 8192 → r ≤ 108.4.
		{1, 1, 256, 256, 104, true},
		// two paths: 16 + 2048 + 132r ≤ 8192 → r ≤ 46.4.
		{1, 2, 256, 256, 40, true},
		// 1024×3584: 16 + 9216 + 578r ≤ 458752 → r ≤ 777.7.
		{1, 1, 1024, 3584, 776, true},
		// 16×16 at 32 bits: the budget allows more than min(m, n): capped at 16.
		{32, 1, 16, 16, 16, true},
		// 8×8 at 0.1 bit: nothing fits; the minimum rank 8 comes back with ok = false.
		{0.1, 1, 8, 8, 8, false},
		// outside the domain
		{math.NaN(), 1, 256, 256, 0, false},
		{1, 3, 256, 256, 0, false},
		{1, 1, 256, 12, 0, false},
		{1, 1, 4, 256, 0, false},
	} {
		r, ok := BLRRank(c.bpw, c.paths, c.m, c.n)
		if r != c.want || ok != c.ok {
			t.Errorf("BLRRank(%g, %d, %d, %d) = %d, %v; want %d, %v", c.bpw, c.paths, c.m, c.n, r, ok, c.want, c.ok)
		}
	}
}

func TestAllocateRanksByHand(t *testing.T) {
	// Two 256×256 tensors at 1 bit, one path: 2·8192 = 16384 bytes of budget; rank 104 each
	// uses 2·7904 = 15808; one step of 8 adds 528 → 16336 fits, a second would not.
	r, ok := allocateRanks([][2]int{{256, 256}, {256, 256}}, 1, 1)
	if r[0] != 112 || r[1] != 104 || !ok[0] || !ok[1] {
		t.Fatalf("ranks %v ok %v, want [112 104]", r, ok)
	}
	// A single tensor gets no step: 7904 + 528 > 8192.
	if r, _ := allocateRanks([][2]int{{256, 256}}, 1, 1); r[0] != 104 {
		t.Fatalf("single tensor rank %d, want 104", r[0])
	}
}

// tinyConfig is the embedded tiny teacher's config: layers 0–2 and 4–6 GatedDeltaNet, 3 and
// 7 full attention.
func tinyConfig(t testing.TB) arch.Config {
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	return m.Config
}

// smallConfig is tinyConfig with hidden size h, intermediate size i and head_dim 8 (so a
// full-attention k_proj is 16×h), for small hand-made models.
func smallConfig(t testing.TB, h, i int) arch.Config {
	c := tinyConfig(t)
	c.HiddenSize, c.IntermediateSize, c.HeadDim = h, i, 8
	return c
}

func TestKind(t *testing.T) {
	for name, want := range map[string]string{
		"model.layers.0.self_attn.q_proj.weight":        "q_proj",
		"model.layers.12.self_attn.o_proj.weight":       "o_proj",
		"model.layers.3.linear_attn.in_proj_qkv.weight": "in_proj_qkv",
		"model.layers.7.mlp.down_proj.weight":           "down_proj",
		"model.layers.3.linear_attn.A_log":              "",
		"model.layers.1.mlp.up_proj.weight.extra":       "",
		"weight": "",
	} {
		if got := Kind(name); got != want {
			t.Errorf("Kind(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestBLRTensors checks which of the tiny teacher's tensors the compressor turns into BLR:
// per GatedDeltaNet layer in_proj_qkv, in_proj_z, out_proj, per attention layer q, k, v and
// o_proj, and every MLP projection: 6·3 + 2·4 + 8·3 = 50 tensors; in_proj_a/b, conv1d, the
// decay parameters, norms and the embedding stay full precision.
func TestBLRTensors(t *testing.T) {
	blr := blrTensors(tinyConfig(t))
	if len(blr) != 50 {
		t.Errorf("%d BLR tensors, want 50", len(blr))
	}
	for name, want := range map[string]string{
		"model.layers.3.self_attn.q_proj.weight":        "q_proj",
		"model.layers.7.self_attn.o_proj.weight":        "o_proj",
		"model.layers.0.linear_attn.in_proj_qkv.weight": "in_proj_qkv",
		"model.layers.6.linear_attn.in_proj_z.weight":   "in_proj_z",
		"model.layers.4.linear_attn.out_proj.weight":    "out_proj",
		"model.layers.7.mlp.down_proj.weight":           "down_proj",
		"model.layers.0.mlp.gate_proj.weight":           "gate_proj",
		"model.layers.0.linear_attn.in_proj_a.weight":   "",
		"model.layers.0.linear_attn.in_proj_b.weight":   "",
		"model.layers.0.linear_attn.conv1d.weight":      "",
		"model.layers.0.linear_attn.A_log":              "",
		"model.layers.3.self_attn.q_norm.weight":        "",
		"model.layers.0.self_attn.q_proj.weight":        "", // layer 0 is GatedDeltaNet
		"model.layers.8.mlp.up_proj.weight":             "", // beyond the 8 layers
		"model.embed_tokens.weight":                     "",
	} {
		if got := blr[name]; got != want {
			t.Errorf("blrTensors[%q] = %q, want %q", name, got, want)
		}
	}
}

// TestDualSVIDExactRank1 builds W = diag(h)·u·ℓ·vᵀ·diag(g), an exact rank-1 BLR product with
// sign vectors u, v and positive scales, and checks that Dual-SVID at rank 8 gives it back:
// to ~1e-12 before rounding (the SVD's first component is W, the others are round-off) and to
// the float16 rounding of the scales (3 roundings of relative 2⁻¹²) once stored.
func TestDualSVIDExactRank1(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	m, n := 40, 32
	w := make([]float64, m*n)
	h, g := make([]float64, m), make([]float64, n)
	u, v := make([]float64, m), make([]float64, n)
	for i := range h {
		h[i], u[i] = 0.5+rng.Float64(), signPM(rng.NormFloat64())
	}
	for j := range g {
		g[j], v[j] = 0.5+rng.Float64(), signPM(rng.NormFloat64())
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			w[i*n+j] = h[i] * u[i] * 0.03 * v[j] * g[j]
		}
	}
	svd, err := RandomizedSVD(w, m, n, 8, SVDOptions{}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	p := dualSVID(svd, 8)
	d := p.dense()
	floats.Sub(d, w)
	if e := floats.Norm(d, 2) / floats.Norm(w, 2); e > 1e-6 {
		t.Fatalf("f64 Dual-SVID relative error %g, want ≤ 1e-6", e)
	}
	opt, _ := Options{Paths: Paths1}.normalized()
	bw, errs, err := compressMatrixRanks("rank1", w, m, n, 8, 8, true, opt)
	relErr := errs.rel
	if err != nil {
		t.Fatal(err)
	}
	dense := bw.Dense()
	floats.Sub(dense, w)
	e := floats.Norm(dense, 2) / floats.Norm(w, 2)
	if e > 1e-3 || math.Abs(e-relErr) > 1e-12 {
		t.Fatalf("stored relative error %g (reported %g), want ≤ 1e-3 and equal", e, relErr)
	}
}

// TestCompressMatrixTwoPathsHelp: on a Gaussian matrix two paths at the same rank must beat
// one (the residual path can only reduce ‖W−Ŵ‖, up to float16 rounding), and the reported
// error must be the decoded payload's.
func TestCompressMatrixTwoPathsHelp(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	m, n := 96, 64
	w := make([]float64, m*n)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	opt1, _ := Options{Paths: Paths1}.normalized()
	opt2, _ := Options{Paths: Paths2}.normalized()
	one, errs1, err := compressMatrixRanks("g", w, m, n, 32, 32, true, opt1)
	if err != nil {
		t.Fatal(err)
	}
	two, errs2, err := compressMatrixRanks("g", w, m, n, 32, 32, true, opt2)
	if err != nil {
		t.Fatal(err)
	}
	e1, e2 := errs1.rel, errs2.rel
	if len(one.Paths) != 1 || len(two.Paths) != 2 || !(e2 < e1) || !(e1 < 1) {
		t.Fatalf("paths %d/%d, errors %g (1 path) vs %g (2 paths)", len(one.Paths), len(two.Paths), e1, e2)
	}
	for _, c := range []struct {
		bw *cmf.BLRWeight
		e  float64
	}{{one, e1}, {two, e2}} {
		b, err := cmf.EncodeBLR(c.bw)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := cmf.DecodeBLR(b)
		if err != nil {
			t.Fatal(err)
		}
		d := dec.Dense()
		floats.Sub(d, w)
		if got := floats.Norm(d, 2) / floats.Norm(w, 2); math.Abs(got-c.e) > 1e-12 {
			t.Fatalf("decoded error %g, reported %g", got, c.e)
		}
	}
}

func TestCompressMatrixErrors(t *testing.T) {
	w := make([]float64, 16*12)
	for _, c := range []struct {
		w    []float64
		m, n int
		opt  Options
		want string
	}{
		{w, 16, 12, Options{}, "n = 12 input features is not a multiple of 8"},
		{w[:4*8], 4, 8, Options{}, "4×8 is too small"},
		{w, 16, 16, Options{}, "192 values for a 16×16 matrix"},
		{w[:128], 16, 8, Options{BitsPerWeight: -1}, "bits per weight -1"},
		{w[:128], 16, 8, Options{BitsPerWeight: math.NaN()}, "bits per weight NaN"},
		{w[:128], 16, 8, Options{Paths: 3}, "paths 3"},
		{append(make([]float64, 127), math.NaN()), 16, 8, Options{}, "not finite"},
	} {
		if _, _, err := Matrix("x.weight", c.w, c.m, c.n, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d×%d %+v: %v, want %q", c.m, c.n, c.opt, err, c.want)
		}
	}
	if _, err := ParsePathMode("3"); err == nil || !strings.Contains(err.Error(), `paths "3"`) {
		t.Errorf("ParsePathMode(3): %v", err)
	}
}

// smallCompressModel is an in-memory model of a small config (smallConfig(32, 48)) holding random
// weights for a few tensors (not a complete model: Compress does not need one).
func smallCompressModel(t *testing.T, rng *rand.Rand) *cmf.Model {
	m := cmf.NewModel(smallConfig(t, 32, 48))
	for _, s := range []struct {
		name string
		m, n int
	}{
		{"model.layers.0.mlp.up_proj.weight", 48, 32},
		{"model.layers.0.mlp.down_proj.weight", 32, 48},
		{"model.layers.3.self_attn.k_proj.weight", 16, 32},
		{"model.layers.1.linear_attn.in_proj_a.weight", 2, 32},
		{"model.norm.weight", 1, 32},
	} {
		v := make([]float64, s.m*s.n)
		for i := range v {
			v[i] = 0.05 * rng.NormFloat64()
		}
		tn, err := cmf.NewFloatTensor(s.name, cmf.BF16, []int{s.m, s.n}, v)
		if err != nil {
			t.Fatal(err)
		}
		m.Tensors[s.name] = tn
	}
	return m
}

func TestCompressDeterministic(t *testing.T) {
	teacher := smallCompressModel(t, rand.New(rand.NewPCG(51, 52)))
	run := func(seed uint64, workers int) (*cmf.Model, []TensorReport) {
		var calls []string
		s, reps, err := Model(teacher, Options{Seed: seed, Workers: workers}, func(done, total int, name string) {
			if total != 3 || done != len(calls)+1 {
				t.Errorf("progress(%d, %d, %s) after %d calls", done, total, name, len(calls))
			}
			calls = append(calls, name)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 3 || len(reps) != 3 {
			t.Fatalf("%d progress calls, %d reports", len(calls), len(reps))
		}
		return s, reps
	}
	a, ra := run(7, 1)
	b, _ := run(7, 2)
	c, _ := run(8, 2)
	var differ bool
	for _, r := range ra {
		pa, _ := a.Tensors[r.Name].Bytes()
		pb, _ := b.Tensors[r.Name].Bytes()
		pc, _ := c.Tensors[r.Name].Bytes()
		if !bytes.Equal(pa, pb) {
			t.Errorf("%s: same seed, different payloads", r.Name)
		}
		differ = differ || !bytes.Equal(pa, pc)
	}
	if !differ {
		t.Error("seeds 7 and 8 gave identical payloads")
	}
	for _, name := range []string{"model.layers.1.linear_attn.in_proj_a.weight", "model.norm.weight"} {
		if a.Tensors[name] != teacher.Tensors[name] {
			t.Errorf("%s is not shared with the teacher", name)
		}
	}
	if ra[0].Name != "model.layers.0.mlp.down_proj.weight" || ra[0].Kind != "down_proj" || a.Tensors[ra[0].Name].DType != cmf.BLR {
		t.Errorf("first report %+v", ra[0])
	}
}

// blrPayload is a valid 1×8 one-path BLR payload of rank 8.
func blrPayload(t *testing.T) []byte {
	one := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	b, err := cmf.EncodeBLR(&cmf.BLRWeight{M: 1, N: 8, Rank: 8, Paths: []cmf.BLRPath{{H: one[:1], G: one, L: one, U: []byte{0xff}, V: make([]byte, 8)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCompressRejects(t *testing.T) {
	m := smallCompressModel(t, rand.New(rand.NewPCG(1, 1)))
	blr, _ := cmf.NewTensor("model.layers.0.mlp.up_proj.weight", cmf.BLR, []int{1, 8}, blrPayload(t))
	m.Tensors[blr.Name] = blr
	if _, _, err := Model(m, Options{}, nil); err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.up_proj.weight is already BLR") {
		t.Errorf("BLR input: %v", err)
	}
	m = smallCompressModel(t, rand.New(rand.NewPCG(1, 1)))
	odd, _ := cmf.NewFloatTensor("model.layers.0.mlp.gate_proj.weight", cmf.F32, []int{16, 12}, make([]float64, 16*12))
	m.Tensors[odd.Name] = odd
	if _, _, err := Model(m, Options{}, nil); err == nil || !strings.Contains(err.Error(), "gate_proj.weight: shape [16 12] cannot be BLR") {
		t.Errorf("n = 12: %v", err)
	}
	if _, _, err := Model(m, Options{Workers: -1}, nil); err == nil || !strings.Contains(err.Error(), "workers -1") {
		t.Errorf("workers: %v", err)
	}
}

// TestCompressTinyTeacherBudget compresses the real tiny teacher at 1 bit per weight (paths
// auto; no power iterations, to keep the test quick on 2 shared cores — ranks and budget do
// not depend on them) and checks: the overall bits per weight within 2 % of the target (and not above
// it), every compressed linear BLR of logical shape [m, n] with a payload of the reported
// rank, paths and bits, its reported relative error equal to the decoded payload's, the
// other tensors shared.
func TestCompressTinyTeacherBudget(t *testing.T) {
	teacher, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer teacher.Close()
	student, reps, err := Model(teacher, Options{BitsPerWeight: 1, SVD: SVDOptions{PowerIters: -1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 8*3+6*3+2*4 {
		t.Fatalf("%d reports, want 50", len(reps))
	}
	var bits, weights float64
	for _, r := range reps {
		st := student.Tensors[r.Name]
		w, err := cmf.BLRFromTensor(st)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := st.Bytes()
		if w.Rank != r.Rank || len(w.Paths) != r.Paths || r.BitsPerWeight != 8*float64(len(b))/float64(w.M*w.N) {
			t.Fatalf("%s: report %+v vs payload rank %d paths %d, %d bytes", r.Name, r, w.Rank, len(w.Paths), len(b))
		}
		bits += 8 * float64(len(b))
		weights += float64(w.M * w.N)
		orig, _ := teacher.Tensors[r.Name].Float64()
		d := w.Dense()
		floats.Sub(d, orig)
		if e := floats.Norm(d, 2) / floats.Norm(orig, 2); math.Abs(e-r.RelErr) > 1e-9 || !(e > 0.3 && e < 0.95) {
			t.Fatalf("%s: decoded relative error %g, reported %g", r.Name, e, r.RelErr)
		}
	}
	overall := bits / weights
	if overall > 1 || overall < 0.98 || math.Abs(overall-OverallBitsPerWeight(reps)) > 1e-12 {
		t.Fatalf("overall %g bits/weight (OverallBitsPerWeight %g), want within 2 %% of 1", overall, OverallBitsPerWeight(reps))
	}
	for _, name := range []string{"model.embed_tokens.weight", "model.layers.0.linear_attn.in_proj_a.weight", "model.layers.0.linear_attn.conv1d.weight", "model.layers.3.self_attn.q_norm.weight", "model.norm.weight"} {
		if student.Tensors[name] != teacher.Tensors[name] {
			t.Errorf("%s not shared", name)
		}
	}
	if len(student.Tensors) != len(teacher.Tensors) {
		t.Errorf("student has %d tensors, teacher %d", len(student.Tensors), len(teacher.Tensors))
	}
}

// benchCompress compresses a random Gaussian m×n matrix (scaled like a trained weight) at
// 1 bit per weight, once per iteration, for each path mode.
func benchCompress(b *testing.B, m, n int) {
	rng := rand.New(rand.NewPCG(61, 62))
	w := make([]float64, m*n)
	for i := range w {
		w[i] = 0.02 * rng.NormFloat64()
	}
	for _, pm := range []PathMode{Paths1, PathsAuto} {
		b.Run("paths="+pm.String(), func(b *testing.B) {
			var relErr float64
			for b.Loop() {
				var err error
				if _, relErr, err = Matrix("bench.weight", w, m, n, Options{BitsPerWeight: 1, Paths: pm}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(relErr, "relerr")
		})
	}
}

// BenchmarkCompress3584x1024 is one MLP gate/up projection of Qwen3.5-0.8B.
func BenchmarkCompress3584x1024(b *testing.B) { benchCompress(b, 3584, 1024) }

// BenchmarkCompress1024x3584 is one MLP down projection of Qwen3.5-0.8B.
func BenchmarkCompress1024x3584(b *testing.B) { benchCompress(b, 1024, 3584) }
