package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGatedDeltaRuleBackward compares with host.GatedDeltaRuleBackward (float64) on the
// model's dk = dv = 128 (two windows of t = 37: checkpoint chunks of C = 7 with a short last
// chunk, GVA hv = 2·hk so dq and dk are summed over two value heads), on an awkward geometry
// (dk = 12 and dv = 37 not multiples of the 16×16 tiles, hv = 3·hk with two key heads,
// t = 5) and on t = 1. Tolerance: the
// backward carries dS through dS ↦ e^{g}·(I − β·k·kᵀ)·dS (the transpose of the forward's
// non-expansive map: |k| = 1, β ∈ (0, 1), g ≤ 0), so, as in TestGatedDeltaRule, the
// roundings of the t steps add up without growth; each step recomputes the state (two
// dk-term dot products) and forms dot products of dv terms (dq) and dk terms (du, dk)
// reduced through 16 partials, and dg sums dk·dv terms (√(dk·dv) ≤ √(2dk + 2dv)·√t here as
// a random walk). As independent roundings they walk to ~√(t·(2dk + 2dv + 8))·u relative to
// the largest value of each output; checked per output as
// atol = 16·√(t·(2dk + 2dv + 8))·u·max|want| (1.3e-4 relative at t = 37, dk = dv = 128).
// Also checks that a second call gives identical bits (no atomics) and the argument errors.
func TestGatedDeltaRuleBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(81, 82))
	for _, tc := range []struct{ nb, t, hk, hv, dk, dv int }{{2, 37, 1, 2, 128, 128}, {3, 5, 2, 6, 12, 37}, {1, 1, 1, 1, 4, 3}} {
		t.Run(fmt.Sprintf("nb=%d t=%d hk=%d hv=%d dk=%d dv=%d", tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv), func(t *testing.T) {
			nb, tt, hk, hv, dk, dv := tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv
			rows := nb * tt
			f, in := deltaInputs(t, rng, rows, hk, hv, dk, dv)
			dof, dod := randF32(rng, rows*hv*dv, 1)
			up := func(name string, x []float32, shape ...int) *gpu.Buffer {
				b := must(d.UploadFloat32(name, x, shape...)).T(t)
				t.Cleanup(b.Release)
				return b
			}
			nw := func(name string, shape ...int) *gpu.Buffer {
				b := must(d.NewBuffer(name, gpu.F32, shape...)).T(t)
				t.Cleanup(b.Release)
				return b
			}
			q, k, v := up("q", f[0], rows, hk, dk), up("k", f[1], rows, hk, dk), up("v", f[2], rows, hv, dv)
			g, beta, do := up("g", f[3], rows, hv), up("beta", f[4], rows, hv), up("do", dof, rows, hv, dv)
			dq, dkey, dval := nw("dq", rows, hk, dk), nw("dk", rows, hk, dk), nw("dv", rows, hv, dv)
			dg, dbeta := nw("dg", rows, hv), nw("dbeta", rows, hv)
			run := func() [5][]float32 {
				if err := d.Run(func(r *gpu.Recorder) error {
					return gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv)
				}); err != nil {
					t.Fatal(err)
				}
				var out [5][]float32
				for i, b := range []*gpu.Buffer{dq, dkey, dval, dg, dbeta} {
					out[i] = must(d.ReadFloat32(b)).T(t)
				}
				return out
			}
			got := run()
			wq, wk, wv, wg, wb, err := host.GatedDeltaRuleBackward(in[0], in[1], in[2], in[3], in[4], dod, nb, tt, hk, hv, dk, dv)
			if err != nil {
				t.Fatal(err)
			}
			tol := 16 * math.Sqrt(float64(tt*(2*dk+2*dv+8))) * u32
			for i, w := range [][]float64{wq, wk, wv, wg, wb} {
				name := []string{"dq", "dk", "dv", "dg", "dbeta"}[i]
				e := checkClose(t, name, got[i], w, tol*maxAbs(w), 0)
				if m := maxAbs(w); m > 0 {
					t.Logf("%s: max |err|/max|want| %.3g (bound %.3g)", name, e/m, tol)
				}
			}
			// Deterministic: a second call gives the same bits.
			again := run()
			for i := range got {
				for e := range got[i] {
					if math.Float32bits(got[i][e]) != math.Float32bits(again[i][e]) {
						t.Fatalf("output %d element %d: second call gave %g, first %g", i, e, again[i][e], got[i][e])
					}
				}
			}

			r := d.Begin()
			defer r.Discard()
			for name, err := range map[string]error{
				"t":           gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt+1, hk, hv, dk, dv),
				"hv % hk":     gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv+1, dk, dv),
				"dk > 256":    gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, 257, dv),
				"dq is q":     gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, q, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv),
				"dg is dbeta": gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dbeta, dbeta, nb, tt, hk, hv, dk, dv),
				"do is v":     gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, v, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv),
			} {
				if err == nil {
					t.Errorf("%s: no error", name)
				}
			}
			if r.Len() != 0 {
				t.Errorf("%d dispatches recorded by failing calls", r.Len())
			}
		})
	}
}

