package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestCausalConv1dSiLU: the pre-activation s is a sum of K = 4 f32 products, so
// |δs| ≤ (K+1)·u·Σ|w·x| ≤ 5·u·K·0.5·2 = 20u (|w| ≤ 0.5, |x| ≤ 2); silu' ≤ 1.1 carries it to
// ≤ 22u absolute. silu itself (one exp ≤ 3 + 2|s| ulp, a division, a product) adds a relative
// (8 + 2|s|)·2u ≤ 32u for |s| ≤ 4. Checked as atol 24u, rtol 40u. Windows of t = 37 and of
// t = 2 < K (every tap of the second token's left context crosses the window start), an odd
// channel count, and a poisoned previous window: any leak across the boundary would be huge.
func TestCausalConv1dSiLU(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(11, 12))
	const K = 4
	for _, tc := range []struct{ nb, t, c int }{{2, 37, 301}, {3, 2, 5}, {1, 1, 7}} {
		n := tc.nb * tc.t * tc.c
		xf, xd := randF32(rng, n, 2)
		wf, wd := randF32(rng, tc.c*K, 0.5)
		x := must(d.UploadFloat32("x", xf, tc.nb*tc.t, tc.c)).T(t)
		w := must(d.UploadFloat32("w", wf, tc.c, 1, K)).T(t)
		y := must(d.NewBuffer("y", gpu.F32, tc.nb*tc.t, tc.c)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.CausalConv1dSiLU(r, x, w, y, tc.nb, tc.t, tc.c, K) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.CausalConv1dSiLU(xd, tc.nb, tc.t, tc.c, wd, K)).T(t)
		checkClose(t, "CausalConv1dSiLU", must(d.ReadFloat32(y)).T(t), want, 24*u32, 40*u32)
		x.Release()
		w.Release()
		y.Release()
	}

	// Leak check: window 0 holds 1e4, window 1 small values; window 1's outputs must match
	// the host (which pads with zeros) to the same tolerance.
	nb, tt, c := 2, 5, 3
	xf := make([]float32, nb*tt*c)
	xd := make([]float64, len(xf))
	for i := range xf {
		if i < tt*c {
			xf[i] = 1e4
		} else {
			xf[i] = float32(i%5) * 0.25
		}
		xd[i] = float64(xf[i])
	}
	wf, wd := randF32(rng, c*K, 0.5)
	x := must(d.UploadFloat32("x", xf, nb*tt, c)).T(t)
	w := must(d.UploadFloat32("w", wf, c*K)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, nb*tt, c)).T(t)
	defer x.Release()
	defer w.Release()
	defer y.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.CausalConv1dSiLU(r, x, w, y, nb, tt, c, K) }); err != nil {
		t.Fatal(err)
	}
	want := must(host.CausalConv1dSiLU(xd, nb, tt, c, wd, K)).T(t)
	checkClose(t, "CausalConv1dSiLU window 1", must(d.ReadFloat32(y)).T(t)[tt*c:], want[tt*c:], 24*u32, 40*u32)

	r := d.Begin()
	if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, tt+1, c, K); err == nil {
		t.Error("wrong t accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, tt, c, K+1); err == nil {
		t.Error("w of the wrong length accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, x, nb, tt, c, K); err == nil {
		t.Error("in-place y accepted")
	}
	if err := gpu.CausalConv1dSiLU(r, x, w, y, 0, tt, c, K); err == nil {
		t.Error("nb = 0 accepted")
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
	r.Discard()
}

// TestCausalConvSplitBitIdentical: CausalConv1dSiLUSplit writes, and
// CausalConv1dSiLUBackwardSplit reads, the conv's channels as 1, 2 or 3 column blocks in
// their own buffers with the bits of the whole-matrix launchers, in both kernel forms (the
// per-element form and the run form), on blocks that split a 32-lane group and a block of
// one column; bad blocks are refused before anything is recorded.
func TestCausalConvSplitBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	const nb, tt, K = 2, 37, 4
	for _, cols := range [][]int{{45}, {20, 25}, {16, 28, 1}, {1, 40, 4}} {
		for _, runs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/runs=%v", cols, runs), func(t *testing.T) {
				defer gpu.SetCausalConvRuns(runs)()
				c := 0
				for _, n := range cols {
					c += n
				}
				rng := rand.New(rand.NewPCG(uint64(c), uint64(len(cols))))
				rows := nb * tt
				x, w, dy := upload(t, d, rng, 2, rows, c), upload(t, d, rng, 0.5, c*K), upload(t, d, rng, 1, rows, c)
				y, dx, dxs := upload(t, d, rng, 1, rows, c), upload(t, d, rng, 1, rows, c), upload(t, d, rng, 1, rows, c)
				// The blocks of dy, cut on the host from the whole dy, and those of y.
				dyHost := must(d.ReadFloat32(dy)).T(t)
				var ys, dys []gpu.ColumnBlock
				off := 0
				for _, n := range cols {
					part := make([]float32, rows*n)
					for r := range rows {
						copy(part[r*n:(r+1)*n], dyHost[r*c+off:r*c+off+n])
					}
					b := must(d.UploadFloat32("dy block", part, rows, n)).T(t)
					t.Cleanup(b.Release)
					dys = append(dys, gpu.ColumnBlock{Buf: b, Cols: n})
					ys = append(ys, gpu.ColumnBlock{Buf: upload(t, d, rng, 1, rows, n), Cols: n})
					off += n
				}
				err := d.Run(func(r *gpu.Recorder) error {
					if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, tt, c, K); err != nil {
						return err
					}
					if err := gpu.CausalConv1dSiLUSplit(r, x, w, ys, nb, tt, K); err != nil {
						return err
					}
					if err := gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, nb, tt, c, K); err != nil {
						return err
					}
					return gpu.CausalConv1dSiLUBackwardSplit(r, x, w, dys, dxs, nb, tt, K)
				})
				if err != nil {
					t.Fatal(err)
				}
				whole := must(d.ReadFloat32(y)).T(t)
				off = 0
				for i, b := range ys {
					got := must(d.ReadFloat32(b.Buf)).T(t)
					want := make([]float32, rows*b.Cols)
					for r := range rows {
						copy(want[r*b.Cols:(r+1)*b.Cols], whole[r*c+off:r*c+off+b.Cols])
					}
					sameBits(t, fmt.Sprintf("y block %d", i), got, want)
					off += b.Cols
				}
				sameBits(t, "dx", must(d.ReadFloat32(dxs)).T(t), must(d.ReadFloat32(dx)).T(t))
			})
		}
	}

	// Bad blocks.
	rng := rand.New(rand.NewPCG(1, 2))
	x, w := upload(t, d, rng, 1, 4, 6), upload(t, d, rng, 1, 6*K)
	a, b, dx := upload(t, d, rng, 1, 4, 2), upload(t, d, rng, 1, 4, 4), upload(t, d, rng, 1, 4, 6)
	r := d.Begin()
	for name, blocks := range map[string][]gpu.ColumnBlock{
		"no blocks":          nil,
		"four blocks":        {{a, 2}, {a, 1}, {b, 2}, {b, 1}},
		"a block of 0":       {{a, 2}, {b, 0}, {b, 4}},
		"a short buffer":     {{a, 2}, {a, 4}},
		"one buffer twice":   {{a, 2}, {a, 2}, {a, 2}},
		"a block aliasing x": {{x, 6}},
	} {
		if err := gpu.CausalConv1dSiLUSplit(r, x, w, blocks, 1, 4, K); err == nil {
			t.Errorf("forward: %s accepted", name)
		}
		if err := gpu.CausalConv1dSiLUBackwardSplit(r, x, w, blocks, dx, 1, 4, K); err == nil {
			t.Errorf("backward: %s accepted", name)
		}
	}
	if err := gpu.CausalConv1dSiLUBackwardSplit(r, x, w, []gpu.ColumnBlock{{dx, 6}}, dx, 1, 4, K); err == nil {
		t.Error("backward: a block aliasing dx accepted")
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
}
