package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

func absSlice(v []float64) []float64 {
	a := make([]float64, len(v))
	for i, x := range v {
		a[i] = math.Abs(x)
	}
	return a
}

// absBLR is w with every scale replaced by its magnitude and every sign by +1: the same
// computation on it, with |x| and |dy|, yields for every result the sum of the magnitudes
// of all the terms that went into it (the quantity f32 rounding errors are relative to).
func absBLR(w *cmf.BLRWeight) *cmf.BLRWeight {
	a := &cmf.BLRWeight{M: w.M, N: w.N, Rank: w.Rank}
	abs32 := func(v []float32) []float32 {
		o := make([]float32, len(v))
		for i, x := range v {
			o[i] = float32(math.Abs(float64(x)))
		}
		return o
	}
	ones := func(k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = 0xff
		}
		return b
	}
	for _, q := range w.Paths {
		a.Paths = append(a.Paths, cmf.BLRPath{H: abs32(q.H), G: abs32(q.G), L: abs32(q.L), U: ones(len(q.U)), V: ones(len(q.V))})
	}
	return a
}

// TestBLRLinearBackwardFD checks the f64 reference host.BLRLinearBackward by central
// differences of L = Σ dy ⊙ Apply(x) for every scale of every path and every input. L is
// linear in each of them separately, so the difference quotient with ε = 2⁻¹⁰ (exact in
// the f32 scales) is exact up to f64 rounding: tolerance 1e-9·(1 + |grad|).
func TestBLRLinearBackwardFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const rows, m, n, r = 3, 10, 16, 8
	w := randBLR(rng, m, n, r, 2, r)
	_, x := randF32(rng, rows*n, 1)
	_, dy := randF32(rng, rows*m, 1)
	dx, grads, err := host.BLRLinearBackward(w, x, rows, dy)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		y := w.Apply(x, rows)
		var s float64
		for i := range y {
			s += y[i] * dy[i]
		}
		return s
	}
	const eps = 1.0 / 1024
	worst := 0.0
	check := func(what string, got float64, plus, minus func()) {
		plus()
		lp := loss()
		minus()
		minus()
		lm := loss()
		plus()
		fd := (lp - lm) / (2 * eps)
		e := math.Abs(fd - got)
		worst = math.Max(worst, e)
		if e > 1e-9*(1+math.Abs(got)) {
			t.Errorf("%s: backward %g, central difference %g", what, got, fd)
		}
	}
	for p := range w.Paths {
		q := &w.Paths[p]
		for _, f := range []struct {
			name string
			v    []float32
			g    []float64
		}{{"h", q.H, grads[p].H}, {"ℓ", q.L, grads[p].L}, {"g", q.G, grads[p].G}} {
			for i := range f.v {
				check(fmt.Sprintf("path %d d%s[%d]", p, f.name, i), f.g[i],
					func() { f.v[i] += eps }, func() { f.v[i] -= eps })
			}
		}
	}
	for i := range x {
		check(fmt.Sprintf("dx[%d]", i), dx[i], func() { x[i] += eps }, func() { x[i] -= eps })
	}
	t.Logf("max |backward − central difference| %.3g", worst)
}

