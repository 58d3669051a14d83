package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestBLRBackwardReduceBatch: with the column reductions in stage "dot4" (GPUs' form, forced
// here) and one pass per path (GPUs' way), BLRBackward's second stages of dh, dℓ and dg run
// batched into one dispatch at its end: it matches host.BLRLinearBackward within
// TestBLRBackward's bound (masked dℓ exactly 0), gives the same bits as one second-stage
// dispatch per reduction (SetColReduceBatch off), and records 3·paths − 1 fewer dispatches
// where the device's storage bindings take every segment in one dispatch; with the bindings
// capped at 5 the segments split over several dispatches, the same bits again. The cases
// have several row chunks (a second stage), one and two paths, and rank padding.
func TestBLRBackwardReduceBatch(t *testing.T) {
	d := gputest.Open(t)
	defer gpu.SetColDotForm("dot4")()
	defer gpu.SetPathPairs(false)()
	rng := rand.New(rand.NewPCG(61, 62))
	for _, c := range []struct{ rows, m, n, r, paths, live int }{
		{300, 132, 200, 72, 2, 66},
		{37, 20, 24, 8, 1, 5},
		{150, 68, 56, 24, 2, 24},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			t.Run("host", func(t *testing.T) {
				testBLRBackward(t, d, rng, c.rows, c.m, c.n, c.r, c.paths, c.live, false, 0)
			})
			o := newBLROperands(t, d, rng, c.rows, c.m, c.n, c.r, c.paths, c.live)
			run := func(batch bool) (out [][]float32, dispatches int) {
				defer gpu.SetColReduceBatch(batch)()
				dx := o.keep(must(d.NewBuffer("dx", gpu.F32, c.rows, c.n)).T(t))
				grads := make([]gpu.BLRGrad, c.paths)
				var bufs []*gpu.Buffer
				for p := range grads {
					grads[p] = gpu.BLRGrad{H: o.keep(must(d.NewBuffer("dh", gpu.F32, c.m)).T(t)),
						L: o.keep(must(d.NewBuffer("dl", gpu.F32, c.r)).T(t)), G: o.keep(must(d.NewBuffer("dg", gpu.F32, c.n)).T(t))}
					bufs = append(bufs, grads[p].H, grads[p].L, grads[p].G)
				}
				if err := d.Run(func(r *gpu.Recorder) error {
					n0 := r.Len()
					err := gpu.BLRBackward(r, o.l, o.x, gpu.BLRKept{}, o.dy, dx, grads, c.rows)
					dispatches = r.Len() - n0
					return err
				}); err != nil {
					t.Fatal(err)
				}
				for _, b := range append(bufs, dx) {
					out = append(out, must(d.ReadFloat32(b)).T(t))
				}
				return out, dispatches
			}
			each, nEach := run(false)
			batched, nBatched := run(true)
			sameBits := func(what string, got [][]float32) {
				t.Helper()
				for i := range each {
					for e := range each[i] {
						if math.Float32bits(each[i][e]) != math.Float32bits(got[i][e]) {
							t.Fatalf("%s: output %d element %d: %g, one dispatch per reduction %g", what, i, e, got[i][e], each[i][e])
						}
					}
				}
			}
			sameBits("batched", batched)
			if c.paths == 2 { // 5 storage bindings a dispatch: the 6 segments (8 bindings a path) split
				restore := gpu.SetColReduceLimit(5)
				split, nSplit := run(true)
				restore()
				sameBits("batched under 5 bindings", split)
				if nSplit <= nBatched || nSplit >= nEach {
					t.Errorf("%d dispatches batched under 5 bindings, want more than %d (unlimited) and fewer than %d", nSplit, nBatched, nEach)
				}
			}
			t.Logf("%d dispatches batched, %d one second stage per reduction; %d storage bindings a stage", nBatched, nEach, gpu.MaxStorageBuffersPerStage(d))
			if gpu.MaxStorageBuffersPerStage(d) >= 7*c.paths {
				if want := nEach - (3*c.paths - 1); nBatched != want {
					t.Errorf("%d dispatches batched, want %d (%d with one second stage per reduction)", nBatched, want, nEach)
				}
			} else if nBatched >= nEach {
				t.Errorf("%d dispatches batched, not fewer than %d", nBatched, nEach)
			}
		})
	}
}
