package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// rowLanesCase is one kernel of the one-workgroup-per-row kind run on random inputs: run
// records it into fresh outputs and returns them read back.
type rowLanesCase struct {
	name string
	run  func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32
}

// TestRowLanesBitIdentical: every form of the row kernels gives the same bits — the workgroup
// form with one row a workgroup, with 4 and with 3 rows a workgroup (short rows' form on
// GPUs: the slots past the last row repeat it), and on CPU adapters the lanes form (one
// subgroup per row, red_lanes_sum) — on rows of n values below, at and above the 128-thread
// workgroup, not a multiple of the subgroup size, and row counts that leave a workgroup's
// last slots empty. The inputs are drawn once per case and size, so every form sees the same
// values.
func TestRowLanesBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	forms := []struct {
		name string
		set  func() func()
	}{
		{"workgroup, 1 row", func() func() { return both(gpu.SetRowLanes(false), gpu.SetRowGroupRows(1)) }},
		{"workgroup, 4 rows", func() func() { return both(gpu.SetRowLanes(false), gpu.SetRowGroupRows(4)) }},
		{"workgroup, 3 rows", func() func() { return both(gpu.SetRowLanes(false), gpu.SetRowGroupRows(3)) }},
	}
	if d.Info().SubgroupSize > 0 {
		forms = append(forms, struct {
			name string
			set  func() func()
		}{"lanes", func() func() { return gpu.SetRowLanes(true) }})
	}
	for _, c := range rowLanesCases {
		for _, sz := range [][2]int{{5, 3}, {7, 128}, {9, 333}, {3, 1000}} {
			rows, n := sz[0], sz[1]
			t.Run(fmt.Sprintf("%s/rows=%d n=%d", c.name, rows, n), func(t *testing.T) {
				got := make([][][]float32, len(forms))
				for i, f := range forms {
					restore := f.set()
					got[i] = c.run(t, d, rand.New(rand.NewPCG(uint64(rows), uint64(n))), rows, n)
					restore()
				}
				for i := range forms[1:] {
					if len(got[0]) == 0 || len(got[0]) != len(got[i+1]) {
						t.Fatalf("%d and %d outputs", len(got[0]), len(got[i+1]))
					}
					for j := range got[0] {
						sameBits(t, fmt.Sprintf("%s: output %d", forms[i+1].name, j), got[i+1][j], got[0][j])
					}
				}
			})
		}
	}
}

// both returns a function calling b, then a (restores in reverse order).
func both(a, b func()) func() { return func() { b(); a() } }

// upload returns an F32 buffer of random values (scale s) released at the test's end.
func upload(t *testing.T, d *gpu.Device, rng *rand.Rand, s float64, shape ...int) *gpu.Buffer {
	t.Helper()
	n := 1
	for _, x := range shape {
		n *= x
	}
	v, _ := randF32(rng, n, s)
	b := must(d.UploadFloat32("in", v, shape...)).T(t)
	t.Cleanup(b.Release)
	return b
}

// readAll reads F32 buffers back.
func readAll(t *testing.T, d *gpu.Device, bufs ...*gpu.Buffer) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, b := range bufs {
		out = append(out, must(d.ReadFloat32(b)).T(t))
	}
	return out
}

