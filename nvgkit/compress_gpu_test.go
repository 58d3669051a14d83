package nvgkit

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
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
		if err := bp.MulW(y, xw, l); err != nil {
			t.Fatal(err)
		}
		if err := bp.MulWT(z, xt, l); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < m; i++ {
			for c := 0; c < l; c++ {
				var s, a float64
				for j := 0; j < n; j++ {
					s += w[i*n+j] * xw[j*l+c]
					a += math.Abs(w[i*n+j] * xw[j*l+c])
				}
				if math.Abs(y[i*l+c]-s) > 1e-5*a {
					t.Fatalf("block rows %d: (W·X)[%d, %d] = %g, want %g", blockRows, i, c, y[i*l+c], s)
				}
			}
		}
		for j := 0; j < n; j++ {
			for c := 0; c < l; c++ {
				var s, a float64
				for i := 0; i < m; i++ {
					s += w[i*n+j] * xt[i*l+c]
					a += math.Abs(w[i*n+j] * xt[i*l+c])
				}
				if math.Abs(z[j*l+c]-s) > 1e-5*a {
					t.Fatalf("block rows %d: (Wᵀ·X)[%d, %d] = %g, want %g", blockRows, j, c, z[j*l+c], s)
				}
			}
		}
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

// TestCompressOnGPUMatchesCPU compresses a small model (a 72×48 and a 48×64 linear, two
// bits per weight, paths auto so both paths' SVDs run) on the GPU and on the CPU: the ranks,
// paths and bits per weight are identical, the relative errors agree within 1e-3, and two
// GPU runs give byte-identical payloads.
func TestCompressOnGPUMatchesCPU(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(7, 8))
	m := cmf.NewModel(cmf.Config{})
	for _, s := range []struct {
		name string
		m, n int
	}{{"model.layers.0.mlp.up_proj.weight", 72, 48}, {"model.layers.0.mlp.down_proj.weight", 48, 64}} {
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
	opt := cmf.CompressOptions{BitsPerWeight: 2, Seed: 11}
	_, cpu, err := CompressOn(nil, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s1, gpu1, err := CompressOn(d, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, err := CompressOn(d, m, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu) != 2 || len(gpu1) != 2 {
		t.Fatalf("reports: cpu %d, gpu %d", len(cpu), len(gpu1))
	}
	for i, c := range cpu {
		g := gpu1[i]
		if g.Name != c.Name || g.Rank != c.Rank || g.Paths != c.Paths || g.BitsPerWeight != c.BitsPerWeight {
			t.Errorf("gpu %+v, cpu %+v", g, c)
		}
		if math.Abs(g.RelErr-c.RelErr) > 1e-3 || !(g.RelErr > 0 && g.RelErr < 1) {
			t.Errorf("%s: relative error gpu %g, cpu %g", c.Name, g.RelErr, c.RelErr)
		}
		b1, err1 := s1.Tensors[c.Name].Bytes()
		b2, err2 := s2.Tensors[c.Name].Bytes()
		if err1 != nil || err2 != nil || len(b1) == 0 || !bytes.Equal(b1, b2) {
			t.Errorf("%s: two GPU runs differ", c.Name)
		}
		t.Logf("%s: rank %d, %d paths, %.4f bits/weight, rel.err gpu %.6f cpu %.6f", c.Name, c.Rank, c.Paths, c.BitsPerWeight, g.RelErr, c.RelErr)
	}
	p, _ := NewGPUProducts(d)
	if _, _, err := CompressOn(d, m, cmf.CompressOptions{Products: p}, nil); err == nil || !strings.Contains(err.Error(), "both a device and opt.Products") {
		t.Errorf("device and products: %v", err)
	}
}