// TestBLRBackward compares BLRBackward with host.BLRLinearBackward on awkward sizes, 1 and
// 2 paths, with t1 and c kept by BLRForward and recomputed, gradients accumulated onto non-zero
// buffers, and rank padding (padded dℓ must be exactly 0). Tolerance: every result is a
// chain of f32 fma sums whose lengths add up to at most n + m + r + rows, each step adding
// a relative u = 2⁻²⁴ of the magnitudes of its terms, so |err| ≤ (n+m+r+rows+10)·u·A where
// A is the same backward run on magnitudes (absBLR, |x|, |dy|), plus u·|result| for the
// final accumulation.
func TestBLRBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(41, 42))
	const u = 1.0 / (1 << 24)
	auto := []gemmTestVariant{{}, coopmatVariant, coopmatSplitVariant}
	// The split line must have split some GEMM (a case whose every K fits one slice of the
	// block in use cannot split, so this is counted over the cases).
	splitRan, splits := false, 0
	defer func() {
		if splitRan && splits == 0 {
			t.Errorf("no split-K GEMM recorded under %s", coopmatSplitVariant)
		}
	}()
	lanes := []gemmTestVariant{lanesVariant}
	// m = n = r = 128 takes the fast path of every GEMM (TransB and not) under every tile.
	fast := []gemmTestVariant{{bm: 64, bn: 64, bk: 16, general: false}, {bm: 128, bn: 128, bk: 32, general: false}, {bm: 128, bn: 64, bk: 32, general: false},
		{bm: 64, bn: 128, bk: 32, general: false}}
	for _, c := range []struct {
		rows, m, n, r, paths, live int
		keepT1                     bool
		variants                   []gemmTestVariant
	}{
		{37, 70, 56, 24, 1, 24, true, auto},
		{5, 130, 200, 72, 2, 66, false, auto},
		{67, 33, 88, 16, 2, 13, true, auto},
		{300, 20, 24, 8, 2, 5, false, auto}, // 2 row chunks in the column reductions
		{37, 128, 128, 128, 2, 120, true, fast},
		{21, 128, 128, 128, 1, 128, false, fast[:1]},
		// m % 4 == 0: every stage (dt2's K is m) takes the lane-blocked kernel.
		{37, 68, 56, 24, 2, 20, true, lanes},
		{5, 132, 200, 72, 1, 66, false, lanes},
		{9, 20, 24, 8, 2, 5, false, lanes},
	} {
		for _, v := range c.variants {
			t.Run(fmt.Sprintf("%+v/%s", c, v), func(t *testing.T) {
				extra := 0.0
				if v.coop {
					// Four GEMMs round their A to f16 (t1's x⊙g, c's t1⊙ℓ, dt2's dy⊙h, dxg's
					// dt2⊙ℓ), each ≤ 2⁻¹¹ of the magnitudes the bound's A sums: 2⁻⁸ covers
					// them with the f32 terms doubled (coopRel).
					skipNoCoopmat(t, d)
					extra = 1.0 / (1 << 8)
					coop0, split0 := gpu.CoopDispatches(), gpu.CoopSplits()
					defer func() {
						if got, want := gpu.CoopDispatches()-coop0, 4*c.paths; got != want {
							t.Errorf("%d cooperative-matrix GEMMs recorded, want %d", got, want)
						}
						if v.splitK > 0 {
							splitRan, splits = true, splits+gpu.CoopSplits()-split0
						}
					}()
				}
				if v.lanes {
					skipNoLanes(t, d)
					lanes0 := gpu.GEMMLanesDispatches()
					defer func() {
						// Per path: BLRForward's t1 and y when t1 and c are kept,
						// else BLRBackward's t1 and c; dt2 and dxg.
						want := 4 * c.paths
						if got := gpu.GEMMLanesDispatches() - lanes0; got != want {
							t.Errorf("%d lane-blocked GEMMs recorded, want %d", got, want)
						}
					}()
				}
				defer v.force()()
				testBLRBackward(t, d, rng, c.rows, c.m, c.n, c.r, c.paths, c.live, c.keepT1, extra)
			})
		}
	}
}