var rowLanesCases = []rowLanesCase{
	{"RMSNormBackward", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		x, w, dy := upload(t, d, rng, 3, rows, n), upload(t, d, rng, 0.5, n), upload(t, d, rng, 1, rows, n)
		dx, dw := upload(t, d, rng, 1, rows, n), upload(t, d, rng, 1, n)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.RMSNormBackward(r, x, w, dy, dx, dw, rows, n, 1e-6, true) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, dx, dw)
	}},
	{"GatedRMSNormBackward", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		const hv = 2
		x, z, w := upload(t, d, rng, 2, rows, hv, n), upload(t, d, rng, 2, rows, hv, n), upload(t, d, rng, 1, n)
		dy, dx, dz, dw := upload(t, d, rng, 1, rows, hv, n), upload(t, d, rng, 1, rows, hv, n), upload(t, d, rng, 1, rows, hv, n), upload(t, d, rng, 1, n)
		if err := d.Run(func(r *gpu.Recorder) error {
			return gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, dw, rows, hv, n, 1e-6)
		}); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, dx, dz, dw)
	}},
	{"L2NormBackward", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		x, dy, dx := upload(t, d, rng, 1, rows, n), upload(t, d, rng, 1, rows, n), upload(t, d, rng, 1, rows, n)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.L2NormBackward(r, x, dy, dx, rows, n, 0.7) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, dx)
	}},
	{"QKNormRoPEBackward", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		const heads = 3
		dims := qkDims(rows, heads, n)
		n = dims.HeadDim
		x, w, dy := upload(t, d, rng, 2, rows, heads, n), upload(t, d, rng, 0.5, n), upload(t, d, rng, 1, rows, heads, n)
		dx, dw := upload(t, d, rng, 1, rows, heads, n), upload(t, d, rng, 1, n)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.QKNormRoPEBackward(r, x, w, dy, dx, dw, dims) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, dx, dw)
	}},
	{"HiddenLoss", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		hs, ht, dh := upload(t, d, rng, 2, rows, n), upload(t, d, rng, 2, rows, n), upload(t, d, rng, 1, rows, n)
		loss := upload(t, d, rng, 1, 2*rows)
		dims := gpu.HiddenLossDims{Rows: rows, Hidden: n}
		if err := d.Run(func(r *gpu.Recorder) error {
			if err := gpu.HiddenLoss(r, hs, ht, dh, loss, dims, gpu.HiddenMSE, 0.3); err != nil {
				return err
			}
			dims.Offset = rows
			return gpu.HiddenLoss(r, hs, ht, dh, loss, dims, gpu.HiddenCosine, 0.7)
		}); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, dh, loss)
	}},
	{"RMSNorm", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		x, w, y := upload(t, d, rng, 3, rows, n), upload(t, d, rng, 0.5, n), upload(t, d, rng, 1, rows, n)
		y2 := upload(t, d, rng, 1, rows, n)
		if err := d.Run(func(r *gpu.Recorder) error {
			if err := gpu.RMSNorm(r, x, w, y, rows, n, 1e-6, true); err != nil {
				return err
			}
			return gpu.RMSNorm(r, x, w, y2, rows, n, 1e-6, false)
		}); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, y, y2)
	}},
	{"GatedRMSNorm", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		const hv = 2
		x, z, w, y := upload(t, d, rng, 2, rows, hv, n), upload(t, d, rng, 2, rows, hv, n), upload(t, d, rng, 1, n), upload(t, d, rng, 1, rows, hv, n)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.GatedRMSNorm(r, x, z, w, y, rows, hv, n, 1e-6) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, y)
	}},
	{"L2Norm", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		x, y := upload(t, d, rng, 1, rows, n), upload(t, d, rng, 1, rows, n)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.L2Norm(r, x, y, rows, n, 0.7) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, y)
	}},
	{"QKNormRoPE", func(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int) [][]float32 {
		const heads = 3
		dims := qkDims(rows, heads, n)
		x, w, y := upload(t, d, rng, 2, rows, heads, dims.HeadDim), upload(t, d, rng, 0.5, dims.HeadDim), upload(t, d, rng, 1, rows, heads, dims.HeadDim)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.QKNormRoPE(r, x, w, y, dims) }); err != nil {
			t.Fatal(err)
		}
		return readAll(t, d, y)
	}},
}

// qkDims is a QKNormRoPE geometry of one window of rows tokens with head dim n (made even)
// and about half of it rotary.
func qkDims(rows, heads, n int) gpu.QKNormRoPEDims {
	n += n % 2
	return gpu.QKNormRoPEDims{Rows: rows, Heads: heads, HeadDim: n, Eps: 1e-6, Rot: max(2, n/2&^1), Theta: 1e4, T: rows}
}

// TestCausalConvRunsBitIdentical: the run form of CausalConv1dSiLU and its backward (RB
// tokens of one channel per invocation, taps by a sliding register window) gives the
// per-element form's bits, on windows shorter than, equal to and longer than a run (t = 5,
// 16, 37), with 2 and 4 taps.
func TestCausalConvRunsBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	for _, c := range []struct{ nb, t, ch, k int }{{2, 5, 7, 4}, {3, 16, 33, 4}, {2, 37, 20, 4}, {1, 37, 9, 2}} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			var got [2][][]float32
			for i, runs := range []bool{false, true} {
				rng := rand.New(rand.NewPCG(uint64(c.t), uint64(c.ch)))
				n := c.nb * c.t * c.ch
				x, w, dy := upload(t, d, rng, 2, n), upload(t, d, rng, 1, c.ch*c.k), upload(t, d, rng, 1, n)
				y, dx := upload(t, d, rng, 1, n), upload(t, d, rng, 1, n)
				restore := gpu.SetCausalConvRuns(runs)
				err := d.Run(func(r *gpu.Recorder) error {
					if err := gpu.CausalConv1dSiLU(r, x, w, y, c.nb, c.t, c.ch, c.k); err != nil {
						return err
					}
					return gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, c.nb, c.t, c.ch, c.k)
				})
				restore()
				if err != nil {
					t.Fatal(err)
				}
				got[i] = readAll(t, d, y, dx)
			}
			sameBits(t, "y", got[0][0], got[1][0])
			sameBits(t, "dx", got[0][1], got[1][1])
		})
	}
}
