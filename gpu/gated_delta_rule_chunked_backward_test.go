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

// TestGatedDeltaRuleChunkedBackward compares the chunked backward with
// host.GatedDeltaRuleBackward (float64, itself checked by finite differences) and with the
// token-by-token GPU backward, on the chunked forward's awkward geometries (t = 37, 100, 130
// and 70 with short last chunks, hv/hk = 1 and 2, several windows, dk = dv = 16, 32 and
// the model's 128, strongly negative g). Tolerance: as TestGatedDeltaRuleChunked, per
// chunk a few dk- and dv-term dot products and sums of ≤ 64 terms (the dV' and dS
// recurrence, the WY substitution and its transpose, dγ's in-chunk reverse sum), carried
// across chunks by the transpose of the forward's non-expansive map, so errors add without
// growth: atol = 32·√((t/64 + 1)·(4dk + 4dv + 4·64))·u·scale per output, at least
// TestGatedDeltaRuleBackward's 16·√(t·(2dk + 2dv + 8))·u·scale, with scale = max|want|
// (for dg, which the chunked form gets as a difference of dq- and dk-sized terms, the
// largest of max|dg|, max|dq|, max|dk|). Also checks that a
// second call gives identical bits (no atomics) and the argument errors.
func TestGatedDeltaRuleChunkedBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(85, 86))
	for _, tc := range []struct {
		nb, t, hk, hv, dk, dv int
		gscale                float64
	}{
		{2, 100, 1, 2, 16, 16, 1},
		{3, 37, 2, 2, 32, 32, 1},
		{2, 130, 2, 4, 16, 20, 1},
		{1, 130, 1, 1, 16, 16, 40},
		{1, 70, 1, 2, 128, 128, 1},
		{1, 1, 1, 1, 8, 4, 1},
	} {
		t.Run(fmt.Sprintf("nb=%d t=%d hk=%d hv=%d dk=%d dv=%d gscale=%g", tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv, tc.gscale), func(t *testing.T) {
			nb, tt, hk, hv, dk, dv := tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv
			rows := nb * tt
			f, in := chunkedInputs(t, rng, rows, hk, hv, dk, dv, tc.gscale)
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
			run := func(chunked bool) [5][]float32 {
				if err := d.Run(func(r *gpu.Recorder) error {
					if chunked {
						return gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv)
					}
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
			ref := run(false)
			got := run(true)
			wq, wk, wv, wg, wb, err := host.GatedDeltaRuleBackward(in[0], in[1], in[2], in[3], in[4], dod, nb, tt, hk, hv, dk, dv)
			if err != nil {
				t.Fatal(err)
			}
			nck := float64((tt + 63) / 64)
			tol := math.Max(32*math.Sqrt((nck+1)*float64(4*dk+4*dv+256))*u32, 16*math.Sqrt(float64(tt*(2*dk+2*dv+8)))*u32)
			for i, w := range [][]float64{wq, wk, wv, wg, wb} {
				name := []string{"dq", "dk", "dv", "dg", "dbeta"}[i]
				m := maxAbs(w)
				if name == "dg" {
					// dγ_i = q·dq − k·dk_{state+qk} + … is a difference of terms of the size of
					// dq and dk (|k| = 1, |q| = dk^−½) that cancel where the state has
					// decayed (exactly 0 at t = 1): its error scales with them, not with dg.
					m = math.Max(m, math.Max(maxAbs(wq), maxAbs(wk)))
				}
				e := checkClose(t, name+" vs host", got[i], w, tol*m, 0)
				if m > 0 {
					t.Logf("%s: max |err|/scale %.3g (bound %.3g)", name, e/m, tol)
				}
				checkClose(t, name+" vs token-by-token GPU", got[i], f64(ref[i]), tol*m, 0)
			}
			again := run(true)
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
				"t":           gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt+1, hk, hv, dk, dv),
				"hv % hk":     gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv+1, dk, dv),
				"dk > 256":    gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, 260, dv),
				"dv % 4":      gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv+1),
				"dq is q":     gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, q, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv),
				"dg is dbeta": gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, do, dq, dkey, dval, dbeta, dbeta, nb, tt, hk, hv, dk, dv),
				"do is v":     gpu.GatedDeltaRuleChunkedBackward(r, q, k, v, g, beta, v, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv),
				"nil":         gpu.GatedDeltaRuleChunkedBackward(nil, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, nb, tt, hk, hv, dk, dv),
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

// BenchmarkGatedDeltaRuleChunkedBackward: as BenchmarkGatedDeltaRuleBackward's small case
// (nb = 1, t = 512, hk = 1, hv = 2, dk = dv = 128), and with NVG_BENCH_LARGE=1 the model's
// batch nb = 8, t = 512, hk = 16, hv = 32 for the chunked and the token-by-token backward.
// Reports tokens/s and ms per call (submit and readback included) and gpu-µs-all, the
// summed GPU time of all the call's kernels.
func BenchmarkGatedDeltaRuleChunkedBackward(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		large         bool
	}{{1, 512, 1, 2, false}, {8, 512, 16, 32, true}} {
		for _, chunked := range []bool{true, false} {
			name := "token"
			if chunked {
				name = "chunked"
			}
			b.Run(fmt.Sprintf("%s,nb=%d,t=%d,hk=%d,hv=%d", name, sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
				if sz.large && os.Getenv("NVG_BENCH_LARGE") != "1" {
					b.Skip("model-sized run: set NVG_BENCH_LARGE=1")
				}
				if !sz.large && !chunked {
					b.Skip("see BenchmarkGatedDeltaRuleBackward")
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
				bw := gpu.GatedDeltaRuleBackward
				if chunked {
					bw = gpu.GatedDeltaRuleChunkedBackward
				}
				benchKernelAll(b, d, rows, func(r *gpu.Recorder) error {
					return bw(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, sz.nb, sz.t, sz.hk, sz.hv, dk, dv)
				}, dbeta)
			})
		}
	}
}