// testBLRBackward checks one case; extra is added to the f32 bound's relative factor (the
// cooperative-matrix path's f16 rounding of the GEMMs' A operands).
func testBLRBackward(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, m, n, r, paths, live int, keepT1 bool, extra float64) {
	c := struct{ rows, m, n, r, paths, live int }{rows, m, n, r, paths, live}
	{
		{
			o := newBLROperands(t, d, rng, c.rows, c.m, c.n, c.r, c.paths, c.live)
			w, l, xd, dyd, x, dy, keep := o.w, o.l, o.xd, o.dyd, o.x, o.dy, o.keep
			dx := keep(must(d.NewBuffer("dx", gpu.F32, c.rows, c.n)).T(t))
			var kept gpu.BLRKept
			if keepT1 {
				y := keep(must(d.NewBuffer("y", gpu.F32, c.rows, c.m)).T(t))
				for range c.paths {
					kept.T1 = append(kept.T1, keep(must(d.NewBuffer("t1", gpu.F32, c.rows, c.r)).T(t)))
					kept.C = append(kept.C, keep(must(d.NewBuffer("c", gpu.F32, c.rows, c.m)).T(t)))
				}
				if err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRForward(r, l, x, y, kept, c.rows) }); err != nil {
					t.Fatal(err)
				}
			}
			grads := make([]gpu.BLRGrad, c.paths)
			init := make([][3][]float64, c.paths)
			for p := range grads {
				for i, k := range []int{c.m, c.r, c.n} {
					f, dd := randF32(rng, k, 0.5)
					init[p][i] = dd
					b := keep(must(d.UploadFloat32("grad", f, k)).T(t))
					switch i {
					case 0:
						grads[p].H = b
					case 1:
						grads[p].L = b
					case 2:
						grads[p].G = b
					}
				}
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				if err := poisonBorrowed(r, c.rows, c.m, c.r, c.n, c.r); err != nil {
					return err
				}
				return gpu.BLRBackward(r, l, x, kept, dy, dx, grads, c.rows)
			}); err != nil {
				t.Fatal(err)
			}
			wdx, wg, err := host.BLRLinearBackward(w, xd, c.rows, dyd)
			if err != nil {
				t.Fatal(err)
			}
			adx, ag, err := host.BLRLinearBackward(absBLR(w), absSlice(xd), c.rows, absSlice(dyd))
			if err != nil {
				t.Fatal(err)
			}
			bound := func(want, abs []float64) []float64 {
				return blrBoundExtra(c.n+c.m+c.r+c.rows, extra, want, abs)
			}
			checkBound(t, "dx", must(d.ReadFloat32(dx)).T(t), wdx, bound(wdx, adx))
			for p := range grads {
				for i, f := range []struct {
					name      string
					b         *gpu.Buffer
					want, abs []float64
				}{{"dh", grads[p].H, wg[p].H, ag[p].H}, {"dℓ", grads[p].L, wg[p].L, ag[p].L}, {"dg", grads[p].G, wg[p].G, ag[p].G}} {
					got := must(d.ReadFloat32(f.b)).T(t)
					want := make([]float64, len(f.want))
					for j := range want {
						want[j] = init[p][i][j] + f.want[j]
					}
					if i == 1 {
						for j := c.live; j < c.r; j++ {
							if got[j] != 0 {
								t.Errorf("path %d: padded dℓ[%d] = %g, want exactly 0", p, j, got[j])
							}
						}
						got, want = got[:c.live], want[:c.live]
					}
					checkBound(t, fmt.Sprintf("path %d %s", p, f.name), got, want, bound(want, f.abs[:len(want)]))
				}
			}
		}
	}
}

// poisonBorrowed fills borrowed buffers of rows × each width with large random values and
// gives them back, so that the launcher recorded next borrows stale garbage (Recorder.Borrow
// hands out given-back buffers of the same size first): a kernel that read its intermediates
// before writing them would fail its comparison with the host.
func poisonBorrowed(r *gpu.Recorder, rows int, widths ...int) error {
	var dones []func()
	for i, w := range widths {
		b, done, err := r.Borrow("poison", gpu.F32, rows, w)
		if err != nil {
			return err
		}
		dones = append(dones, done)
		if err := gpu.FillRandomUniform(r, b, uint32(99+i), 0, -1e4, 1e4); err != nil {
			return err
		}
	}
	for _, done := range dones {
		done()
	}
	return nil
}

// TestBLRBackwardKeptBitIdentical: BLRBackward gives the same bits whether BLRForward's t1
// and c are kept (each alone, both) or recomputed, under the automatic GEMM, the
// lane-blocked one and two tiles: the kept values are the same fma chains the backward runs.
func TestBLRBackwardKeptBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(43, 44))
	for _, v := range []gemmTestVariant{{}, lanesVariant, {bm: 64, bn: 64, bk: 16, general: true}, {bm: 128, bn: 128, bk: 32, general: false}} {
		for _, c := range []struct{ rows, m, n, r, paths, live int }{{37, 68, 56, 24, 2, 20}, {5, 128, 128, 128, 1, 128}} {
			t.Run(fmt.Sprintf("%s/%+v", v, c), func(t *testing.T) {
				if v.lanes {
					skipNoLanes(t, d)
				}
				defer v.force()()
				w := randBLR(rng, c.m, c.n, c.r, c.paths, c.live)
				l := uploadBLR(t, d, w, c.live)
				defer l.Release()
				xf, _ := randF32(rng, c.rows*c.n, 1)
				dyf, _ := randF32(rng, c.rows*c.m, 1)
				tb := newBufs(t, d)
				buf := tb.nw
				x, dy := tb.up("x", xf, c.rows, c.n), tb.up("dy", dyf, c.rows, c.m)
				y := buf("y", c.rows, c.m)
				var all gpu.BLRKept
				for range c.paths {
					all.T1 = append(all.T1, buf("t1", c.rows, c.r))
					all.C = append(all.C, buf("c", c.rows, c.m))
				}
				if err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRForward(r, l, x, y, all, c.rows) }); err != nil {
					t.Fatal(err)
				}
				var ref [][]float32
				for _, kept := range []struct {
					name string
					k    gpu.BLRKept
				}{{"none", gpu.BLRKept{}}, {"t1", gpu.BLRKept{T1: all.T1}}, {"c", gpu.BLRKept{C: all.C}}, {"t1 and c", all}} {
					dx := buf("dx", c.rows, c.n)
					grads := make([]gpu.BLRGrad, c.paths)
					for p := range grads {
						grads[p] = gpu.BLRGrad{H: buf("dh", c.m), L: buf("dl", c.r), G: buf("dg", c.n)}
					}
					if err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRBackward(r, l, x, kept.k, dy, dx, grads, c.rows) }); err != nil {
						t.Fatal(err)
					}
					got := [][]float32{must(d.ReadFloat32(dx)).T(t)}
					for _, g := range grads {
						for _, b := range []*gpu.Buffer{g.H, g.L, g.G} {
							got = append(got, must(d.ReadFloat32(b)).T(t))
						}
					}
					if ref == nil {
						ref = got
						continue
					}
					for i := range got {
						sameBits(t, fmt.Sprintf("kept %s: output %d", kept.name, i), ref[i], got[i])
					}
				}
			})
		}
	}
}

