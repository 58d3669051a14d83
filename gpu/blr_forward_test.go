package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/testkit/blrtest"
	"github.com/x448/float16"
)

// randBLR returns a random valid BLR weight: scales uniform in ±1 rounded to f16 (as a
// decoded payload holds them), random sign bits; ranks live.. have ℓ = 0 (padding).
func randBLR(rng *rand.Rand, m, n, r, paths, live int) *cmf.BLRWeight {
	return blrtest.Random(rng, m, n, r, paths, live, func(x float64) float32 { return float16.Fromfloat32(float32(x)).Float32() })
}

func uploadBLR(t testing.TB, d *gpu.Device, w *cmf.BLRWeight, live int) *gpu.BLRLayer {
	t.Helper()
	paths := make([]gpu.BLRHostPath, len(w.Paths))
	for p := range w.Paths {
		paths[p] = gpu.BLRHostPath(w.Paths[p])
	}
	return must(gpu.UploadBLR(d, "blr", w.M, w.N, w.Rank, paths, live)).T(t)
}

// blrOperands are a random BLR layer (host w, device l) and random x [rows, n] and
// dy [rows, m] (uniform in ±1, f32) of one BLR test, with keep, which hands a buffer to the
// same release at the end of the test.
type blrOperands struct {
	w       *cmf.BLRWeight
	l       *gpu.BLRLayer
	xd, dyd []float64
	x, dy   *gpu.Buffer
	keep    func(*gpu.Buffer) *gpu.Buffer
}

// newBLROperands draws the layer (randBLR), then x, then dy from rng, uploads them, and
// releases them and every kept buffer when tb ends.
func newBLROperands(tb testing.TB, d *gpu.Device, rng *rand.Rand, rows, m, n, r, paths, live int) *blrOperands {
	tb.Helper()
	o := &blrOperands{w: randBLR(rng, m, n, r, paths, live)}
	o.l = uploadBLR(tb, d, o.w, live)
	var bufs []*gpu.Buffer
	tb.Cleanup(func() {
		for _, b := range bufs {
			b.Release()
		}
		o.l.Release()
	})
	o.keep = func(b *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, b); return b }
	xf, xd := randF32(rng, rows*n, 1)
	dyf, dyd := randF32(rng, rows*m, 1)
	o.xd, o.dyd = xd, dyd
	o.x = o.keep(must(d.UploadFloat32("x", xf, rows, n)).T(tb))
	o.dy = o.keep(must(d.UploadFloat32("dy", dyf, rows, m)).T(tb))
	return o
}

func signAt(bits []byte, e int) float64 {
	if bits[e/8]>>(e%8)&1 != 0 {
		return 1
	}
	return -1
}

// blrForwardBound is the f64 reference y (cmf.BLRWeight.Apply) with a per-element bound
// on the f32 error of BLRForward. Per path, with S = Σ_j |x_j·g_j| (row's input terms):
// the product x_j·g_j rounds once (u = 2⁻²⁴) and t1_k sums n of them by fma, so
// |t̂1_k − t1_k| ≤ (n+1)·u·S; then (t̂1⊙ℓ) rounds once and z_o sums r terms by fma:
// |ẑ_o − z_o| ≤ (r+1)·u·Σ_k|t1_k ℓ_k| + (n+1)·u·S·Σ_k|ℓ_k|; ·h_o rounds once more and the
// second path's += once: bound = Σ_p |h_o|·[(r+2)·u·Σ|t1 ℓ| + (n+2)·u·S·Σ|ℓ|] + 2u·|y|
// (first order in u; one extra u per term covers the second-order remainder).
//
// rel(k) is the bound of one GEMM stage of depth k relative to Σ|terms| ((k+2)·u above; a
// cooperative-matrix stage's f16 rounding of its A adds ~2⁻¹¹: coopRel).
func blrForwardBound(w *cmf.BLRWeight, x []float64, rows int, rel func(k int) float64) (y, bound []float64) {
	const u = 1.0 / (1 << 24)
	m, n, r := w.M, w.N, w.Rank
	y = w.Apply(x, rows)
	bound = make([]float64, rows*m)
	for _, q := range w.Paths {
		var sumL float64
		for _, l := range q.L {
			sumL += math.Abs(float64(l))
		}
		for i := 0; i < rows; i++ {
			var s float64
			for j := 0; j < n; j++ {
				s += math.Abs(x[i*n+j] * float64(q.G[j]))
			}
			t1 := make([]float64, r)
			for k := 0; k < r; k++ {
				for j := 0; j < n; j++ {
					t1[k] += signAt(q.V, k*n+j) * x[i*n+j] * float64(q.G[j])
				}
			}
			for o := 0; o < m; o++ {
				var a float64
				for k := 0; k < r; k++ {
					a += math.Abs(t1[k] * float64(q.L[k]))
				}
				bound[i*m+o] += math.Abs(float64(q.H[o])) * (rel(r)*a + rel(n)*s*sumL)
			}
		}
	}
	for i := range bound {
		bound[i] += 2 * u * math.Abs(y[i])
	}
	return y, bound
}

