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

// deltaRuleBackwardCases are the geometries of the backward parity suite: the model's
// dk = dv = 128 (two windows of t = 37: the token-by-token checkpoint chunks of C = 7 with a
// short last chunk, GVA hv = 2·hk so dq and dk are summed over two value heads; one window
// of t = 70), an awkward geometry (dk = 12 and dv = 37 not multiples of the 16×16 tiles,
// hv = 3·hk with two key heads, t = 5), t = 1, and the chunked forward's awkward
// geometries (t = 37, 100, 130 and 70 with short last chunks, hv/hk = 1 and 2, several
// windows, dk = dv = 16 and 32, strongly negative g, dv = 70 past one lanes slice), and v
// and the output gradient scaled by 2^ve, 2^ge (2^±40: every gradient scales exactly, past
// f16's range and below its normals).
var deltaRuleBackwardCases = []struct {
	dims   gpu.DeltaRuleDims
	gscale float64
	ve, ge int
}{
	{gpu.DeltaRuleDims{NB: 2, T: 37, HK: 1, HV: 2, DK: 128, DV: 128}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 3, T: 5, HK: 2, HV: 6, DK: 12, DV: 37}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 1, HK: 1, HV: 1, DK: 4, DV: 3}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 2, T: 100, HK: 1, HV: 2, DK: 16, DV: 16}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 3, T: 37, HK: 2, HV: 2, DK: 32, DV: 32}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 2, T: 130, HK: 2, HV: 4, DK: 16, DV: 20}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 130, HK: 1, HV: 1, DK: 16, DV: 16}, 40, 0, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 70, HK: 1, HV: 2, DK: 128, DV: 128}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 1, HK: 1, HV: 1, DK: 8, DV: 4}, 1, 0, 0},
	// dv = 70 past one slice of the lanes form (8 columns × 8 lanes), the second slice 6
	// columns live.
	{gpu.DeltaRuleDims{NB: 1, T: 9, HK: 1, HV: 2, DK: 8, DV: 70}, 1, 0, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}, 1, 40, -40},
	{gpu.DeltaRuleDims{NB: 1, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}, 1, -40, 40},
}

// deltaRuleBackwardImpl is one implementation of the gated delta rule backward under the
// parity suite testDeltaRuleBackward: its launcher; its tolerance relative to the output's
// scale; dgScale: dg's scale is the largest of max|dg|, max|dq|, max|dk| (the chunked form
// gets dγ_i = q·dq − k·dk_{state+qk} + … as a difference of terms of the size of dq and dk,
// |k| = 1, |q| = dk^−½, that cancel where the state has decayed, exactly 0 at t = 1, so its
// error scales with them, not with dg); mult4: it takes only dk and dv multiples of 4 (the
// cases that are not are left out, and dv + 1 must be refused); vsToken: also compared with
// the token-by-token GPU backward.
type deltaRuleBackwardImpl struct {
	run                     func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error
	tol                     func(gpu.DeltaRuleDims) float64
	dgScale, mult4, vsToken bool
}

// deltaRuleBackwardTokenTol is the token-by-token backward's tolerance: the backward carries
// dS through dS ↦ e^{g}·(I − β·k·kᵀ)·dS (the transpose of the forward's non-expansive map:
// |k| = 1, β ∈ (0, 1), g ≤ 0), so, as in deltaRuleTokenTol, the roundings of the t steps add
// up without growth; each step recomputes the state (two dk-term dot products) and forms
// dot products of dv terms (dq) and dk terms (du, dk) reduced through 16 partials, and dg
// sums dk·dv terms (√(dk·dv) ≤ √(2dk + 2dv)·√t here as a random walk). As independent
// roundings they walk to ~√(t·(2dk + 2dv + 8))·u relative to the largest value of each
// output; checked per output as atol = 16·√(t·(2dk + 2dv + 8))·u·max|want| (1.3e-4
// relative at t = 37, dk = dv = 128).
func deltaRuleBackwardTokenTol(d gpu.DeltaRuleDims) float64 {
	return 16 * math.Sqrt(float64(d.T*(2*d.DK+2*d.DV+8))) * u32
}

// deltaRuleBackwardChunkedTol is the chunked backward's tolerance: as deltaRuleChunkedTol,
// per chunk a few dk- and dv-term dot products and sums of ≤ 64 terms (the dV' and dS
// recurrence, the WY substitution and its transpose, dγ's in-chunk reverse sum), carried
// across chunks by the transpose of the forward's non-expansive map, so errors add without
// growth: atol = 32·√((t/64 + 1)·(4dk + 4dv + 4·64))·u·scale per output, at least
// deltaRuleBackwardTokenTol.
func deltaRuleBackwardChunkedTol(d gpu.DeltaRuleDims) float64 {
	nck := float64((d.T + 63) / 64)
	return math.Max(32*math.Sqrt((nck+1)*float64(4*d.DK+4*d.DV+256))*u32, deltaRuleBackwardTokenTol(d))
}