// TestBLRPathPairsBitIdentical: on CPU adapters ("lanes") a two-path layer's t1 and dt2 GEMMs
// each run as one pass over both paths (blrGEMMPair: ranks 24 and 16 take it), and its dh and
// dg (and dx) come from one column-reduction pass (gradColDot2); on tensor cores ("coopmat")
// both paths' A operands of t1 and dt2 are packed in one pass each into one buffer
// (coopPackPaths), and both paths' t1 GEMMs (the forward's, the backward's recomputed one) and
// dt2 GEMMs run as one dispatch each (coopBLRGEMMPair: every forward records one, every
// backward one more without kept t1), and the forward's two y GEMMs run as one DUAL dispatch
// (coopBLRGEMMDual: one per forward, with the raw c kept or not). Either way the forward's y
// and t1 and c (kept, or t1 borrowed), and the backward's gradients are the bits of one pass
// per path, onto non-zero
// gradients, with and without dx, with t1 and c kept or recomputed, over two row chunks (300
// rows), at rows not a multiple of the block, ranks 16, 24 and 40 (not multiples of the
// lavapipe block's 32 columns) and n, m not multiples of its 16-deep slices, m = 30 (not a
// multiple of 4: the epilogue's 4-byte form, and no dt2 pair), with path 1's
// scales (g and h) 2⁻⁵ of path 0's (a swapped path, or path 1 taking path 0's h, would show).
func TestBLRPathPairsBitIdentical(t *testing.T) {
	for _, v := range []string{"lanes", "coopmat"} {
		t.Run(v, func(t *testing.T) {
			d := gputest.Open(t)
			if v == "lanes" {
				skipNoLanes(t, d)
				defer gpu.SetTensorCores(false)()
			} else {
				defer applyGEMMVariant(t, v)()
			}
			twins, pairs, duals := gpu.CoopTwinPacks(), gpu.CoopPairGEMMs(), gpu.CoopDualGEMMs()
			testBLRPathPairs(t, d, v == "coopmat")
			if n := gpu.CoopTwinPacks() - twins; (v == "coopmat") != (n > 0) {
				t.Errorf("%s: %d twin packs recorded", v, n)
			}
			if n := gpu.CoopPairGEMMs() - pairs; (v == "coopmat") != (n > 0) {
				t.Errorf("%s: %d pair dispatches recorded", v, n)
			}
			if n := gpu.CoopDualGEMMs() - duals; (v == "coopmat") != (n > 0) {
				t.Errorf("%s: %d dual dispatches recorded", v, n)
			}
		})
	}
}

