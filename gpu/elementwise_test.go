package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

const u32 = 1.0 / (1 << 24) // unit roundoff of f32 (half an ulp at 1)

// TestEmbedding: a gather is a copy (f16 → f32 is exact), so the tolerance is zero.
func TestEmbedding(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(3, 4))
	vocab, hidden := 37, 19 // odd hidden: f16 rows start at odd half-word offsets
	ids := []int{0, 36, 5, 5, 17, 1, 36, 22, 9, 30, 2}
	idsH := ids
	for _, f16 := range []bool{false, true} {
		var tb *gpu.Buffer
		var tabD []float64
		if f16 {
			var bits []uint16
			bits, tabD = randF16(rng, vocab*hidden, 2)
			tb = must(d.UploadF16("table", bits, vocab, hidden)).T(t)
		} else {
			var f []float32
			f, tabD = randF32(rng, vocab*hidden, 2)
			tb = must(d.UploadFloat32("table", f, vocab, hidden)).T(t)
		}
		out := must(d.NewBuffer("out", gpu.F32, len(ids), hidden)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.Embedding(r, tb, ids, out) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.Embedding(tabD, vocab, hidden, idsH)).T(t)
		checkClose(t, "Embedding", must(d.ReadFloat32(out)).T(t), want, 0, 0)
		r := d.Begin()
		if err := gpu.Embedding(r, tb, []int{1, 37}, out); err == nil {
			t.Error("id = vocab accepted")
		}
		if err := gpu.Embedding(r, tb, []int{-1}, out); err == nil {
			t.Error("negative id accepted")
		}
		if err := gpu.Embedding(r, tb, ids[:3], out); err == nil {
			t.Error("out of the wrong size accepted")
		}
		r.Discard()
		tb.Release()
		out.Release()
	}
}

// TestEmbeddingSliced gathers from a table split into 128-row slices (as a table larger
// than one binding is), f16 with odd hidden so slices start mid-word-pair: still exact.
func TestEmbeddingSliced(t *testing.T) {
	d := gputest.Open(t)
	defer gpu.SetEmbeddingSliceRows(128)()
	rng := rand.New(rand.NewPCG(19, 20))
	vocab, hidden := 300, 7
	ids := []int{299, 0, 127, 128, 255, 256, 3, 200, 299}
	bits, tabD := randF16(rng, vocab*hidden, 2)
	tb := must(d.UploadF16("table", bits, vocab, hidden)).T(t)
	out := must(d.NewBuffer("out", gpu.F32, len(ids), hidden)).T(t)
	defer tb.Release()
	defer out.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.Embedding(r, tb, ids, out) }); err != nil {
		t.Fatal(err)
	}
	want := must(host.Embedding(tabD, vocab, hidden, ids)).T(t)
	checkClose(t, "Embedding (3 slices)", must(d.ReadFloat32(out)).T(t), want, 0, 0)
}

// TestSwiGLU: silu uses one exp (WGSL: ≤ 3 + 2|g| ulp), a division and two products, so the
// relative error is at most about (8 + 2|g|)·u with |g| ≤ 6 here: rtol (8+12)·2u = 2.4e-6.
func TestSwiGLU(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(5, 6))
	n := 3*1001 + 7
	gf, gd := randF32(rng, n, 6)
	uf, ud := randF32(rng, n, 2)
	g := must(d.UploadFloat32("gate", gf, n)).T(t)
	u := must(d.UploadFloat32("up", uf, n)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, n)).T(t)
	defer g.Release()
	defer u.Release()
	defer y.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.SwiGLU(r, g, u, y) }); err != nil {
		t.Fatal(err)
	}
	want := must(host.SwiGLU(gd, ud)).T(t)
	checkClose(t, "SwiGLU", must(d.ReadFloat32(y)).T(t), want, 1e-37, 40*u32)
	if err := gpu.SwiGLU(d.Begin(), g, u, g); err == nil {
		t.Error("y aliasing gate accepted")
	}
}

// TestRMSNorm: the sum of n squares in f32 has relative error ≤ n·u (tree reduction: far
// less), inverseSqrt ≤ 2 ulp (4u), and three products 3u; so |err| ≤ (n/2 + 8)·u·|y|
// (the square root halves the sum's relative error). Both gain styles, awkward n, rows.
func TestRMSNorm(t *testing.T) {
	d := gputest.Open(t)
	rows, n, eps := 13, 333, 1e-6
	x, w, y := testRMSNorm(t, d, rand.New(rand.NewPCG(7, 8)), rows, n, 3, 0.5, true, false)
	r := d.Begin()
	if err := gpu.RMSNorm(r, x, w, y, rows, n+1, eps, true); err == nil {
		t.Error("wrong n accepted")
	}
	if err := gpu.RMSNorm(r, x, w, y, rows, n, math.NaN(), true); err == nil {
		t.Error("NaN eps accepted")
	}
	if err := gpu.RMSNorm(r, x, w, x, rows, n, eps, true); err == nil {
		t.Error("in-place y accepted")
	}
	r.Discard()
}

// TestRMSNormBigGrid: one workgroup per row, so 65600 rows need a 2-D grid (65535, 2); rows
// past the first grid row must be normalised too (cheap: 3 values per row).
func TestRMSNormBigGrid(t *testing.T) {
	testRMSNorm(t, gputest.Open(t), rand.New(rand.NewPCG(17, 18)), 65600, 3, 2, 1, true)
}

// testRMSNorm checks RMSNorm (eps 1e-6) of random x [rows, n] (uniform in ±xs) and w [n]
// (±ws) against host.RMSNorm within TestRMSNorm's bound, once per gain style zcs (1 + w when
// true), and returns x, w and y (released when t ends).
func testRMSNorm(t *testing.T, d *gpu.Device, rng *rand.Rand, rows, n int, xs, ws float64, zcs ...bool) (x, w, y *gpu.Buffer) {
	const eps = 1e-6
	xf, xd := randF32(rng, rows*n, xs)
	wf, wd := randF32(rng, n, ws)
	x = must(d.UploadFloat32("x", xf, rows, n)).T(t)
	w = must(d.UploadFloat32("w", wf, n)).T(t)
	y = must(d.NewBuffer("y", gpu.F32, rows, n)).T(t)
	t.Cleanup(func() {
		x.Release()
		w.Release()
		y.Release()
	})
	for _, zc := range zcs {
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.RMSNorm(r, x, w, y, rows, n, eps, zc) }); err != nil {
			t.Fatal(err)
		}
		want := must(host.RMSNorm(xd, rows, n, wd, eps, zc)).T(t)
		name := fmt.Sprintf("RMSNorm(1+w) rows %d", rows)
		if !zc {
			name = fmt.Sprintf("RMSNorm(w) rows %d", rows)
		}
		checkClose(t, name, must(d.ReadFloat32(y)).T(t), want, 1e-37, (float64(n)/2+8)*u32)
	}
	return x, w, y
}
