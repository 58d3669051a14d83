package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestTranspose checks Transpose bit for bit against the host loop on square, wide, tall and
// odd shapes.
func TestTranspose(t *testing.T) {
	d := gputest.Open(t)
	for _, s := range [][2]int{{1, 1}, {3, 5}, {64, 64}, {257, 33}, {7, 300}} {
		rows, cols := s[0], s[1]
		xf, _ := randF32(rand.New(rand.NewPCG(uint64(rows), uint64(cols))), rows*cols, 1)
		x := must(d.UploadFloat32("x", xf, rows, cols)).T(t)
		y := must(d.NewBuffer("y", gpu.F32, cols, rows)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.Transpose(r, x, y, rows, cols) }); err != nil {
			t.Fatal(err)
		}
		got := must(d.ReadFloat32(y)).T(t)
		for j := 0; j < cols; j++ {
			for i := 0; i < rows; i++ {
				if math.Float32bits(got[j*rows+i]) != math.Float32bits(xf[i*cols+j]) {
					t.Fatalf("%d×%d: y[%d, %d] = %g, want x[%d, %d] = %g", rows, cols, j, i, got[j*rows+i], i, j, xf[i*cols+j])
				}
			}
		}
		x.Release()
		y.Release()
	}
}

// TestColumnSumSquaresGram checks ColumnSumSquares and Gram against float64 sums over the
// first rows rows of x, on buffers that hold more (padding) rows, on shapes that take the
// column reduction's window, "dot4" and "dot" forms (n not a multiple of 4: "dot" only) and the
// GEMM's lane, tiled and general forms. ColumnSumSquares adds to a nonzero out; Gram must be
// symmetric bit for bit.
func TestColumnSumSquaresGram(t *testing.T) {
	d := gputest.Open(t)
	shapes := [][3]int{{1, 8, 1}, {5, 12, 7}, {37, 128, 40}, {300, 64, 300}, {256, 257, 260}, {513, 96, 520}}
	variants := []struct {
		name    string
		restore func() func()
	}{
		{"default", func() func() { return func() {} }},
		{"colDot dot4 stage", func() func() { return gpu.SetColDotForm("dot4") }},
		{"colDot dot stage, GEMM tile 64×64 general", func() func() {
			a, b := gpu.SetColDotForm("dot"), gpu.SetGEMMVariant(64, 64, 16, true)
			return func() { b(); a() }
		}},
	}
	for _, v := range variants {
		for _, s := range shapes {
			rows, n, held := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%d×%d of %d", v.name, rows, n, held), func(t *testing.T) {
				defer v.restore()()
				checkColumnSumSquaresGram(t, d, rows, n, held)
			})
		}
	}
}

func checkColumnSumSquaresGram(t *testing.T, d *gpu.Device, rows, n, held int) {
	rng := rand.New(rand.NewPCG(uint64(rows), uint64(n)))
	xf, xd := randF32(rng, held*n, 2)
	of, od := randF32(rng, n, 1)
	x := must(d.UploadFloat32("x", xf, held, n)).T(t)
	defer x.Release()
	out := must(d.UploadFloat32("out", of, n)).T(t)
	defer out.Release()
	gram := must(d.NewBuffer("gram", gpu.F32, n, n)).T(t)
	defer gram.Release()
	if err := d.Run(func(r *gpu.Recorder) error {
		if err := gpu.ColumnSumSquares(r, x, out, rows, n); err != nil {
			return err
		}
		return gpu.Gram(r, x, gram, rows, n)
	}); err != nil {
		t.Fatal(err)
	}
	// float64 sums; every term of a diagonal is positive, so the f32 sums are within
	// rows·2⁻²³ of Σ|terms| (the bound used below for every entry).
	eps := float64(rows+2) * 0x1p-23
	sums := must(d.ReadFloat32(out)).T(t)
	for j := 0; j < n; j++ {
		want, mag := od[j], math.Abs(od[j])
		for i := 0; i < rows; i++ {
			want += xd[i*n+j] * xd[i*n+j]
			mag += xd[i*n+j] * xd[i*n+j]
		}
		if e := math.Abs(float64(sums[j]) - want); !(e <= eps*mag) {
			t.Fatalf("sum of squares %d = %g, want %g (|err| %.3g > %.3g)", j, sums[j], want, e, eps*mag)
		}
	}
	g := must(d.ReadFloat32(gram)).T(t)
	worst := 0.0
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			var want, mag float64
			for i := 0; i < rows; i++ {
				want += xd[i*n+a] * xd[i*n+b]
				mag += math.Abs(xd[i*n+a] * xd[i*n+b])
			}
			e := math.Abs(float64(g[a*n+b]) - want)
			if !(e <= eps*mag) {
				t.Fatalf("Gram[%d, %d] = %g, want %g (|err| %.3g > %.3g)", a, b, g[a*n+b], want, e, eps*mag)
			}
			worst = math.Max(worst, e/mag)
			if math.Float32bits(g[a*n+b]) != math.Float32bits(g[b*n+a]) {
				t.Fatalf("Gram[%d, %d] = %g but Gram[%d, %d] = %g: not symmetric", a, b, g[a*n+b], b, a, g[b*n+a])
			}
		}
	}
	t.Logf("worst Gram error %.3g of Σ|terms|", worst)
}

// TestColumnSumSquaresGramErrors checks that bad arguments are refused, naming them, before
// anything is recorded.
func TestColumnSumSquaresGramErrors(t *testing.T) {
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 10, 8)).T(t)
	defer x.Release()
	u := must(d.NewBuffer("u", gpu.U32, 80)).T(t)
	defer u.Release()
	out := must(d.NewBuffer("out", gpu.F32, 8)).T(t)
	defer out.Release()
	gram := must(d.NewBuffer("gram", gpu.F32, 8, 8)).T(t)
	defer gram.Release()
	for _, c := range []struct {
		name string
		f    func(r *gpu.Recorder) error
		want string
	}{
		{"rows 0", func(r *gpu.Recorder) error { return gpu.ColumnSumSquares(r, x, out, 0, 8) }, "must be positive"},
		{"too many rows", func(r *gpu.Recorder) error { return gpu.ColumnSumSquares(r, x, out, 11, 8) }, "at least rows = 11"},
		{"not whole rows", func(r *gpu.Recorder) error { return gpu.Gram(r, x, gram, 2, 3) }, "whole rows of n = 3"},
		{"x not F32", func(r *gpu.Recorder) error { return gpu.ColumnSumSquares(r, u, out, 10, 8) }, "want [f32]"},
		{"out size", func(r *gpu.Recorder) error { return gpu.Gram(r, x, out, 10, 8) }, "out"},
		{"aliased", func(r *gpu.Recorder) error { return gpu.ColumnSumSquares(r, x, x, 1, 8) }, "out"},
		{"transpose size", func(r *gpu.Recorder) error { return gpu.Transpose(r, x, gram, 10, 8) }, "y"},
	} {
		r := d.Begin()
		err := c.f(r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if r.Len() != 0 {
			t.Errorf("%s: %d dispatches recorded by a failing call", c.name, r.Len())
		}
		r.Discard()
	}
}