// TestGatedDeltaRuleBackward: the token-by-token backward under the backward parity suite
// (host.GatedDeltaRuleBackward is float64, itself checked by finite differences).
func TestGatedDeltaRuleBackward(t *testing.T) {
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleBackward, deltaRuleBackwardTokenTol, false, false, false})
}

// TestGatedDeltaRuleBackwardLanes: the lane-blocked backward of CPU adapters under the
// backward parity suite, with the token-by-token kernel's tolerance.
func TestGatedDeltaRuleBackwardLanes(t *testing.T) {
	skipNoLanes(t, gputest.Open(t))
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleBackwardLanes, deltaRuleBackwardTokenTol, false, false, false})
}

// TestGatedDeltaRuleBackwardAuto: the launcher nvgkit calls (chunked where it fits, so
// token-by-token for dk or dv not multiples of 4) under the backward parity suite, with the
// tolerance of the form it takes (the cooperative-matrix one where tensor cores are on).
func TestGatedDeltaRuleBackwardAuto(t *testing.T) {
	d := gputest.Open(t)
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleBackwardAuto, func(dims gpu.DeltaRuleDims) float64 {
		if gpu.GatedDeltaRuleBackwardCoopmatFits(d, dims) {
			return deltaRuleBackwardCoopTol(dims)
		}
		return deltaRuleBackwardChunkedTol(dims)
	}, true, false, true})
}

