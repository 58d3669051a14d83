package gpu_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestBLRSignGrad compares BLRSignGrad with host.BLRSignGrad on awkward sizes (odd m and
// rows, rank not a multiple of 32, padded rank, 1 and 2 paths, t1 kept and recomputed, blocks
// of out cut by the matrix edge), one line per implementation: the simple twin, the blocked
// kernel over all rows (bit for bit the simple twin's values: the same fma chain) and the
// blocked kernel split into row ranges plus the reduce pass (within the bound).
// Tolerance as TestBLRBackward's: (n+m+r+rows+10)·u·A + u·|want| with A the same gradient
// of magnitudes; padded ranks must be exactly 0.
func TestBLRSignGrad(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(61, 62))
	for _, c := range []signGradCase{
		{5, 13, 24, 16, 2, 11, false},
		{3, 7, 8, 8, 1, 8, true},
		{33, 9, 40, 24, 2, 20, true},
		{150, 131, 136, 72, 2, 65, false},
		{77, 140, 24, 40, 1, 40, true},
	} {
		for _, impl := range []struct {
			name   string
			splits int
		}{{"blocked", 1}, {"split", 3}, {"coopmat", 0}} {
			t.Run(fmt.Sprintf("%s/%+v", impl.name, c), func(t *testing.T) {
				if impl.name == "coopmat" {
					// Tensor cores for every GEMM of the case (t1, dt2 and the sign gradients):
					// t1 or dt2 rounds once to f16 as an A operand, then both operands of
					// the sign gradient round once more: ≤ 3·2⁻¹¹ of the bound's magnitudes,
					// covered by 2⁻⁸ with the f32 terms doubled (as TestBLRBackward).
					skipNoCoopmat(t, d)
					defer gpu.SetTensorCores(true)()
					coop0 := gpu.CoopDispatches()
					defer func() {
						if gpu.CoopDispatches()-coop0 < 2*c.paths {
							t.Errorf("%d cooperative-matrix GEMMs recorded, want at least %d (G_U, G_V per path)", gpu.CoopDispatches()-coop0, 2*c.paths)
						}
					}()
					testBLRSignGrad(t, d, rng, c, false, 1.0/(1<<8))
					return
				}
				defer gpu.SetSignGradSplit(impl.splits)()
				testBLRSignGrad(t, d, rng, c, impl.splits == 1, 0)
			})
		}
	}
}

// signGradCase is one size of TestBLRSignGrad: rows of x and dy, the layer's m, n, rank r,
// paths, live (unpadded) rank, and whether t1 comes from the forward or is recomputed.
type signGradCase struct {
	rows, m, n, r, paths, live int
	keepT1                     bool
}