// testBLRPathPairs runs TestBLRPathPairsBitIdentical's cases on d; coop: the pair dispatches
// must run where path pairs are on (one per forward, one or two per backward) and never
// where they are off, and so must the DUAL dispatches (one per forward, none in a backward).
func testBLRPathPairs(t *testing.T, d *gpu.Device, coop bool) {
	rng := rand.New(rand.NewPCG(45, 46))
	// The last case's m % 4 ≠ 0 takes the 4-byte form of the GEMMs' epilogue where C has m
	// columns (the DUAL y dispatch reads back y as it wrote it, 4 bytes a lane); its dt2
	// (K = m) is not paired (the twin pack needs K % 4 = 0).
	for _, c := range []struct{ rows, m, n, r, live int }{{37, 68, 56, 24, 20}, {300, 64, 72, 16, 16}, {45, 60, 40, 40, 36}, {29, 30, 48, 24, 20}} {
		for _, keep := range []bool{false, true} {
			for _, withDX := range []bool{true, false} {
				t.Run(fmt.Sprintf("%+v/kept=%v/dx=%v", c, keep, withDX), func(t *testing.T) {
					w := randBLR(rng, c.m, c.n, c.r, 2, c.live)
					// Path 1's scales 2⁻⁵ of path 0's (exactly: powers of two), so that the
					// paths' packed operands differ in their power-of-two scales and a twin
					// pack or pair dispatch that mixed them up would show.
					for _, v := range [][]float32{w.Paths[1].G, w.Paths[1].H} {
						for i := range v {
							v[i] /= 32
						}
					}
					l := uploadBLR(t, d, w, c.live)
					defer l.Release()
					xf, _ := randF32(rng, c.rows*c.n, 1)
					dyf, _ := randF32(rng, c.rows*c.m, 1)
					g0 := make([][]float32, 6)
					for i, k := range []int{c.m, c.r, c.n, c.m, c.r, c.n} {
						g0[i], _ = randF32(rng, k, 1)
					}
					tb := newBufs(t, d)
					x, dy := tb.up("x", xf, c.rows, c.n), tb.up("dy", dyf, c.rows, c.m)
					// pairsRan checks the pair dispatches that run recorded: want where path
					// pairs are on under tensor cores, else none.
					pairsRan := func(what string, pairs bool, n, want int) {
						if !coop || !pairs {
							want = 0
						}
						if n != want {
							t.Errorf("%s (path pairs %v): %d pair dispatches recorded, want %d", what, pairs, n, want)
						}
					}
					// dualsRan likewise checks the DUAL dispatches (both paths' y GEMMs).
					dualsRan := func(what string, pairs bool, n, want int) {
						if !coop || !pairs {
							want = 0
						}
						if n != want {
							t.Errorf("%s (path pairs %v, kept %v): %d dual dispatches recorded, want %d", what, pairs, keep, n, want)
						}
					}
					var got [2][][]float32
					var kept gpu.BLRKept
					// The forward both ways, its t1 and c kept (the backward below uses the
					// paired one's) or not (t1 borrowed: two buffers for the pair dispatch).
					for i, pairs := range []bool{false, true} {
						kept = gpu.BLRKept{}
						if keep {
							for range 2 {
								kept.T1 = append(kept.T1, tb.nw("t1", c.rows, c.r))
								kept.C = append(kept.C, tb.nw("c", c.rows, c.m))
							}
						}
						y := tb.nw("y", c.rows, c.m)
						restore := gpu.SetPathPairs(pairs)
						p0, d0 := gpu.CoopPairGEMMs(), gpu.CoopDualGEMMs()
						err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRForward(r, l, x, y, kept, c.rows) })
						restore()
						if err != nil {
							t.Fatal(err)
						}
						pairsRan("BLRForward", pairs, gpu.CoopPairGEMMs()-p0, 1)
						dualsRan("BLRForward", pairs, gpu.CoopDualGEMMs()-d0, 1)
						outs := []*gpu.Buffer{y}
						if keep {
							outs = append(outs, kept.T1[0], kept.T1[1], kept.C[0], kept.C[1])
						}
						for _, b := range outs {
							got[i] = append(got[i], must(d.ReadFloat32(b)).T(t))
						}
					}
					for i, pairs := range []bool{false, true} {
						var dx *gpu.Buffer
						if withDX {
							dx = tb.nw("dx", c.rows, c.n)
						}
						grads := make([]gpu.BLRGrad, 2)
						for p := range grads {
							grads[p] = gpu.BLRGrad{H: tb.up("dh", g0[3*p], c.m), L: tb.up("dl", g0[3*p+1], c.r), G: tb.up("dg", g0[3*p+2], c.n)}
						}
						restore := gpu.SetPathPairs(pairs)
						p0, d0 := gpu.CoopPairGEMMs(), gpu.CoopDualGEMMs()
						err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRBackward(r, l, x, kept, dy, dx, grads, c.rows) })
						restore()
						if err != nil {
							t.Fatal(err)
						}
						dualsRan("BLRBackward", pairs, gpu.CoopDualGEMMs()-d0, 0)
						want := 0
						if c.m%4 == 0 {
							want++ // dt2
						}
						if !keep {
							want++ // the recomputed t1
						}
						pairsRan("BLRBackward", pairs, gpu.CoopPairGEMMs()-p0, want)
						if withDX {
							got[i] = append(got[i], must(d.ReadFloat32(dx)).T(t))
						}
						for _, g := range grads {
							for _, b := range []*gpu.Buffer{g.H, g.L, g.G} {
								got[i] = append(got[i], must(d.ReadFloat32(b)).T(t))
							}
						}
					}
					for i := range got[0] {
						sameBits(t, fmt.Sprintf("output %d", i), got[0][i], got[1][i])
					}
				})
			}
		}
	}
}

