package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestGradSumSquares accumulates Σg² of three buffers (one small, one spanning several
// workgroups, one longer than the 1024 workgroups × 256 threads of the first stage, so
// threads stride) into out after Zero, and compares with the f64 sum. A thread's fma chain
// has at most max(4, n/(1024·256)) ≤ n/256 + 4 terms, then come a 256-way tree (8 levels),
// the final stage's ≤ 4 strided adds and its tree (8 levels), and the += into out:
// |err| ≤ (n_max/256 + 20)·u·Σg² (u = 2⁻²⁴), all terms being non-negative.
func TestGradSumSquares(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(91, 92))
	const u = 1.0 / (1 << 24)
	out := must(d.UploadFloat32("out", []float32{123}, 1)).T(t)
	defer out.Release()
	var want float64
	var bufs []*gpu.Buffer
	nmax := 0
	for _, n := range []int{3, 5000, 1024*256*2 + 77} {
		f, dd := randF32(rng, n, 2)
		for _, x := range dd {
			want += x * x
		}
		bufs = append(bufs, must(d.UploadFloat32("g", f, n)).T(t))
		nmax = max(nmax, n)
	}
	defer func() {
		for _, b := range bufs {
			b.Release()
		}
	}()
	if err := d.Run(func(r *gpu.Recorder) error {
		if err := gpu.Zero(r, out); err != nil {
			return err
		}
		for _, b := range bufs {
			if err := gpu.GradSumSquares(r, b, out); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := must(d.ReadFloat32(out)).T(t)
	bound := (float64(nmax)/256 + 20) * u * want
	checkBound(t, "Σg²", got, []float64{want}, []float64{bound})
	r := d.Begin()
	defer r.Discard()
	if err := gpu.GradSumSquares(r, bufs[0], bufs[1]); err == nil {
		t.Error("out of length 5000 accepted")
	}
	if err := gpu.GradSumSquares(r, out, out); err == nil {
		t.Error("g = out accepted")
	}
}
