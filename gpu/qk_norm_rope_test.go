package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestQKNormRoPE: the norm is RMSNorm's arithmetic, relative error ≤ ((hd/64 + 6)/2 + 8)·u
// ≤ 13u for hd ≤ 256 (64 partial sums, a 6-level tree, the square root halving it,
// inverseSqrt 4u, (1+w) and two products); the rotation adds the f32 rounding of cos and sin
// (u each) and two products and a sum (3u) on |n_i| + |n_partner| ≤ 2·max|n|. So
// |err| ≤ (13 + 5)·u·2·max|n|; checked as atol 40u·max|want|, rtol 0. Geometries: the tiny
// model's head_dim 64 with partial rotary 1/4 (rot 16) and 3 heads over two windows of 37
// (positions restart at each window), head_dim 256 with rot 64, and rot = head_dim; θ = 1e7
// (Qwen3.5).
func TestQKNormRoPE(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(25, 26))
	eps, theta := 1e-6, 1e7
	for _, tc := range []struct{ nb, t, heads, hd, rot int }{{2, 37, 3, 64, 16}, {1, 9, 2, 256, 64}, {2, 5, 1, 6, 6}} {
		rows := tc.nb * tc.t
		x, xd := randUpload(t, d, rng, "x", 2, rows, tc.heads, tc.hd)
		w, wd := randUpload(t, d, rng, "w", 0.5, tc.hd)
		y := must(d.NewBuffer("y", gpu.F32, rows, tc.heads, tc.hd)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error {
			return gpu.QKNormRoPE(r, x, w, y, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: tc.hd, Eps: eps, Rot: tc.rot, Theta: theta, T: tc.t})
		}); err != nil {
			t.Fatal(err)
		}
		want := must(host.QKNormRoPE(xd, rows, tc.heads, tc.hd, wd, eps, tc.rot, theta, tc.t)).T(t)
		checkClose(t, "QKNormRoPE", must(d.ReadFloat32(y)).T(t), want, 40*u32*maxAbs(want), 0)
		r := d.Begin()
		if err := gpu.QKNormRoPE(r, x, w, y, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: tc.hd, Eps: eps, Rot: tc.rot + 1, Theta: theta, T: tc.t}); err == nil {
			t.Error("odd rot accepted")
		}
		if err := gpu.QKNormRoPE(r, x, w, y, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: tc.hd, Eps: eps, Rot: tc.rot, Theta: theta, T: rows + 1}); err == nil {
			t.Error("rows not a multiple of t accepted")
		}
		if err := gpu.QKNormRoPE(r, x, w, x, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: tc.hd, Eps: eps, Rot: tc.rot, Theta: theta, T: tc.t}); err == nil {
			t.Error("in-place y accepted")
		}
		if err := gpu.QKNormRoPE(r, x, w, y, gpu.QKNormRoPEDims{Rows: rows, Heads: tc.heads, HeadDim: tc.hd, Eps: eps, Rot: tc.rot, Theta: math.NaN(), T: tc.t}); err == nil {
			t.Error("NaN theta accepted")
		}
		if r.Len() != 0 {
			t.Errorf("%d dispatches recorded by failing calls", r.Len())
		}
		r.Discard()
		y.Release()
	}
}
