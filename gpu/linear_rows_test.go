package gpu_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// gemmOperands uploads a random x F32 [rows, in] and W F16 [out, in] (entries in [-1, 1),
// from a PCG seeded with seed) and makes y F32 [rows, out]; all three are released when the
// test ends.
func gemmOperands(t testing.TB, d *gpu.Device, seed uint64, rows, in, out int) (x, w, y *gpu.Buffer) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	xf, _ := randF32(rng, rows*in, 1)
	wb, _ := randF16(rng, out*in, 1)
	x = must(d.UploadFloat32("x", xf, rows, in)).T(t)
	w = must(d.UploadF16("W", wb, out, in)).T(t)
	y = must(d.NewBuffer("y", gpu.F32, rows, out)).T(t)
	t.Cleanup(func() {
		for _, b := range []*gpu.Buffer{x, w, y} {
			b.Release()
		}
	})
	return x, w, y
}

// TestLinearRows applies a [300, 45] f16 W (odd K: blocks start and end inside a u32 word)
// in row blocks [0, 128), [128, 256), [256, 300) and checks each block equals Linear's
// columns bit for bit (the same kernel sums each output in K order; Linear itself is checked
// against the f64 host in TestLinearFamily). Also: misaligned or out-of-range blocks, a wrong
// output size and an invalid SetMaxStorageBindingSize are refused before anything is recorded.
func TestLinearRows(t *testing.T) {
	d := gputest.Open(t)
	const rows, in, out = 67, 45, 300
	x, w, y := gemmOperands(t, d, 17, rows, in, out)
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.Linear(r, x, w, y, rows, in, out) }); err != nil {
		t.Fatal(err)
	}
	full := must(d.ReadFloat32(y)).T(t)
	for o0 := 0; o0 < out; o0 += 128 {
		n := min(128, out-o0)
		yb := must(d.NewBuffer("y block", gpu.F32, rows, n)).T(t)
		err := d.Run(func(r *gpu.Recorder) error { return gpu.LinearRows(r, x, w, yb, rows, in, out, o0, n) })
		if err != nil {
			t.Fatal(err)
		}
		got := must(d.ReadFloat32(yb)).T(t)
		yb.Release()
		for r := range rows {
			for j := range n {
				if g, want := got[r*n+j], full[r*out+o0+j]; g != want {
					t.Fatalf("rows [%d, %d): y[%d, %d] = %g, Linear gives %g", o0, o0+n, r, o0+j, g, want)
				}
			}
		}
	}
	yb := must(d.NewBuffer("y block", gpu.F32, rows, 44)).T(t)
	defer yb.Release()
	for _, c := range []struct {
		name   string
		o0, n  int
		y      *gpu.Buffer
		substr string
	}{
		{"misaligned", 1, 44, yb, "storage alignment"},
		{"past the end", 256, 45, yb, "outside its 300 rows"},
		{"negative", -128, 44, yb, "outside"},
		{"wrong output", 256, 44, y, "output"},
	} {
		r := d.Begin()
		err := gpu.LinearRows(r, x, w, c.y, rows, in, out, c.o0, c.n)
		r.Discard()
		if err == nil || !strings.Contains(err.Error(), c.substr) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.substr)
		}
	}
	if err := d.SetMaxStorageBindingSize(d.Info().MaxStorageBindingSize + d.StorageAlign()); err == nil {
		t.Error("SetMaxStorageBindingSize above the device's limit was accepted")
	}
}
