package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// sameBits fails t at the first element where a and b differ in their bits.
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Errorf("%s: element %d: %g (%#08x) and %g (%#08x) differ", what, i, a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
			return
		}
	}
}

// runBoth runs f under the tiled 64×64×16 GEMM (what CPU adapters ran before the
// lane-blocked kernel) and under the lane-blocked one, and returns what read gives after
// each; the lane-blocked run must record wantLanes GEMMs (all of f's).
func runBoth(t *testing.T, d *gpu.Device, wantLanes int, f func(r *gpu.Recorder) error, read func() [][]float32) (tiled, lanes [][]float32) {
	t.Helper()
	for _, v := range []gemmTestVariant{{bm: 64, bn: 64, bk: 16}, lanesVariant} {
		restore := v.force()
		n0 := gpu.GEMMLanesDispatches()
		err := d.Run(f)
		restore()
		if err != nil {
			t.Fatal(err)
		}
		if got := gpu.GEMMLanesDispatches() - n0; v.lanes && got != wantLanes {
			t.Fatalf("%d lane-blocked GEMMs recorded, want %d", got, wantLanes)
		}
		if v.lanes {
			lanes = read()
		} else {
			tiled = read()
		}
	}
	return tiled, lanes
}

// TestGEMMLanesBitIdentical: the lane-blocked GEMMs give the tiled kernels' results bit for
// bit (both compute each output as one fma chain in K order from the same f32 operands), for
// every product the models run: Linear, LinearT, MatMul in both layouts, and the BLR stages
// of BLRForward and BLRBackward (t1, y with ScaleC and Accum and the kept c, c, dt2, dxg).
func TestGEMMLanesBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	skipNoLanes(t, d)
	rng := rand.New(rand.NewPCG(31, 32))
	for _, sz := range [][3]int{{67, 132, 76}, {130, 256, 768}, {3, 36, 20}, {9, 128, 4112}} {
		rows, in, out := sz[0], sz[1], sz[2]
		t.Run(fmt.Sprintf("Linear/%dx%dx%d", rows, in, out), func(t *testing.T) {
			x, _ := randUpload(t, d, rng, "x", 1, rows, in)
			w, _ := randUploadF16(t, d, rng, "W", 1, out, in)
			w32, _ := randUpload(t, d, rng, "W32", 1, out, in)
			dy, _ := randUpload(t, d, rng, "dy", 1, rows, out)
			y := must(d.NewBuffer("y", gpu.F32, rows, out)).T(t)
			y32 := must(d.NewBuffer("y32", gpu.F32, rows, out)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, rows, in)).T(t)
			dx32 := must(d.NewBuffer("dx32", gpu.F32, rows, in)).T(t)
			for _, b := range []*gpu.Buffer{y, y32, dx, dx32} {
				defer b.Release()
			}
			tiled, lanes := runBoth(t, d, 4, func(r *gpu.Recorder) error {
				for _, err := range []error{
					gpu.Linear(r, x, w, y, rows, in, out), gpu.LinearT(r, dy, w, dx, rows, in, out),
					gpu.MatMul(r, x, w32, y32, rows, in, out, true), gpu.MatMul(r, dy, w32, dx32, rows, out, in, false),
				} {
					if err != nil {
						return err
					}
				}
				return nil
			}, func() [][]float32 {
				var v [][]float32
				for _, b := range []*gpu.Buffer{y, dx, y32, dx32} {
					v = append(v, must(d.ReadFloat32(b)).T(t))
				}
				return v
			})
			for i, what := range []string{"Linear", "LinearT", "MatMul transB", "MatMul"} {
				sameBits(t, what, tiled[i], lanes[i])
			}
		})
	}
	// 300 rows of 768: several windows per column reduction of the backward on CPU adapters
	// (gpu.TestGradColDot), the "dot" stage's two chunks on GPUs.
	// The ranks cover every chunk of the transposed sign loads (blrChunk: y's k = r): 96 → 32
	// signs per load, 48 → 16, 24 and 8 → 8.
	for _, c := range []struct{ rows, m, n, r, paths, live int }{{37, 68, 56, 24, 2, 20}, {64, 256, 256, 96, 2, 90}, {5, 12, 8, 8, 1, 8}, {300, 768, 768, 96, 2, 90},
		{70, 136, 256, 48, 2, 40}} {
		t.Run(fmt.Sprintf("BLR/%+v", c), func(t *testing.T) {
			w := randBLR(rng, c.m, c.n, c.r, c.paths, c.live)
			l := uploadBLR(t, d, w, c.live)
			defer l.Release()
			xf, _ := randF32(rng, c.rows*c.n, 1)
			dyf, _ := randF32(rng, c.rows*c.m, 1)
			x := must(d.UploadFloat32("x", xf, c.rows, c.n)).T(t)
			dy := must(d.UploadFloat32("dy", dyf, c.rows, c.m)).T(t)
			y := must(d.NewBuffer("y", gpu.F32, c.rows, c.m)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, c.rows, c.n)).T(t)
			bufs := []*gpu.Buffer{x, dy, y, dx}
			var kept gpu.BLRKept
			grads := make([]gpu.BLRGrad, c.paths)
			for p := range grads {
				kept.T1 = append(kept.T1, must(d.NewBuffer("t1", gpu.F32, c.rows, c.r)).T(t))
				kept.C = append(kept.C, must(d.NewBuffer("c", gpu.F32, c.rows, c.m)).T(t))
				grads[p] = gpu.BLRGrad{H: must(d.NewBuffer("dh", gpu.F32, c.m)).T(t),
					L: must(d.NewBuffer("dl", gpu.F32, c.r)).T(t), G: must(d.NewBuffer("dg", gpu.F32, c.n)).T(t)}
				bufs = append(bufs, kept.T1[p], kept.C[p], grads[p].H, grads[p].L, grads[p].G)
			}
			defer func() {
				for _, b := range bufs {
					b.Release()
				}
			}()
			tiled, lanes := runBoth(t, d, 6*c.paths, func(r *gpu.Recorder) error {
				for p := range grads {
					for _, b := range []*gpu.Buffer{grads[p].H, grads[p].L, grads[p].G} {
						if err := gpu.Zero(r, b); err != nil {
							return err
						}
					}
				}
				if err := gpu.BLRForward(r, l, x, y, kept, c.rows); err != nil {
					return err
				}
				return gpu.BLRBackward(r, l, x, gpu.BLRKept{}, dy, dx, grads, c.rows) // t1 and c recomputed
			}, func() [][]float32 {
				var v [][]float32
				for _, b := range bufs[2:] {
					v = append(v, must(d.ReadFloat32(b)).T(t))
				}
				return v
			})
			for i, b := range bufs[2:] {
				sameBits(t, b.Label(), tiled[i], lanes[i])
			}
		})
	}
}
