package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestColumnCopy splits a [rows, 3+5+7] matrix into its three column blocks and assembles
// them back into a fresh matrix: a copy, so both must match exactly (tolerance zero), and
// the columns a call does not cover keep their values.
func TestColumnCopy(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(5, 6))
	rows, widths := 37, []int{3, 5, 7}
	C := 15
	f, fd := randF32(rng, rows*C, 2)
	src := must(d.UploadFloat32("src", f, rows, C)).T(t)
	defer src.Release()
	var parts []*gpu.Buffer
	for _, w := range widths {
		b := must(d.NewBuffer("part", gpu.F32, rows, w)).T(t)
		defer b.Release()
		parts = append(parts, b)
	}
	fill := make([]float32, rows*C)
	for i := range fill {
		fill[i] = -7
	}
	back := must(d.UploadFloat32("back", fill, rows, C)).T(t)
	defer back.Release()
	err := d.Run(func(r *gpu.Recorder) error {
		off := 0
		for i, w := range widths {
			if err := gpu.ColumnCopy(r, src, parts[i], rows, C, off, w, 0, w); err != nil {
				return err
			}
			off += w
		}
		// Assemble only the first and last blocks: the middle columns stay −7.
		if err := gpu.ColumnCopy(r, parts[0], back, rows, 3, 0, C, 0, 3); err != nil {
			return err
		}
		return gpu.ColumnCopy(r, parts[2], back, rows, 7, 0, C, 8, 7)
	})
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for i, w := range widths {
		want := make([]float64, rows*w)
		for row := 0; row < rows; row++ {
			for j := 0; j < w; j++ {
				want[row*w+j] = fd[row*C+off+j]
			}
		}
		checkClose(t, "ColumnCopy split", must(d.ReadFloat32(parts[i])).T(t), want, 0, 0)
		off += w
	}
	want := make([]float64, rows*C)
	for row := 0; row < rows; row++ {
		for j := 0; j < C; j++ {
			want[row*C+j] = fd[row*C+j]
			if j >= 3 && j < 8 {
				want[row*C+j] = -7
			}
		}
	}
	checkClose(t, "ColumnCopy assemble", must(d.ReadFloat32(back)).T(t), want, 0, 0)
	r := d.Begin()
	defer r.Discard()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"block beyond src", gpu.ColumnCopy(r, src, parts[0], rows, C, 13, 3, 0, 3)},
		{"block beyond dst", gpu.ColumnCopy(r, src, parts[0], rows, C, 0, 3, 1, 3)},
		{"negative offset", gpu.ColumnCopy(r, src, parts[0], rows, C, -1, 3, 0, 3)},
		{"wrong rows", gpu.ColumnCopy(r, src, parts[0], rows+1, C, 0, 3, 0, 3)},
		{"aliased", gpu.ColumnCopy(r, src, src, rows, C, 0, C, 0, 3)},
		{"zero n", gpu.ColumnCopy(r, src, parts[0], rows, C, 0, 3, 0, 0)},
	} {
		if c.err == nil {
			t.Errorf("%s accepted", c.name)
		}
	}
	if r.Len() != 0 {
		t.Errorf("rejected calls recorded %d dispatches", r.Len())
	}
}
