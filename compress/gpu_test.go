package compress

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGPUProductsMatchHost checks MulW and MulWT against float64 host products on an
// awkward 37×24 matrix with l = 5, as one block and split into 10-row blocks (4 blocks,
// the last of 7 rows). f32 inputs and accumulation over K ≤ 37 terms: each entry is within
// ~K·2⁻²⁴·Σ|w||x| of the exact one; the test allows 1e-5·Σ|w||x|.
func TestGPUProductsMatchHost(t *testing.T) {
	d := gputest.Open(t)
	const m, n, l = 37, 24, 5
	rng := rand.New(rand.NewPCG(5, 6))
	w := make([]float64, m*n)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	xw, xt := make([]float64, n*l), make([]float64, m*l)
	for i := range xw {
		xw[i] = rng.NormFloat64()
	}
	for i := range xt {
		xt[i] = rng.NormFloat64()
	}
	for _, blockRows := range []int{0, 10} {
		p, err := NewGPUProducts(d)
		if err != nil {
			t.Fatal(err)
		}
		p.maxBlockRows = blockRows
		bp, err := p.Bind(w, m, n)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(bp.(*gpuBound).blocks), map[int]int{0: 1, 10: 4}[blockRows]; got != want {
			t.Fatalf("block rows %d: %d blocks, want %d", blockRows, got, want)
		}
		y, z := make([]float64, m*l), make([]float64, n*l)
		checkBoundAgainstHost(t, fmt.Sprintf("gpu, block rows %d", blockRows), bp, w, xw, xt, y, z, m, n, l)
		checkMulAgainstHost(t, fmt.Sprintf("gpu, block rows %d", blockRows), p, w, xw, m, n, l)
		// Bad lengths and use after Close are errors.
		if err := bp.MulW(y[:1], xw, l); err == nil || !strings.Contains(err.Error(), "dst 1") {
			t.Errorf("short dst: %v", err)
		}
		if err := bp.MulWT(z, xt, 0); err == nil || !strings.Contains(err.Error(), "0 columns") {
			t.Errorf("l = 0: %v", err)
		}
		if err := bp.Close(); err != nil {
			t.Fatal(err)
		}
		if err := bp.MulW(y, xw, l); err == nil || !strings.Contains(err.Error(), "after Close") {
			t.Errorf("after Close: %v", err)
		}
	}
	// The float32 CPU products (CPUProducts{Float32: true}) satisfy the same bound.
	p0, _ := NewGPUProducts(d)
	bp, err := CPUProducts{Float32: true}.Bind(w, m, n)
	if err != nil {
		t.Fatal(err)
	}
	checkBoundAgainstHost(t, "cpu f32", bp, w, xw, xt, make([]float64, m*l), make([]float64, n*l), m, n, l)
	checkMulAgainstHost(t, "cpu f32", CPUProducts{Float32: true}, w, xw, m, n, l)
	if err := p0.Mul(make([]float64, 3), w, xw, m, n, l); err == nil || !strings.Contains(err.Error(), "dst 3") {
		t.Errorf("Mul, short dst: %v", err)
	}
	if _, err := (CPUProducts{Float32: true}).Bind([]float64{1e39}, 1, 1); err == nil || !strings.Contains(err.Error(), "beyond the float32 range") {
		t.Errorf("cpu f32, 1e39: %v", err)
	}
	p, _ := NewGPUProducts(d)
	if _, err := p.Bind(w[:10], m, n); err == nil || !strings.Contains(err.Error(), "10 values for a 37×24 matrix") {
		t.Errorf("short w: %v", err)
	}
	if _, err := p.Bind([]float64{1e39}, 1, 1); err == nil || !strings.Contains(err.Error(), "beyond the float32 range") {
		t.Errorf("1e39: %v", err)
	}
	if _, err := NewGPUProducts(nil); err == nil {
		t.Error("nil device accepted")
	}
}

// checkBoundAgainstHost checks y = W·xw and z = Wᵀ·xt from bp against float64 sums on the host
// (wantHostProduct).
func checkBoundAgainstHost(t *testing.T, what string, bp BoundProducts, w, xw, xt, y, z []float64, m, n, l int) {
	t.Helper()
	if err := bp.MulW(y, xw, l); err != nil {
		t.Fatal(err)
	}
	if err := bp.MulWT(z, xt, l); err != nil {
		t.Fatal(err)
	}
	wantHostProduct(t, what+": W·X", y, w, xw, m, n, l, false)
	wantHostProduct(t, what+": Wᵀ·X", z, w, xt, m, n, l, true)
}