// TestBLRBackwardErrors: mistakes are errors, nothing is recorded.
func TestBLRBackwardErrors(t *testing.T) {
	d := gputest.Open(t)
	o := newBLROperands(t, d, rand.New(rand.NewPCG(3, 4)), 3, 16, 24, 8, 1, 8)
	l, x, dy := o.l, o.x, o.dy
	dx := o.keep(must(d.NewBuffer("dx", gpu.F32, 3, 24)).T(t))
	gh := o.keep(must(d.NewBuffer("gh", gpu.F32, 16)).T(t))
	gl := o.keep(must(d.NewBuffer("gl", gpu.F32, 8)).T(t))
	gg := o.keep(must(d.NewBuffer("gg", gpu.F32, 24)).T(t))
	good := []gpu.BLRGrad{{H: gh, L: gl, G: gg}}
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"grads count": gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, dx, nil, 3),
		"dx is x":     gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, x, good, 3),
		"dℓ size":     gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, dx, []gpu.BLRGrad{{H: gh, L: gh, G: gg}}, 3),
		"dg is h":     gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, dx, []gpu.BLRGrad{{H: gh, L: gl, G: l.Paths[0].G}}, 3),
		"rows":        gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, dx, good, 0),
	})
}

// BenchmarkBLRBackward times BLRBackward with t1 kept at rows = 512, m = n = 1024, r = 256,
// P = 2: per path three sign-bit GEMMs (c and dt2 of 2·rows·r·m flops each, dxg of
// 2·rows·r·n) and three column reductions; reports GFLOP/s counting the GEMMs' flops.
func BenchmarkBLRBackward(b *testing.B) {
	d := gputest.Open(b)
	const rows, m, n, rk, paths = 512, 1024, 1024, 256, 2
	o := newBLROperands(b, d, rand.New(rand.NewPCG(7, 8)), rows, m, n, rk, paths, rk)
	l, x, dy, keep := o.l, o.x, o.dy, o.keep
	dx := keep(must(d.NewBuffer("dx", gpu.F32, rows, n)).T(b))
	y := keep(must(d.NewBuffer("y", gpu.F32, rows, m)).T(b))
	var t1 []*gpu.Buffer
	grads := make([]gpu.BLRGrad, paths)
	for p := range grads {
		t1 = append(t1, keep(must(d.NewBuffer("t1", gpu.F32, rows, rk)).T(b)))
		grads[p] = gpu.BLRGrad{H: keep(must(d.NewBuffer("dh", gpu.F32, m)).T(b)),
			L: keep(must(d.NewBuffer("dl", gpu.F32, rk)).T(b)), G: keep(must(d.NewBuffer("dg", gpu.F32, n)).T(b))}
	}
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: t1}, rows) }); err != nil {
		b.Fatal(err)
	}
	benchGFLOPs(b, d, float64(paths)*2*rows*rk*float64(2*m+n), func(r *gpu.Recorder) error { return gpu.BLRBackward(r, l, x, gpu.BLRKept{T1: t1}, dy, dx, grads, rows) })
}

// blrBound is the error bound of a BLR gradient summed over about terms products in f32, as
// the BLR tests use it: (terms+10)·u·A + u·|want| per element, with A the same gradient of
// the magnitudes (abs) and u = 2⁻²⁴.
// blrBoundExtra is blrBound for a case's f32 path (extra = 0) or, with the extra relative
// factor of the cooperative-matrix path's f16 roundings, twice the f32 terms plus
// extra·abs.
func blrBoundExtra(terms int, extra float64, want, abs []float64) []float64 {
	if extra == 0 {
		return blrBound(terms, want, abs)
	}
	b := blrBound(2*terms, want, abs)
	for i := range b {
		b[i] += extra * abs[i]
	}
	return b
}

func blrBound(terms int, want, abs []float64) []float64 {
	const u = 1.0 / (1 << 24)
	gam := float64(terms+10) * u
	b := make([]float64, len(want))
	for i := range b {
		b[i] = gam*abs[i] + u*math.Abs(want[i])
	}
	return b
}