// testBLRSignGrad checks one case; extra is added to the f32 bound's relative factor (the
// cooperative-matrix path's f16 roundings), and bitIdentical asks the blocked kernel to match
// the simple twin bit for bit.
func testBLRSignGrad(t *testing.T, d *gpu.Device, rng *rand.Rand, c signGradCase, bitIdentical bool, extra float64) {
	o := newBLROperands(t, d, rng, c.rows, c.m, c.n, c.r, c.paths, c.live)
	w, l, xd, dyd, x, dy, keep := o.w, o.l, o.xd, o.dyd, o.x, o.dy, o.keep
	// keepT1: t1 from the forward and dt2 from BLRBackward (BLRGrad.DT2), as the student step
	// passes them; else both recomputed.
	var t1, dt2 []*gpu.Buffer
	if c.keepT1 {
		y := keep(must(d.NewBuffer("y", gpu.F32, c.rows, c.m)).T(t))
		grads := make([]gpu.BLRGrad, c.paths)
		for p := range c.paths {
			t1 = append(t1, keep(must(d.NewBuffer("t1", gpu.F32, c.rows, c.r)).T(t)))
			dt2 = append(dt2, keep(must(d.NewBuffer("dt2", gpu.F32, c.rows, c.r)).T(t)))
			grads[p] = gpu.BLRGrad{H: keep(must(d.NewBuffer("dh", gpu.F32, c.m)).T(t)),
				L: keep(must(d.NewBuffer("dl", gpu.F32, c.r)).T(t)), G: keep(must(d.NewBuffer("dg", gpu.F32, c.n)).T(t)), DT2: dt2[p]}
		}
		must(0, d.Run(func(r *gpu.Recorder) error {
			if err := gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: t1}, c.rows); err != nil {
				return err
			}
			return gpu.BLRBackward(r, l, x, gpu.BLRKept{T1: t1}, dy, nil, grads, c.rows)
		})).T(t)
	}
	gu := make([]*gpu.Buffer, c.paths)
	gv := make([]*gpu.Buffer, c.paths)
	for p := range gu {
		gu[p] = keep(must(d.NewBuffer("gu", gpu.F32, c.m*c.r)).T(t))
		gv[p] = keep(must(d.NewBuffer("gv", gpu.F32, c.r*c.n)).T(t))
	}
	// The simple twin first, dt2 recomputed: the blocked kernel over all rows must match it
	// bit for bit (same fma order, the same dt2).
	restore := gpu.SetSignGradNaive(true)
	must(0, d.Run(func(r *gpu.Recorder) error { return gpu.BLRSignGrad(r, l, x, t1, nil, dy, gu, gv, c.rows) })).T(t)
	restore()
	var naive [][]float32
	for p := range gu {
		naive = append(naive, must(d.ReadFloat32(gu[p])).T(t), must(d.ReadFloat32(gv[p])).T(t))
	}
	must(0, d.Run(func(r *gpu.Recorder) error { return gpu.BLRSignGrad(r, l, x, t1, dt2, dy, gu, gv, c.rows) })).T(t)
	for p := range gu {
		if !bitIdentical {
			break
		}
		for k, b := range []*gpu.Buffer{gu[p], gv[p]} {
			got := must(d.ReadFloat32(b)).T(t)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(naive[2*p+k][i]) {
					t.Fatalf("path %d %s[%d]: blocked %g, simple %g", p, []string{"G_U", "G_V"}[k], i, got[i], naive[2*p+k][i])
				}
			}
		}
	}
	wu, wv, err := host.BLRSignGrad(w, xd, c.rows, dyd)
	if err != nil {
		t.Fatal(err)
	}
	au, av, err := host.BLRSignGrad(absBLR(w), absSlice(xd), c.rows, absSlice(dyd))
	if err != nil {
		t.Fatal(err)
	}
	bound := func(want, abs []float64) []float64 {
		return blrBoundExtra(c.n+c.m+c.r+c.rows, extra, want, abs)
	}
	for p := range gu {
		got := must(d.ReadFloat32(gu[p])).T(t)
		checkBound(t, fmt.Sprintf("path %d G_U", p), got, wu[p], bound(wu[p], au[p]))
		for i, v := range got {
			if i%c.r >= c.live && v != 0 {
				t.Fatalf("path %d: padded G_U[%d] = %g", p, i, v)
			}
		}
		got = must(d.ReadFloat32(gv[p])).T(t)
		checkBound(t, fmt.Sprintf("path %d G_V", p), got, wv[p], bound(wv[p], av[p]))
		for i, v := range got {
			if i/c.n >= c.live && v != 0 {
				t.Fatalf("path %d: padded G_V[%d] = %g", p, i, v)
			}
		}
	}
}

func bytesWords(b []byte) []uint32 {
	w := make([]uint32, (len(b)+3)/4)
	for i, x := range b {
		w[i/4] |= uint32(x) << (8 * (i % 4))
	}
	return w
}

func wordsBytes(w []uint32, n int) []byte {
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b[:n]
}

func scoresWords(s []int8) []uint32 {
	b := make([]byte, len(s))
	for i, v := range s {
		b[i] = byte(v)
	}
	return bytesWords(b)
}

func wordsScores(w []uint32, n int) []int8 {
	b := wordsBytes(w, n)
	s := make([]int8, n)
	for i, v := range b {
		s[i] = int8(v)
	}
	return s
}

// signCase is one sign matrix on both sides: host bits and scores and their GPU buffers.
type signCase struct {
	rows, cols, live int
	rankCols         bool
	bits             []byte
	scores           []int8
	m                gpu.SignMatrix
	bufs             []*gpu.Buffer
}