// blrForwardCases are the geometries of the BLRForward parity suite: sizes that are not
// multiples of the 64×64 tile nor of 32 bits per row (n/8 bytes per V row not a multiple of
// 4) and sizes that take the fast path, for 1 and 2 paths, with and without rank padding.
var blrForwardCases = []struct {
	rows, m, n, r, paths, live int
	fast                       bool // run under the fast-path variants, else the general ones
}{
	{37, 70, 56, 24, 1, 24, false},
	{5, 130, 200, 72, 2, 66, false},
	{65, 33, 88, 16, 2, 16, false},
	{37, 128, 64, 64, 2, 60, true},  // t1 fast with 64-wide tiles, y with all tiles
	{5, 64, 128, 128, 1, 128, true}, // t1 fast with all tiles, y with 64-wide tiles
}

// blrForwardImpl is one implementation of BLRForward under the parity suite
// testBLRForward: its launcher, the GEMM variant it runs under (nil: the naive twin, which
// takes every case) and so which cases it takes (the variant's path: fast or general).
type blrForwardImpl struct {
	name    string
	run     func(r *gpu.Recorder, l *gpu.BLRLayer, x, y *gpu.Buffer, kept gpu.BLRKept, rows int) error
	variant *gemmTestVariant
}

// TestBLRForward runs the parity suite on BLRForward under every GEMM variant of
// gemmTestVariants and on its naive twin BLRForwardNaive.
func TestBLRForward(t *testing.T) {
	impls := []blrForwardImpl{{"naive", gpu.BLRForwardNaive, nil}, {"lanes", gpu.BLRForward, &lanesVariant},
		{"coopmat", gpu.BLRForward, &coopmatVariant}, {coopmatSplitVariant.String(), gpu.BLRForward, &coopmatSplitVariant}}
	for i := range gemmTestVariants {
		v := &gemmTestVariants[i]
		impls = append(impls, blrForwardImpl{v.String(), gpu.BLRForward, v})
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) { testBLRForward(t, impl) })
	}
}

