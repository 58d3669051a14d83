package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// refGEMM is host.MatMulAbs, the f64 reference of C = A·B (B [n, k] when transB, else
// [k, n]) with per element Σ|a||b|, which bounds the f32 error; the tests pass matching
// sizes, so an error is a test bug (a panic).
func refGEMM(a []float64, m, k int, b []float64, n int, transB bool) (c, abs []float64) {
	c, abs, err := host.MatMulAbs(a, m, k, b, n, transB)
	if err != nil {
		panic(err)
	}
	return c, abs
}

// checkBound fails t unless |got[i] − want[i]| ≤ bound[i] for all i; it returns the max
// absolute error and the max of |err|/Σ|ab| (the error relative to the magnitude of the
// terms, the quantity the bound is about).
func checkBound(t *testing.T, what string, got []float32, want, bound []float64) (float64, float64) {
	t.Helper()
	maxAbs, maxRel := 0.0, 0.0
	bad := 0
	for i := range got {
		e := math.Abs(float64(got[i]) - want[i])
		if !(e <= bound[i]) {
			if bad == 0 {
				t.Errorf("%s: element %d = %g, want %g, |err| %.3g > bound %.3g", what, i, got[i], want[i], e, bound[i])
			}
			bad++
		}
		maxAbs = math.Max(maxAbs, e)
		if bound[i] > 0 {
			maxRel = math.Max(maxRel, e/bound[i])
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements outside the bound", what, bad, len(got))
	}
	t.Logf("%s: max |err| %.3g, max |err|/bound %.3g over %d values", what, maxAbs, maxRel, len(got))
	return maxAbs, maxRel
}

// gemmTestVariant is a tiled GEMM variant a test forces: tile bm×bn×bk (bm = 0: the
// automatic one), general = the bounds-checked path even where the fast one applies.
type gemmTestVariant struct {
	bm, bn, bk int
	general    bool
	lanes      bool // the lane-blocked kernel (gemm_lanes.go) instead of a tile
	coop       bool // the cooperative-matrix kernels (coopmat.go, tensor cores)
	coop2      bool // with coop: the coopmat2 dense GEMM (coopmat2.go); without: the KHR one
	splitK     int  // with coop: the split-K factor forced (0: automatic)
}

func (v gemmTestVariant) String() string {
	if v == (gemmTestVariant{}) {
		return "auto"
	}
	if v.lanes {
		return "lanes"
	}
	if v.coop {
		name := "coopmat"
		if v.coop2 {
			name = "coopmat2"
		}
		if v.splitK > 0 {
			name += fmt.Sprintf("-splitk%d", v.splitK)
		}
		return name
	}
	path := "fast"
	if v.general {
		path = "general"
	}
	return fmt.Sprintf("tile%dx%dx%d-%s", v.bm, v.bn, v.bk, path)
}

// force applies the variant and returns the function restoring the automatic choice.
func (v gemmTestVariant) force() func() {
	if v.lanes {
		return gpu.SetGEMMLanes(true)
	}
	if v.coop {
		r1, r2, r3 := gpu.SetTensorCores(true), gpu.SetCoopmatSplitK(v.splitK), gpu.SetCoopmat2(v.coop2)
		return func() { r3(); r2(); r1() }
	}
	return gpu.SetGEMMVariant(v.bm, v.bn, v.bk, v.general)
}

// lanesVariant is the lane-blocked GEMM as a forced variant.
var lanesVariant = gemmTestVariant{lanes: true}

// skipNoLanes skips t where the lane-blocked GEMM cannot run (no probed subgroup size: GPU
// adapters, where it is never chosen).
func skipNoLanes(t *testing.T, d *gpu.Device) {
	t.Helper()
	if d.Info().SubgroupSize == 0 {
		t.Skipf("the lane-blocked GEMM needs a probed subgroup size (CPU adapters); %s has none", d.Info().Name)
	}
}

// gemmTestVariants: every tile the automatic choice can make (and 128×128×16), each with
// the general and the fast path.
var gemmTestVariants = []gemmTestVariant{
	{bm: 64, bn: 64, bk: 16, general: true}, {bm: 64, bn: 64, bk: 32, general: true}, {bm: 128, bn: 128, bk: 16, general: true},
	{bm: 128, bn: 128, bk: 32, general: true}, {bm: 128, bn: 64, bk: 32, general: true}, {bm: 64, bn: 128, bk: 32, general: true},
	{bm: 64, bn: 64, bk: 16, general: false}, {bm: 64, bn: 64, bk: 32, general: false}, {bm: 128, bn: 128, bk: 16, general: false},
	{bm: 128, bn: 128, bk: 32, general: false}, {bm: 128, bn: 64, bk: 32, general: false}, {bm: 64, bn: 128, bk: 32, general: false},
}

// linearImpl is one implementation of the Linear family under the parity suite
// testLinearFamily: y = x·Wᵀ (Linear's product) and dx = dy·W (LinearT's), W F16 [out, in],
// with the settings it runs under (force; nil for none) and the sizes it is checked on.
type linearImpl struct {
	name    string
	force   func() func()
	linear  func(r *gpu.Recorder, x, w, y *gpu.Buffer, rows, in, out int) error
	linearT func(r *gpu.Recorder, dy, w, dx *gpu.Buffer, rows, in, out int) error
	sizes   [][3]int
	// rel is the error bound per element relative to Σ|a||b| for a product of depth k; nil:
	// f32 arithmetic on exact operands, (k+1)·u.
	rel func(k int) float64
}

// coopRel is the error bound of a cooperative-matrix GEMM relative to Σ|a||b| at depth k:
// A rounds to f16 once (≤ 2⁻¹¹ relative, with its per-row power-of-two scale; taken as 2⁻¹⁰
// to allow a conversion that is not round-to-nearest), B is exact (f16 weights, ±1 signs),
// products are exact in f32 and the f32 accumulation in any order adds ≤ (k+1)·u, doubled
// for an accumulator that truncates (DESIGN.md §7, "Tensor cores through a Vulkan layer").
func coopRel(k int) float64 { return 1.0/(1<<10) + 2*float64(k+1)/(1<<24) }

// coopmatVariant is the cooperative-matrix path as a forced variant; coopmatSplitVariant
// the same with every GEMM's K split in 3 runs (fewer where K has fewer slices), its slabs
// summed by CoopmatSplitK.
var (
	coopmatVariant      = gemmTestVariant{coop: true}
	coopmatSplitVariant = gemmTestVariant{coop: true, splitK: 3}
	// coopmat2Variant and coopmat2SplitVariant: the same with the dense GEMMs on the
	// coopmat2 kernel (NVIDIA; skipped elsewhere, failed with NVG_EXPECT_COOPMAT2=1).
	coopmat2Variant      = gemmTestVariant{coop: true, coop2: true}
	coopmat2SplitVariant = gemmTestVariant{coop: true, coop2: true, splitK: 3}
)

// skipNoCoopmat2 skips t where the device has no coopmat2 GEMM (TensorCores().Coopmat2Reason
// says why), and fails it instead under NVG_EXPECT_COOPMAT2=1 (bench/device.sh on NVIDIA).
func skipNoCoopmat2(t *testing.T, d *gpu.Device) {
	t.Helper()
	if tc := d.TensorCores(); !tc.Coopmat2 {
		if os.Getenv("NVG_EXPECT_COOPMAT2") == "1" {
			t.Fatalf("NVG_EXPECT_COOPMAT2=1 but %s has no coopmat2 GEMM: %s", d.Info().Name, tc.Coopmat2Reason)
		}
		t.Skipf("no coopmat2 GEMM on %s: %s", d.Info().Name, tc.Coopmat2Reason)
	}
}

// skipNoCoopmat skips t, loudly, where the device has no tensor cores (TensorCores().Reason
// says why: bookworm's lavapipe lacks VK_KHR_cooperative_matrix); .ci/coopmat runs these
// tests on Mesa 26 lavapipe and fails if they skip there.
func skipNoCoopmat(t *testing.T, d *gpu.Device) {
	t.Helper()
	if tc := d.TensorCores(); !tc.Available {
		t.Skipf("no tensor cores on %s (cooperative-matrix path not tested): %s", d.Info().Name, tc.Reason)
	}
}

// skipForm skips t where d lacks the form under test: the lane-blocked kernels (lanes,
// skipNoLanes) or tensor cores (coop, skipNoCoopmat).
func skipForm(t *testing.T, d *gpu.Device, lanes, coop bool) {
	t.Helper()
	if lanes {
		skipNoLanes(t, d)
	}
	if coop {
		skipNoCoopmat(t, d)
	}
}

// linearCoopSizes: in a multiple of 8 (the cooperative-matrix path's 16-byte B rows), rows
// and out awkward: partial row and column blocks, one row, K not a multiple of BK; the last
// has whole column blocks of B with K a multiple of 64 for Linear (the coopmat2 kernel's
// FAST loop) beside a partial one, and K = 320 for LinearT (its clamped loop).
var linearCoopSizes = [][3]int{{67, 40, 131}, {1, 8, 5}, {130, 136, 65}, {5, 296, 3}, {33, 64, 200}, {70, 192, 320}}

// linearGeneralSizes are awkward sizes (rows, in, out): not multiples of the 64×64×16 tile,
// odd K for f16 rows starting at odd half-words, a single row, and a K shorter than one tile
// step. linearFastSizes take the fast path (rows not a multiple of the tile): in = out = 128
// for every tile, and in = 64, out = 192 (Linear's N = 192 is general for BN = 128,
// LinearT's N = 64 for every BN = 128).
var (
	linearGeneralSizes = [][3]int{{1, 7, 5}, {67, 45, 131}, {130, 129, 65}, {5, 300, 3}, {150, 37, 141}}
	linearFastSizes    = [][3]int{{67, 128, 128}, {131, 64, 192}, {3, 256, 128}}
)

// linearLanesSizes are sizes where the lane-blocked kernel applies to both products (in and
// out multiples of 4): odd rows, outputs narrower than one workgroup's columns (C = 2, 4)
// and wider (C = 8, a partial last block), a single row, rows not a multiple of S·R.
var linearLanesSizes = [][3]int{{67, 132, 76}, {1, 4, 4}, {130, 36, 260}, {5, 300, 12}, {9, 24, 136}}

// linearImpls are the implementations of the Linear family: Linear and LinearT under every
// variant of gemmTestVariants (the general-path variants on linearGeneralSizes, the
// fast-path ones on linearFastSizes), and the naive twin LinearNaive (both B layouts) on
// all of them.
func linearImpls() []linearImpl {
	var impls []linearImpl
	for _, v := range gemmTestVariants {
		sizes := linearGeneralSizes
		if !v.general {
			sizes = linearFastSizes
		}
		impls = append(impls, linearImpl{v.String(), v.force, gpu.Linear, gpu.LinearT, sizes, nil})
	}
	impls = append(impls, linearImpl{"lanes", lanesVariant.force, gpu.Linear, gpu.LinearT, linearLanesSizes, nil})
	for _, v := range []gemmTestVariant{coopmatVariant, coopmatSplitVariant, coopmat2Variant, coopmat2SplitVariant} {
		impls = append(impls, linearImpl{v.String(), v.force, gpu.Linear, gpu.LinearT, linearCoopSizes, coopRel})
	}
	return append(impls, linearImpl{"naive", nil,
		func(r *gpu.Recorder, x, w, y *gpu.Buffer, rows, in, out int) error {
			return gpu.LinearNaive(r, x, w, y, rows, in, out, true)
		},
		func(r *gpu.Recorder, dy, w, dx *gpu.Buffer, rows, in, out int) error {
			return gpu.LinearNaive(r, dy, w, dx, rows, out, in, false)
		},
		append(append([][3]int{}, linearGeneralSizes...), linearFastSizes...), nil})
}

// TestLinearFamily runs the parity suite on every implementation of linearImpls.
func TestLinearFamily(t *testing.T) {
	for _, impl := range linearImpls() {
		t.Run(impl.name, func(t *testing.T) { testLinearFamily(t, impl) })
	}
}

// testLinearFamily is the Linear family's parity suite: impl's two products on each of its
// sizes against the float64 references (host.LinearOp for y, refGEMM for dx) within the
// f32 rounding bound (K+1)·u·Σ|a||b| per element.
func testLinearFamily(t *testing.T, impl linearImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(9, 10))
	coop := strings.HasPrefix(impl.name, "coopmat")
	switch {
	case impl.name == "lanes":
		skipNoLanes(t, d)
	case coop:
		skipNoCoopmat(t, d)
	}
	coop2 := strings.HasPrefix(impl.name, "coopmat2")
	if coop2 {
		skipNoCoopmat2(t, d)
	}
	if impl.force != nil {
		defer impl.force()()
	}
	lanes0, coop0, split0, c2 := gpu.GEMMLanesDispatches(), gpu.CoopDispatches(), gpu.CoopSplits(), gpu.Coop2Dispatches()
	if coop {
		defer func() {
			if got, want := gpu.Coop2Dispatches()-c2, int64(2*len(impl.sizes)); coop2 && got != want || !coop2 && got != 0 {
				t.Errorf("%d coopmat2 GEMMs recorded under %s (want %d)", got, impl.name, map[bool]int64{true: want}[coop2])
			}
		}()
	}
	if impl.name == "lanes" || coop {
		defer func() {
			got := gpu.GEMMLanesDispatches() - lanes0
			if coop {
				got = gpu.CoopDispatches() - coop0
			}
			if want := 2 * len(impl.sizes); got != want {
				t.Errorf("%d %s GEMMs recorded, want %d (one per product and size)", got, impl.name, want)
			}
			if splits := gpu.CoopSplits() - split0; strings.Contains(impl.name, "splitk") && splits == 0 && os.Getenv("NVG_COOPMAT_TILE") == "" {
				t.Errorf("no split-K GEMM recorded under %s", impl.name)
			}
		}()
	}
	rel := impl.rel
	if rel == nil {
		rel = func(k int) float64 { return float64(k+1) / (1 << 24) }
	}
	for _, sz := range impl.sizes {
		rows, in, out := sz[0], sz[1], sz[2]
		t.Run(fmt.Sprintf("%dx%dx%d", rows, in, out), func(t *testing.T) {
			x, xd := randUpload(t, d, rng, "x", 1, rows, in)
			w, wd := randUploadF16(t, d, rng, "W", 1, out, in)
			dy, dyd := randUpload(t, d, rng, "dy", 1, rows, out)
			y := must(d.NewBuffer("y", gpu.F32, rows, out)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, rows, in)).T(t)
			defer y.Release()
			defer dx.Release()
			err := d.Run(func(r *gpu.Recorder) error {
				if err := impl.linear(r, x, w, y, rows, in, out); err != nil {
					return err
				}
				return impl.linearT(r, dy, w, dx, rows, in, out)
			})
			if err != nil {
				t.Fatal(err)
			}
			want := must(host.LinearOp(xd, rows, in, wd, out)).T(t)
			_, abs := refGEMM(xd, rows, in, wd, out, true)
			bound := make([]float64, len(abs))
			for i := range abs {
				bound[i] = rel(in)*abs[i] + 1e-30
			}
			checkBound(t, "y vs host.LinearOp", must(d.ReadFloat32(y)).T(t), want, bound)
			wantT, absT := refGEMM(dyd, rows, out, wd, in, false)
			for i := range absT {
				absT[i] = rel(out)*absT[i] + 1e-30
			}
			checkBound(t, "dx = dy·W", must(d.ReadFloat32(dx)).T(t), wantT, absT)
		})
	}
}