func newSignCase(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, cols, live int, rankCols bool) *signCase {
	t.Helper()
	c := &signCase{rows: rows, cols: cols, live: live, rankCols: rankCols}
	count := rows * cols
	c.bits = make([]byte, (count+7)/8)
	for i := range c.bits {
		c.bits[i] = byte(rng.IntN(256))
	}
	c.scores = make([]int8, count)
	for e := range c.scores {
		if host.SignLive(e, cols, rankCols, live) {
			c.scores[e] = int8(rng.IntN(255) - 127)
		}
	}
	rk := rows
	if rankCols {
		rk = cols
	}
	mask := make([]uint32, rk)
	for k := range live {
		mask[k] = 1
	}
	c.m = gpu.SignMatrix{Rows: rows, Cols: cols, RankCols: rankCols,
		Bits:   must(d.UploadUint32("bits", bytesWords(c.bits), (count+31)/32)).T(t),
		Scores: must(d.UploadUint32("scores", scoresWords(c.scores), (count+3)/4)).T(t),
		Live:   must(d.UploadUint32("live", mask, rk)).T(t)}
	c.bufs = []*gpu.Buffer{c.m.Bits, c.m.Scores, c.m.Live}
	return c
}

func (c *signCase) release() {
	for _, b := range c.bufs {
		b.Release()
	}
}

func (c *signCase) read(t *testing.T, d *gpu.Device) ([]byte, []int8) {
	count := c.rows * c.cols
	return wordsBytes(must(d.ReadUint32(c.m.Bits)).T(t), (count+7)/8), wordsScores(must(d.ReadUint32(c.m.Scores)).T(t), count)
}

// TestSignScoreUpdate compares SignScoreUpdate with host.SignScoreUpdate (U-like and V-like
// layouts, padded ranks, sizes not multiples of 4 or 32 signs, a non-finite gradient): every score within 1 of the
// reference (an f32 rounding at the stochastic-rounding boundary), at most 1 % off, padded
// scores exactly 0, and two runs from the same state byte-identical (resume is bit-exact).
func TestSignScoreUpdate(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(71, 72))
	for _, c := range []struct {
		rows, cols, live int
		rankCols, inf    bool // inf: one gradient is +Inf (only the decay applies)
	}{{13, 24, 19, true, false}, {24, 9, 21, false, false}, {5, 8, 8, true, false}, {8, 8, 8, true, true}} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			count := c.rows * c.cols
			g := make([]float32, count)
			for e := range g {
				if host.SignLive(e, c.cols, c.rankCols, c.live) {
					g[e] = float32(rng.NormFloat64())
				}
			}
			if c.inf {
				g[3] = float32(math.Inf(1))
			}
			cfg := gpu.SignScoreConfig{Alpha: 20, Beta: 0.9, Seed: 7, Step: 3, Matrix: 5}
			var states [2][]uint32
			for run := range 2 {
				sc := newSignCase(t, d, rand.New(rand.NewPCG(1, 2)), c.rows, c.cols, c.live, c.rankCols)
				gb := must(d.UploadFloat32("g", g, count)).T(t)
				must(0, d.Run(func(r *gpu.Recorder) error { return gpu.SignScoreUpdate(r, sc.m, gb, cfg) })).T(t)
				states[run] = must(d.ReadUint32(sc.m.Scores)).T(t)
				_, got := sc.read(t, d)
				want := append([]int8(nil), sc.scores...)
				host.SignScoreUpdate(sc.bits, want, g, c.cols, c.rankCols, c.live, cfg.Alpha, cfg.Beta, cfg.Seed, cfg.Step, cfg.Matrix)
				off := 0
				for e := range got {
					if dv := int(got[e]) - int(want[e]); dv != 0 {
						off++
						if dv < -1 || dv > 1 {
							t.Errorf("score[%d] = %d, reference %d", e, got[e], want[e])
						}
					}
					if !host.SignLive(e, c.cols, c.rankCols, c.live) && got[e] != 0 {
						t.Errorf("padded score[%d] = %d", e, got[e])
					}
				}
				if off*100 > count {
					t.Errorf("%d of %d scores off by one", off, count)
				}
				gb.Release()
				sc.release()
			}
			for i := range states[0] {
				if states[0][i] != states[1][i] {
					t.Fatalf("score word %d differs between identical runs: %#x, %#x", i, states[0][i], states[1][i])
				}
			}
		})
	}
}