// testBLRForward is BLRForward's parity suite: impl on each of blrForwardCases its variant
// takes, y compared with cmf.BLRWeight.Apply (f64) within blrForwardBound (the f32 rounding
// bound); t1 and c of the last path, kept, with (x⊙g)·Vᵀ within (n+2)·u·Σ|x g| and
// (t1⊙ℓ)·Uᵀ within blrForwardBound's per-path term without h; and, with one path, y exactly
// the f32 product c ⊙ h (c is the sum y was scaled from, not a recomputation).
func testBLRForward(t *testing.T, impl blrForwardImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(21, 22))
	if impl.variant != nil && impl.variant.lanes {
		skipNoLanes(t, d) // every case has K = n or r, multiples of 8: the kernel applies
	}
	rel := func(k int) float64 { return float64(k+2) / (1 << 24) }
	if impl.variant != nil && impl.variant.coop {
		skipNoCoopmat(t, d)
		rel = coopRel
	}
	if impl.variant != nil {
		defer impl.variant.force()()
	}
	lanes0, coop0, split0 := gpu.GEMMLanesDispatches(), gpu.CoopDispatches(), gpu.CoopSplits()
	for _, c := range blrForwardCases {
		if impl.variant != nil && !impl.variant.lanes && !impl.variant.coop && impl.variant.general == c.fast {
			continue
		}
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			w := randBLR(rng, c.m, c.n, c.r, c.paths, c.live)
			l := uploadBLR(t, d, w, c.live)
			defer l.Release()
			xf, xd := randF32(rng, c.rows*c.n, 1)
			x := must(d.UploadFloat32("x", xf, c.rows, c.n)).T(t)
			defer x.Release()
			want, bound := blrForwardBound(w, xd, c.rows, rel)
			y := must(d.NewBuffer("y", gpu.F32, c.rows, c.m)).T(t)
			defer y.Release()
			var kept gpu.BLRKept
			for range c.paths {
				b := must(d.NewBuffer("t1", gpu.F32, c.rows, c.r)).T(t)
				defer b.Release()
				kept.T1 = append(kept.T1, b)
				cb := must(d.NewBuffer("c", gpu.F32, c.rows, c.m)).T(t)
				defer cb.Release()
				kept.C = append(kept.C, cb)
			}
			if err := d.Run(func(r *gpu.Recorder) error { return impl.run(r, l, x, y, kept, c.rows) }); err != nil {
				t.Fatal(err)
			}
			gy := must(d.ReadFloat32(y)).T(t)
			checkBound(t, "y", gy, want, bound)
			// t1 of the last path: (x⊙g)·Vᵀ with bound rel(n)·Σ|x g|.
			p := c.paths - 1
			q := w.Paths[p]
			wt1 := make([]float64, c.rows*c.r)
			bt1 := make([]float64, c.rows*c.r)
			sx := make([]float64, c.rows) // S = Σ|x g| per row
			for i := 0; i < c.rows; i++ {
				for k := 0; k < c.r; k++ {
					var s, a float64
					for j := 0; j < c.n; j++ {
						v := xd[i*c.n+j] * float64(q.G[j])
						s += signAt(q.V, k*c.n+j) * v
						a += math.Abs(v)
					}
					wt1[i*c.r+k], bt1[i*c.r+k], sx[i] = s, rel(c.n)*a, a
				}
			}
			checkBound(t, "t1", must(d.ReadFloat32(kept.T1[p])).T(t), wt1, bt1)
			// c of the last path: (t1⊙ℓ)·Uᵀ, bound rel(r)·Σ|t1 ℓ| + rel(n)·S·Σ|ℓ| + u·|c|.
			const u = 1.0 / (1 << 24)
			var sumL float64
			for _, v := range q.L {
				sumL += math.Abs(float64(v))
			}
			wc := make([]float64, c.rows*c.m)
			bc := make([]float64, c.rows*c.m)
			for i := 0; i < c.rows; i++ {
				var a float64
				for k := 0; k < c.r; k++ {
					a += math.Abs(wt1[i*c.r+k] * float64(q.L[k]))
				}
				for o := 0; o < c.m; o++ {
					var z float64
					for k := 0; k < c.r; k++ {
						z += signAt(q.U, o*c.r+k) * wt1[i*c.r+k] * float64(q.L[k])
					}
					wc[i*c.m+o], bc[i*c.m+o] = z, rel(c.r)*a+rel(c.n)*sx[i]*sumL+u*math.Abs(z)
				}
			}
			gc := must(d.ReadFloat32(kept.C[p])).T(t)
			checkBound(t, "c", gc, wc, bc)
			if c.paths == 1 {
				for i, v := range gy {
					if want := gc[i] * q.H[i%c.m]; v != want {
						t.Fatalf("y[%d] = %g, want c ⊙ h = %g exactly", i, v, want)
					}
				}
			}
			if impl.variant != nil && impl.variant.splitK > 0 {
				// Without kept c the y GEMMs have no raw output, so they split too, and from
				// the second path on they accumulate: the slab sum adds into y.
				y2 := must(d.NewBuffer("y2", gpu.F32, c.rows, c.m)).T(t)
				defer y2.Release()
				if err := d.Run(func(r *gpu.Recorder) error { return impl.run(r, l, x, y2, gpu.BLRKept{T1: kept.T1}, c.rows) }); err != nil {
					t.Fatal(err)
				}
				checkBound(t, "y (t1 kept, c not)", must(d.ReadFloat32(y2)).T(t), want, bound)
			}
		})
	}
	if impl.variant != nil && (impl.variant.lanes || impl.variant.coop) {
		want := 0
		for _, c := range blrForwardCases {
			want += 2 * c.paths
			if impl.variant.splitK > 0 {
				want += 2 * c.paths // the run without kept c
			}
		}
		got := gpu.GEMMLanesDispatches() - lanes0
		if impl.variant.coop {
			got = gpu.CoopDispatches() - coop0
		}
		// (A forced block may be deeper than every K here: one slice, no split.)
		if impl.variant.splitK > 0 && gpu.CoopSplits() == split0 && os.Getenv("NVG_COOPMAT_TILE") == "" {
			t.Errorf("no split-K GEMM recorded under %s", impl.name)
		}
		if got != want {
			t.Errorf("%d %s GEMMs recorded, want %d (t1 and y per path and case)", got, impl.name, want)
		}
	}
}