// TestMatMul checks the dense f32 GEMM (both B layouts) on an awkward size (general path)
// and on a fast-path size under a 64×64 and a 128×128 tile, and under the forced general
// path.
func TestMatMul(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		m, k, n, bm, bk int
		general         bool
	}{
		{33, 70, 19, 0, 0, false}, {40, 64, 128, 64, 16, false}, {40, 64, 128, 128, 32, false},
		{40, 64, 128, 128, 32, true},
	} {
		restore := gpu.SetGEMMVariant(c.bm, c.bm, c.bk, c.general)
		m, k, n := c.m, c.k, c.n
		af, ad := randF32(rng, m*k, 1)
		bf, bd := randF32(rng, k*n, 1)
		a := must(d.UploadFloat32("A", af, m, k)).T(t)
		for _, transB := range []bool{false, true} {
			b := must(d.UploadFloat32("B", bf, k*n)).T(t)
			cb := must(d.NewBuffer("C", gpu.F32, m, n)).T(t)
			if err := d.Run(func(r *gpu.Recorder) error { return gpu.MatMul(r, a, b, cb, m, k, n, transB) }); err != nil {
				t.Fatal(err)
			}
			want, abs := refGEMM(ad, m, k, bd, n, transB)
			for i := range abs {
				abs[i] = float64(k+1)/(1<<24)*abs[i] + 1e-30
			}
			checkBound(t, fmt.Sprintf("MatMul %+v transB=%v", c, transB), must(d.ReadFloat32(cb)).T(t), want, abs)
			b.Release()
			cb.Release()
		}
		a.Release()
		restore()
	}
}