// BenchmarkGatedDeltaRuleBackward: one window of t = 512 tokens, hk = 1, hv = 2 (GVA sum
// included), dk = dv = 128; with NVG_BENCH_BIG=1 also a model-sized batch (nb = 2 windows of
// t = 4096, hk = 16, hv = 32: the checkpoint scratch, ~(64 + 64)·64 KiB per head, must fit
// one storage binding). Reports tokens/s of the whole call (submit and readback included)
// and gpu-µs, the main kernel's GPU time from the timestamp profiler.
func BenchmarkGatedDeltaRuleBackward(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		big           bool
	}{{1, 512, 1, 2, false}, {2, 4096, 16, 32, true}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
			if sz.big && os.Getenv("NVG_BENCH_BIG") != "1" {
				b.Skip("model-sized run: set NVG_BENCH_BIG=1")
			}
			const dk, dv = 128, 128
			d := gputest.Open(b)
			rng := rand.New(rand.NewPCG(83, 84))
			rows := sz.nb * sz.t
			f, _ := deltaInputs(b, rng, rows, sz.hk, sz.hv, dk, dv)
			dof, _ := randF32(rng, rows*sz.hv*dv, 1)
			var bufs []*gpu.Buffer
			up := func(name string, x []float32, shape ...int) *gpu.Buffer {
				buf := must(d.UploadFloat32(name, x, shape...)).T(b)
				bufs = append(bufs, buf)
				return buf
			}
			nw := func(name string, shape ...int) *gpu.Buffer {
				buf := must(d.NewBuffer(name, gpu.F32, shape...)).T(b)
				bufs = append(bufs, buf)
				return buf
			}
			q, k, v := up("q", f[0], rows, sz.hk, dk), up("k", f[1], rows, sz.hk, dk), up("v", f[2], rows, sz.hv, dv)
			g, beta, do := up("g", f[3], rows, sz.hv), up("beta", f[4], rows, sz.hv), up("do", dof, rows, sz.hv, dv)
			dq, dkey, dval := nw("dq", rows, sz.hk, dk), nw("dk", rows, sz.hk, dk), nw("dv", rows, sz.hv, dv)
			dg, dbeta := nw("dg", rows, sz.hv), nw("dbeta", rows, sz.hv)
			defer func() {
				for _, buf := range bufs {
					buf.Release()
				}
			}()
			benchKernel(b, d, "GatedDeltaRuleBackward", rows, func(r *gpu.Recorder) error {
				return gpu.GatedDeltaRuleBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, sz.nb, sz.t, sz.hk, sz.hv, dk, dv)
			}, dbeta)
		})
	}
}