// TestBLRForwardErrors: mistakes are errors naming the op, nothing is dispatched.
func TestBLRForwardErrors(t *testing.T) {
	d := gputest.Open(t)
	o := newBLROperands(t, d, rand.New(rand.NewPCG(1, 2)), 3, 16, 24, 8, 1, 8)
	w, l, x := o.w, o.l, o.x
	y := o.keep(must(d.NewBuffer("y", gpu.F32, 3, 16)).T(t))
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"rows":     gpu.BLRForward(r, l, x, y, gpu.BLRKept{}, 4),
		"t1 is g":  gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: []*gpu.Buffer{l.Paths[0].G}}, 3),
		"t1 count": gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: []*gpu.Buffer{y, y}}, 3),
		"c is x":   gpu.BLRForward(r, l, x, y, gpu.BLRKept{C: []*gpu.Buffer{x}}, 3),
		"c is y":   gpu.BLRForward(r, l, x, y, gpu.BLRKept{C: []*gpu.Buffer{y}}, 3),
		"nil":      gpu.BLRForward(r, nil, x, y, gpu.BLRKept{}, 3),
		"h as y":   gpu.BLRForward(r, &gpu.BLRLayer{M: 16, N: 24, Rank: 8, Paths: []gpu.BLRLayerPath{{H: y, G: l.Paths[0].G, L: l.Paths[0].L, U: l.Paths[0].U, V: l.Paths[0].V}}}, x, y, gpu.BLRKept{}, 3),
	})
	sc := must(l.ReadScales()).T(t)
	for i, x := range w.Paths[0].L {
		if sc[0].L[i] != x {
			t.Fatalf("ReadScales: ℓ[%d] = %g, uploaded %g", i, sc[0].L[i], x)
		}
	}
	if len(sc) != 1 || len(sc[0].H) != 16 || len(sc[0].G) != 24 || sc[0].H[3] != w.Paths[0].H[3] || sc[0].G[5] != w.Paths[0].G[5] {
		t.Errorf("ReadScales: got %d paths, H %d, G %d values or wrong values", len(sc), len(sc[0].H), len(sc[0].G))
	}
	for name, f := range map[string]func() error{
		"rank": func() error {
			_, err := gpu.UploadBLR(d, "b", 16, 24, 12, []gpu.BLRHostPath{gpu.BLRHostPath(w.Paths[0])}, 12)
			return err
		},
		"padded ℓ": func() error {
			_, err := gpu.UploadBLR(d, "b", 16, 24, 8, []gpu.BLRHostPath{gpu.BLRHostPath(w.Paths[0])}, 4)
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("UploadBLR %s: no error", name)
		}
	}
}

// BenchmarkBLRForward times BLRForward at rows = 512, m = n = 1024, r = 256, P = 2 (t1 kept),
// 2·P·2·rows·r·(m+n)/2 = 1.07 GFLOP per call; reports GFLOP/s.
func BenchmarkBLRForward(b *testing.B) {
	d := gputest.Open(b)
	const rows, m, n, rk, paths = 512, 1024, 1024, 256, 2
	o := newBLROperands(b, d, rand.New(rand.NewPCG(5, 6)), rows, m, n, rk, paths, rk)
	l, x := o.l, o.x
	y := o.keep(must(d.NewBuffer("y", gpu.F32, rows, m)).T(b))
	t1 := []*gpu.Buffer{o.keep(must(d.NewBuffer("t1", gpu.F32, rows, rk)).T(b)), o.keep(must(d.NewBuffer("t1", gpu.F32, rows, rk)).T(b))}
	benchGFLOPs(b, d, float64(paths)*2*rows*rk*float64(m+n), func(r *gpu.Recorder) error { return gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: t1}, rows) })
}