func TestLinearErrors(t *testing.T) {
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 4, 8)).T(t)
	w := must(d.NewBuffer("W", gpu.F16, 3, 8)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 4, 3)).T(t)
	sq := must(d.NewBuffer("sq", gpu.F32, 8, 8)).T(t)
	defer sq.Release()
	defer x.Release()
	defer w.Release()
	defer y.Release()
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"wrong in":      gpu.Linear(r, x, w, y, 4, 7, 3),
		"zero rows":     gpu.Linear(r, x, w, y, 0, 8, 3),
		"f16 x":         gpu.Linear(r, w, w, y, 3, 8, 1),
		"y aliases x":   gpu.MatMul(r, x, sq, x, 4, 8, 8, false),
		"LinearT sizes": gpu.LinearT(r, x, w, y, 4, 8, 3),
		"MatMul f16 B":  gpu.MatMul(r, x, w, y, 4, 8, 3, true),
	})
}

// BenchmarkLinear measures the tiled f16-weight GEMM y = x·Wᵀ at 512×1024×1024
// (rows × in × out) with the device's automatic tile, each forced 128×128 tile, and the
// naive twin; GFLOP/s = 2·rows·in·out / time. One submit and wait per iteration.
func BenchmarkLinear(b *testing.B) {
	for _, sz := range [][3]int{{512, 1024, 1024}} {
		rows, in, out := sz[0], sz[1], sz[2]
		b.Run(fmt.Sprintf("%dx%dx%d", rows, in, out), func(b *testing.B) {
			benchGEMM(b, rows, in, out, false)
		})
		for _, tile := range [][3]int{{128, 128, 16}, {128, 128, 32}} {
			b.Run(fmt.Sprintf("tile%dx%dx%d/%dx%dx%d", tile[0], tile[1], tile[2], rows, in, out), func(b *testing.B) {
				defer gpu.SetGEMMVariant(tile[0], tile[1], tile[2], false)()
				benchGEMM(b, rows, in, out, false)
			})
		}
		b.Run(fmt.Sprintf("naive/%dx%dx%d", rows, in, out), func(b *testing.B) {
			benchGEMM(b, rows, in, out, true)
		})
	}
}

func benchGEMM(b *testing.B, rows, in, out int, naive bool) {
	d := gputest.Open(b)
	x, w, y := gemmOperands(b, d, 1, rows, in, out)
	benchGFLOPs(b, d, 2*float64(rows)*float64(in)*float64(out), func(r *gpu.Recorder) error {
		if naive {
			return gpu.LinearNaive(r, x, w, y, rows, in, out, true)
		}
		return gpu.Linear(r, x, w, y, rows, in, out)
	})
}

// benchGFLOPs times rec (recorded, submitted and synced) after one untimed call that
// compiles the pipelines, and reports flop floating-point operations per call as GFLOP/s.
func benchGFLOPs(b *testing.B, d *gpu.Device, flop float64, rec func(*gpu.Recorder) error) {
	run := func() {
		if err := d.Run(rec); err != nil {
			b.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	run() // compile the pipelines outside the timing
	n := 0
	for b.Loop() {
		run()
		n++
	}
	b.ReportMetric(flop*float64(n)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