// TestSignFlip compares SignFlip with host.SignFlip bit for bit: the same bits XORed, the
// same scores reset, the flip count equal to the reference and within the budget, padded
// signs' bits and scores untouched; budgets that take none, some and all candidates.
func TestSignFlip(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(81, 82))
	counts := must(d.NewBuffer("counts", gpu.U32, 3)).T(t)
	defer counts.Release()
	for _, c := range []struct {
		rows, cols, live, tau, budget int
		rankCols, saturated           bool
	}{{13, 24, 19, 10, 40, true, false}, {24, 9, 21, 1, 0, false, false}, {40, 8, 5, 100, 1000, true, false},
		{16, 40, 16, 60, 17, false, false},
		// Every live score at 127, far more than the budget: the index buckets (2 signs each
		// at 8,000 signs) still flip part of the bin, within the budget.
		{80, 100, 70, 64, 11, false, true}} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			sc := newSignCase(t, d, rng, c.rows, c.cols, c.live, c.rankCols)
			defer sc.release()
			if c.saturated {
				for e := range sc.scores {
					if host.SignLive(e, c.cols, c.rankCols, c.live) {
						sc.scores[e] = 127
					}
				}
				must(0, d.WriteUint32(sc.m.Scores, scoresWords(sc.scores))).T(t)
			}
			must(0, d.Run(func(r *gpu.Recorder) error {
				return gpu.SignFlip(r, sc.m, counts, 1, gpu.SignFlipConfig{Tau: c.tau, Budget: c.budget})
			})).T(t)
			bits, scores := sc.read(t, d)
			wb := append([]byte(nil), sc.bits...)
			ws := append([]int8(nil), sc.scores...)
			n := host.SignFlip(wb, ws, c.cols, c.rankCols, c.live, c.tau, c.budget)
			got := must(d.ReadUint32(counts)).T(t)[1]
			if int(got) != n || n > c.budget {
				t.Errorf("flips = %d, reference %d, budget %d", got, n, c.budget)
			}
			flipped := 0
			for e := range scores {
				gb, ob := bits[e>>3]>>(e&7)&1, sc.bits[e>>3]>>(e&7)&1
				if gb != wb[e>>3]>>(e&7)&1 || scores[e] != ws[e] {
					t.Fatalf("sign %d: bit %d score %d, reference bit %d score %d", e, gb, scores[e], wb[e>>3]>>(e&7)&1, ws[e])
				}
				if gb != ob {
					flipped++
					if !host.SignLive(e, c.cols, c.rankCols, c.live) {
						t.Fatalf("padded sign %d flipped", e)
					}
				}
			}
			if flipped != n {
				t.Errorf("%d bits changed, %d flips reported", flipped, n)
			}
			if c.saturated && n == 0 {
				t.Errorf("a saturated bin larger than the budget flipped nothing")
			}
			t.Logf("%d flips", n)
		})
	}
}

// TestSignErrors: bad knobs and sizes are errors naming the value, nothing is recorded.
func TestSignErrors(t *testing.T) {
	d := gputest.Open(t)
	sc := newSignCase(t, d, rand.New(rand.NewPCG(1, 1)), 8, 8, 8, true)
	defer sc.release()
	g := must(d.NewBuffer("g", gpu.F32, 63)).T(t)
	defer g.Release()
	g64 := must(d.NewBuffer("g64", gpu.F32, 64)).T(t)
	defer g64.Release()
	counts := must(d.NewBuffer("counts", gpu.U32, 1)).T(t)
	defer counts.Release()
	bad := sc.m
	bad.Rows = 9
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"g size":   gpu.SignScoreUpdate(r, sc.m, g, gpu.SignScoreConfig{Alpha: 1, Beta: 0.5}),
		"beta":     gpu.SignScoreUpdate(r, sc.m, g64, gpu.SignScoreConfig{Alpha: 1, Beta: 2}),
		"shape":    gpu.SignFlip(r, bad, counts, 0, gpu.SignFlipConfig{Tau: 1, Budget: 1}),
		"tau":      gpu.SignFlip(r, sc.m, counts, 0, gpu.SignFlipConfig{Tau: 0, Budget: 1}),
		"budget":   gpu.SignFlip(r, sc.m, counts, 0, gpu.SignFlipConfig{Tau: 1, Budget: -1}),
		"index":    gpu.SignFlip(r, sc.m, counts, 1, gpu.SignFlipConfig{Tau: 1, Budget: 1}),
		"scores=g": gpu.SignFlip(r, sc.m, sc.m.Scores, 0, gpu.SignFlipConfig{Tau: 1, Budget: 1}),
	})
}