// checkMulAgainstHost checks p.Mul(a, b) = W·xw (a = W m×n, b = xw n×l) against float64 sums
// on the host (wantHostProduct).
func checkMulAgainstHost(t *testing.T, what string, p Products, w, xw []float64, m, n, l int) {
	t.Helper()
	y := make([]float64, m*l)
	if err := p.Mul(y, w, xw, m, n, l); err != nil {
		t.Fatal(err)
	}
	wantHostProduct(t, what+": Mul", y, w, xw, m, n, l, false)
}

// wantHostProduct checks got = op(W)·x, op(W) the row-major m×n W or (trans) Wᵀ, x row-major
// with l columns, against float64 sums on the host: within 1e-5·Σ|terms| (f32 rounding of the
// inputs and of a sum of at most 37 terms) and not float64-exact (so f32 really ran).
func wantHostProduct(t *testing.T, what string, got, w, x []float64, m, n, l int, trans bool) {
	t.Helper()
	rows, inner, op := m, n, w
	if trans {
		rows, inner = n, m
		op = make([]float64, len(w))
		for i := range rows {
			for j := range inner {
				op[i*inner+j] = w[j*n+i]
			}
		}
	}
	want, abs, err := host.MatMulAbs(op, rows, inner, x, l, false)
	if err != nil {
		t.Fatal(err)
	}
	for e, s := range want {
		if math.Abs(got[e]-s) > 1e-5*abs[e] || got[e] == s {
			t.Fatalf("%s: [%d, %d] = %.9g, want %.9g (and not float64-exact)", what, e/l, e%l, got[e], s)
		}
	}
}