// testDeltaRuleBackward is the backward parity suite: impl on every deltaRuleBackwardCases
// geometry it takes, for a random output gradient, against host.GatedDeltaRuleBackward and,
// when impl.vsToken, the token-by-token GPU backward; a second call must give identical
// bits (no atomics); and its argument errors (wrong t, hv not a multiple of hk, dk > 256,
// outputs aliasing inputs or each other, a nil recorder; none may leave a dispatch
// recorded).
func testDeltaRuleBackward(t *testing.T, impl deltaRuleBackwardImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(85, 86))
	for _, tc := range deltaRuleBackwardCases {
		dm := tc.dims
		if impl.mult4 && (dm.DK%4 != 0 || dm.DV%4 != 0) {
			continue
		}
		t.Run(fmt.Sprintf("nb=%d t=%d hk=%d hv=%d dk=%d dv=%d gscale=%g ve=%d ge=%d", dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV, tc.gscale, tc.ve, tc.ge), func(t *testing.T) {
			nb, tt, hk, hv, dk, dv := dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV
			rows := nb * tt
			f, in := chunkedInputs(t, rng, rows, hk, hv, dk, dv, tc.gscale)
			dof, dod := randF32(rng, rows*hv*dv, 1)
			scalePow2(pow2Scaled{f[2], in[2], tc.ve}, pow2Scaled{dof, dod, tc.ge})
			bs := newBufs(t, d)
			q, k, v := bs.up("q", f[0], rows, hk, dk), bs.up("k", f[1], rows, hk, dk), bs.up("v", f[2], rows, hv, dv)
			g, beta, do := bs.up("g", f[3], rows, hv), bs.up("beta", f[4], rows, hv), bs.up("do", dof, rows, hv, dv)
			dq, dkey, dval := bs.nw("dq", rows, hk, dk), bs.nw("dk", rows, hk, dk), bs.nw("dv", rows, hv, dv)
			dg, dbeta := bs.nw("dg", rows, hv), bs.nw("dbeta", rows, hv)
			run := func(bw func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error) [5][]float32 {
				if err := d.Run(func(r *gpu.Recorder) error {
					return bw(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dm)
				}); err != nil {
					t.Fatal(err)
				}
				var out [5][]float32
				for i, b := range []*gpu.Buffer{dq, dkey, dval, dg, dbeta} {
					out[i] = must(d.ReadFloat32(b)).T(t)
				}
				return out
			}
			var ref [5][]float32
			if impl.vsToken {
				ref = run(gpu.GatedDeltaRuleBackward)
			}
			got := run(impl.run)
			wq, wk, wv, wg, wb, err := host.GatedDeltaRuleBackward(in[0], in[1], in[2], in[3], in[4], dod, nb, tt, hk, hv, dk, dv)
			if err != nil {
				t.Fatal(err)
			}
			tol := impl.tol(dm)
			for i, w := range [][]float64{wq, wk, wv, wg, wb} {
				name := []string{"dq", "dk", "dv", "dg", "dbeta"}[i]
				m := maxAbs(w)
				if name == "dg" && impl.dgScale {
					m = math.Max(m, math.Max(maxAbs(wq), maxAbs(wk)))
				}
				e := checkClose(t, name+" vs host", got[i], w, tol*m, 0)
				if m > 0 {
					t.Logf("%s: max |err|/scale %.3g (bound %.3g)", name, e/m, tol)
				}
				if impl.vsToken {
					checkClose(t, name+" vs token-by-token GPU", got[i], f64(ref[i]), tol*m, 0)
				}
			}
			// Deterministic: a second call gives the same bits.
			again := run(impl.run)
			for i := range got {
				for e := range got[i] {
					if math.Float32bits(got[i][e]) != math.Float32bits(again[i][e]) {
						t.Fatalf("output %d element %d: second call gave %g, first %g", i, e, again[i][e], got[i][e])
					}
				}
			}
			r := d.Begin()
			defer r.Discard()
			with := func(f func(*gpu.DeltaRuleDims)) gpu.DeltaRuleDims { x := dm; f(&x); return x }
			errs := map[string]error{
				"t":           impl.run(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, with(func(x *gpu.DeltaRuleDims) { x.T++ })),
				"hv % hk":     impl.run(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, with(func(x *gpu.DeltaRuleDims) { x.HV++ })),
				"dk > 256":    impl.run(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, with(func(x *gpu.DeltaRuleDims) { x.DK = 260 })),
				"dq is q":     impl.run(r, q, k, v, g, beta, do, q, dkey, dval, dg, dbeta, dm),
				"dg is dbeta": impl.run(r, q, k, v, g, beta, do, dq, dkey, dval, dbeta, dbeta, dm),
				"do is v":     impl.run(r, q, k, v, g, beta, v, dq, dkey, dval, dg, dbeta, dm),
				"nil":         impl.run(nil, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dm),
			}
			if impl.mult4 {
				errs["dv % 4"] = impl.run(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, with(func(x *gpu.DeltaRuleDims) { x.DV++ }))
			}
			for name, err := range errs {
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
// and gpu-µs, the main kernel's GPU time from the timestamp profiler. "lanes" is
// GatedDeltaRuleBackwardLanes (CPU adapters only; gpu-µs-all sums its two kernels).
func BenchmarkGatedDeltaRuleBackward(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		big           bool
	}{{1, 512, 1, 2, false}, {2, 4096, 16, 32, true}} {
		for _, lanes := range []bool{false, true} {
			name, bw, kernel := "token", gpu.GatedDeltaRuleBackward, "GatedDeltaRuleBackward"
			if lanes {
				name, bw, kernel = "lanes", gpu.GatedDeltaRuleBackwardLanes, ""
			}
			b.Run(fmt.Sprintf("%s,nb=%d,t=%d,hk=%d,hv=%d", name, sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
				if sz.big && os.Getenv("NVG_BENCH_BIG") != "1" {
					b.Skip("model-sized run: set NVG_BENCH_BIG=1")
				}
				if lanes && gputest.Open(b).Info().SubgroupSize == 0 {
					b.Skip("the lane-blocked form runs on CPU adapters")
				}
				benchDeltaRuleBackward(b, bw, gpu.DeltaRuleDims{NB: sz.nb, T: sz.t, HK: sz.hk, HV: sz.hv, DK: 128, DV: 128},
					func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer) {
						benchKernel(b, d, kernel, rows, rec, wait)
					})
			})
		}
	}
}

// benchDeltaRuleBackward uploads deltaInputs of dims and a random output gradient and hands
// a call of bw on them to time (benchKernel), with the rows and the
// buffer to wait on.
func benchDeltaRuleBackward(b *testing.B, bw func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error, dims gpu.DeltaRuleDims, time func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer)) {
	d := gputest.Open(b)
	rng := rand.New(rand.NewPCG(83, 84))
	hk, hv, dk, dv := dims.HK, dims.HV, dims.DK, dims.DV
	rows := dims.NB * dims.T
	f, _ := deltaInputs(b, rng, rows, hk, hv, dk, dv)
	dof, _ := randF32(rng, rows*hv*dv, 1)
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
	q, k, v := up("q", f[0], rows, hk, dk), up("k", f[1], rows, hk, dk), up("v", f[2], rows, hv, dv)
	g, beta, do := up("g", f[3], rows, hv), up("beta", f[4], rows, hv), up("do", dof, rows, hv, dv)
	dq, dkey, dval := nw("dq", rows, hk, dk), nw("dk", rows, hk, dk), nw("dv", rows, hv, dv)
	dg, dbeta := nw("dg", rows, hv), nw("dbeta", rows, hv)
	defer func() {
		for _, buf := range bufs {
			buf.Release()
		}
	}()
	time(d, rows, func(r *gpu.Recorder) error {
		return bw(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims)
	}, dbeta)
}