// TestCompressModelOnGPUMatchesCPU compresses a small model (a 72×48 and a 48×72 linear, two
// bits per weight, paths auto so both paths' SVDs run) on the GPU and on the CPU: the ranks,
// paths and bits per weight are identical, the relative errors agree within 1e-3 (also
// for the float32 CPU products), and two GPU runs give byte-identical payloads.
func TestCompressModelOnGPUMatchesCPU(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(7, 8))
	m := cmf.NewModel(smallConfig(t, 48, 72))
	for _, s := range []struct {
		name string
		m, n int
	}{{"model.layers.0.mlp.up_proj.weight", 72, 48}, {"model.layers.0.mlp.down_proj.weight", 48, 72}} {
		v := make([]float64, s.m*s.n)
		for i := range v {
			// Decaying spectrum plus noise, like a trained weight.
			v[i] = 0.02 * rng.NormFloat64() * (1 + 3*math.Exp(-float64(i%s.n)/8))
		}
		tn, err := cmf.NewFloatTensor(s.name, cmf.F32, []int{s.m, s.n}, v)
		if err != nil {
			t.Fatal(err)
		}
		m.Tensors[s.name] = tn
	}
	opt := Options{BitsPerWeight: 2, Seed: 11}
	_, cpu, err := ModelOn(nil, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s1, gpu1, err := ModelOn(d, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, err := ModelOn(d, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	f32opt := opt
	f32opt.Products = CPUProducts{Float32: true}
	_, cpu32, err := ModelOn(nil, m, f32opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu) != 2 || len(gpu1) != 2 || len(cpu32) != 2 {
		t.Fatalf("reports: cpu %d, gpu %d", len(cpu), len(gpu1))
	}
	for i, c := range cpu {
		g := gpu1[i]
		if g.Name != c.Name || g.Rank != c.Rank || g.Paths != c.Paths || g.BitsPerWeight != c.BitsPerWeight {
			t.Errorf("gpu %+v, cpu %+v", g, c)
		}
		if f := cpu32[i]; f.Rank != c.Rank || f.Paths != c.Paths || f.BitsPerWeight != c.BitsPerWeight || math.Abs(f.RelErr-c.RelErr) > 1e-3 {
			t.Errorf("cpu f32 %+v, cpu %+v", f, c)
		}
		if math.Abs(g.RelErr-c.RelErr) > 1e-3 || !(g.RelErr > 0 && g.RelErr < 1) {
			t.Errorf("%s: relative error gpu %g, cpu %g", c.Name, g.RelErr, c.RelErr)
		}
		b1, err1 := s1.Tensors[c.Name].Bytes()
		b2, err2 := s2.Tensors[c.Name].Bytes()
		if err1 != nil || err2 != nil || len(b1) == 0 || !bytes.Equal(b1, b2) {
			t.Errorf("%s: two GPU runs differ", c.Name)
		}
		t.Logf("%s: rank %d, %d paths, %.4f bits/weight, rel.err gpu %.6f cpu %.6f cpu-f32 %.6f", c.Name, c.Rank, c.Paths, c.BitsPerWeight, g.RelErr, c.RelErr, cpu32[i].RelErr)
	}
	p, _ := NewGPUProducts(d)
	if _, _, err := ModelOn(d, m, Options{Products: p}, nil); err == nil || !strings.Contains(err.Error(), "both a device and opt.Products") {
		t.Errorf("device and products: %v", err)
	}
}

// TestRefineOnGPUMatchesCPU runs InitRefine with input weights on a small model with its
// products on the GPU (float32) and on the CPU (float64): same ranks, paths and bits per
// weight, weighted errors below the Dual-SVID start's on both, and within 1e-2 of each other
// (the sign descent is a discrete search: float32 Grams can tip a near-tie flip, after which
// the two runs follow different but equally good paths — far more than the 1e-3 of
// Dual-SVID alone, far less than the ~0.1 the refinement gains), and two GPU runs give
// byte-identical payloads.
func TestRefineOnGPUMatchesCPU(t *testing.T) {
	d := gputest.Open(t)
	teacher, cal := refineTeacher(t, 40)
	opt := Options{BitsPerWeight: 2, Seed: 11, Init: InitRefine, Calibration: cal, RefineIters: 4}
	_, cpu, err := ModelOn(nil, teacher, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s1, gpu1, err := ModelOn(d, teacher, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, err := ModelOn(d, teacher, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cpu {
		g := gpu1[i]
		if g.Name != c.Name || g.Rank != c.Rank || g.Paths != c.Paths || g.BitsPerWeight != c.BitsPerWeight {
			t.Errorf("gpu %+v, cpu %+v", g, c)
		}
		if math.Abs(g.WeightedRelErr-c.WeightedRelErr) > 1e-2 || !(g.WeightedRelErr < g.InitWeightedRelErr) || !(c.WeightedRelErr < c.InitWeightedRelErr) {
			t.Errorf("%s: weighted error gpu %g (from %g), cpu %g (from %g)", c.Name, g.WeightedRelErr, g.InitWeightedRelErr, c.WeightedRelErr, c.InitWeightedRelErr)
		}
		b1, err1 := s1.Tensors[c.Name].Bytes()
		b2, err2 := s2.Tensors[c.Name].Bytes()
		if err1 != nil || err2 != nil || len(b1) == 0 || !bytes.Equal(b1, b2) {
			t.Errorf("%s: two GPU runs differ", c.Name)
		}
		t.Logf("%s: rank %d, %d paths, weighted rel.err gpu %.6f cpu %.6f (Dual-SVID start %.6f)", c.Name, c.Rank, c.Paths, g.WeightedRelErr, c.WeightedRelErr, c.InitWeightedRelErr)
	}
}

// timedProducts wraps Products and sums the wall time (Bind included: the upload is part
// of the GPU's cost) and the flops (2·m·n·l per product with W, 2·m·k·n per Mul) of
// everything it computes.
type timedProducts struct {
	p     Products
	mu    sync.Mutex
	dur   time.Duration
	flops float64
}

type timedBound struct {
	t    *timedProducts
	b    BoundProducts
	m, n int
}

func (t *timedProducts) add(start time.Time, flops float64) {
	t.mu.Lock()
	t.dur += time.Since(start)
	t.flops += flops
	t.mu.Unlock()
}

func (t *timedProducts) Mul(dst, a, b []float64, m, k, n int) error {
	defer t.add(time.Now(), 2*float64(m)*float64(k)*float64(n))
	return t.p.Mul(dst, a, b, m, k, n)
}

func (t *timedProducts) Bind(w []float64, m, n int) (BoundProducts, error) {
	start := time.Now()
	b, err := t.p.Bind(w, m, n)
	t.add(start, 0)
	return &timedBound{t, b, m, n}, err
}

func (b *timedBound) MulW(dst, x []float64, l int) error {
	defer b.t.add(time.Now(), 2*float64(b.m)*float64(b.n)*float64(l))
	return b.b.MulW(dst, x, l)
}

func (b *timedBound) MulWT(dst, x []float64, l int) error {
	defer b.t.add(time.Now(), 2*float64(b.m)*float64(b.n)*float64(l))
	return b.b.MulWT(dst, x, l)
}

func (b *timedBound) Close() error { return b.b.Close() }

// shapes08B are the compressed linears of Qwen3.5-0.8B (24 layers, hidden 1024,
// intermediate 3584; every 4th layer full attention with 8 query heads of 256 and 2 KV
// heads, the other 18 GatedDeltaNet with 16 key and 16 value heads of 128): m×n and count.
var shapes08B = []struct{ m, n, count int }{
	{3584, 1024, 48}, // gate_proj, up_proj
	{1024, 3584, 24}, // down_proj
	{6144, 1024, 18}, // in_proj_qkv
	{2048, 1024, 18}, // in_proj_z
	{1024, 2048, 24}, // out_proj, o_proj
	{4096, 1024, 6},  // q_proj (query and gate)
	{512, 1024, 12},  // k_proj, v_proj
}

// BenchmarkCompress08B compresses one synthetic weight (0.02·Gaussian) of each 0.8B shape
// at 1 bit per weight, paths auto, with the products on the CPU in float64 ("cpu"),
// in float32 ("cpu32") or on the WebGPU device ("gpu"), by Dual-SVID ("dual-svid") or
// InitRefine with second moments ("refine") or with the Gram ("refine-gram") of synthetic
// inputs (the time to gather the statistics is not counted). Per shape it
// reports seconds per tensor, the part spent in the products (products_s, Bind included)
// and their GFLOP; the "model" sub-benchmark runs every shape once and reports the
// whole-model totals (Σ count·time: model_s, model_products_s, model_products_GFLOP) and
// h200_est_s, the whole-model time with the products at 27 TFLOP/s (the tuned f32 GEMM's
// rate on the H200, DESIGN.md §9) and everything else as measured here. On lavapipe the gpu
// variant is slow (a few GFLOP/s): run a single shape,
// -bench 'Compress08B/gpu/dual-svid/3584x1024' -benchtime 1x.
func BenchmarkCompress08B(b *testing.B) {
	kinds := []struct {
		name string
		prod func(b *testing.B) Products
	}{
		{"cpu", func(*testing.B) Products { return CPUProducts{} }},
		{"cpu32", func(*testing.B) Products { return CPUProducts{Float32: true} }},
		{"gpu", func(b *testing.B) Products {
			p, err := NewGPUProducts(gputest.Open(b))
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
	}
	weights := func(m, n int) []float64 {
		rng := rand.New(rand.NewPCG(61, 62))
		w := make([]float64, m*n)
		for i := range w {
			w[i] = 0.02 * rng.NormFloat64()
		}
		return w
	}
	// calibration is 2n tokens of Gaussian inputs with feature scales in [0.1, 10], keeping
	// the Gram (gram) or not (fewer tokens than features leave the Gram singular, and the
	// plain error of the result large: 2.9 at 512×1024 from 256 tokens).
	calibration := func(b *testing.B, n int, gram bool) *Calibration {
		rng := rand.New(rand.NewPCG(63, 64))
		tokens := 2 * n
		x := make([]float64, tokens*n)
		for i := range x {
			x[i] = rng.NormFloat64() * math.Pow(10, 2*float64(i%n)/float64(n)-1)
		}
		c := NewCalibration(map[bool]int{false: 0, true: n}[gram])
		if err := c.Add(x, tokens, n, "bench.weight"); err != nil {
			b.Fatal(err)
		}
		return c
	}
	const h200 = 27e12 // f32 flop/s
	for _, k := range kinds {
		for _, variant := range []string{"dual-svid", "refine", "refine-gram"} {
			b.Run(k.name+"/"+variant, func(b *testing.B) {
				one := func(b *testing.B, m, n int) (secs, prodSecs, flops, relErr float64) {
					tp := &timedProducts{p: k.prod(b)}
					w := weights(m, n)
					opt := Options{BitsPerWeight: 1, Products: tp}
					if variant != "dual-svid" {
						opt.Init = InitRefine
						opt.Calibration = calibration(b, n, variant == "refine-gram")
					}
					start := time.Now()
					_, relErr, err := Matrix("bench.weight", w, m, n, opt)
					if err != nil {
						b.Fatal(err)
					}
					return time.Since(start).Seconds(), tp.dur.Seconds(), tp.flops, relErr
				}
				for _, s := range shapes08B {
					b.Run(fmt.Sprintf("%dx%d", s.m, s.n), func(b *testing.B) {
						var prod, flops, relErr float64
						for b.Loop() {
							_, prod, flops, relErr = one(b, s.m, s.n)
						}
						b.ReportMetric(prod, "products_s")
						b.ReportMetric(flops/1e9, "products_GFLOP")
						b.ReportMetric(relErr, "relerr")
					})
				}
				b.Run("model", func(b *testing.B) {
					var total, prod, flops, est float64
					for b.Loop() {
						total, prod, flops, est = 0, 0, 0, 0
						for _, s := range shapes08B {
							secs, p, f, relErr := one(b, s.m, s.n)
							c := float64(s.count)
							total += c * secs
							prod += c * p
							flops += c * f
							est += c * (secs - p + f/h200)
							b.Logf("%s %d×%d ×%d: %.2fs per tensor, products %.2fs (%.1f GFLOP), rel.err %.4f", k.name, s.m, s.n, s.count, secs, p, f/1e9, relErr)
						}
					}
					b.ReportMetric(total, "model_s")
					b.ReportMetric(prod, "model_products_s")
					b.ReportMetric(flops/1e9, "model_products_GFLOP")
					b.ReportMetric(est, "h200_est_s")
				})
			})
		}
	}
}
