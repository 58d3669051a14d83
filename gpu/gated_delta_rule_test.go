package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// deltaInputs returns realistic GatedDeltaRule inputs as float32 and float64: q and k
// L2-normalised per head (q scaled by dk^−½), v uniform in ±1, g and beta from
// GatedDeltaGates on random a, b (so g ≤ 0 and β ∈ (0, 1), as in the model).
func deltaInputs(t testing.TB, rng *rand.Rand, rows, hk, hv, dk, dv int) (f [5][]float32, d [5][]float64) {
	_, qr := randF32(rng, rows*hk*dk, 1)
	_, kr := randF32(rng, rows*hk*dk, 1)
	q := must(host.L2Norm(qr, rows*hk, dk, 1/math.Sqrt(float64(dk)))).T(t)
	k := must(host.L2Norm(kr, rows*hk, dk, 1)).T(t)
	_, v := randF32(rng, rows*hv*dv, 1)
	_, a := randF32(rng, rows*hv, 3)
	_, b := randF32(rng, rows*hv, 3)
	_, aLog := randF32(rng, hv, 1)
	_, dt := randF32(rng, hv, 1)
	g, beta, err := host.GatedDeltaGates(a, b, rows, hv, aLog, dt)
	if err != nil {
		t.Fatal(err)
	}
	d = [5][]float64{q, k, v, g, beta}
	for i, x := range d { // round to f32 so host and GPU see the same inputs
		f[i] = make([]float32, len(x))
		for j, y := range x {
			f[i][j] = float32(y)
			x[j] = float64(f[i][j])
		}
	}
	return f, d
}

// deltaRuleCases are the geometries of the forward parity suite: the model's dk = dv = 128
// (t = 37 and 70, two windows, GVA hv = 2·hk), an awkward geometry (dv = 37 not a multiple
// of the 32-column slice, dk = 12, hv = 3·hk, key head mapping j / 3), t = 1, and the
// chunked form's: t not a multiple of the chunk of 64 (37: one short chunk; 100, 130: a
// short last chunk), hv/hk = 1 and 2, several windows, dv not a multiple of 4 or of the
// 32-column slice, gscale > 1 multiplying the model-range g (down to about −100 per token,
// so the chunk's cumulative decays underflow f32 entirely), and v scaled by 2^ve (2⁴⁰ and
// 2⁻⁴⁰: o and the state scale exactly, beyond f16's range and below its normals).
var deltaRuleCases = []struct {
	dims   gpu.DeltaRuleDims
	gscale float64
	state  bool
	ve     int
}{
	{gpu.DeltaRuleDims{NB: 2, T: 37, HK: 1, HV: 2, DK: 128, DV: 128}, 1, true, 0},
	{gpu.DeltaRuleDims{NB: 3, T: 5, HK: 2, HV: 6, DK: 12, DV: 37}, 1, false, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 1, HK: 1, HV: 1, DK: 8, DV: 3}, 1, true, 0},
	{gpu.DeltaRuleDims{NB: 2, T: 100, HK: 1, HV: 2, DK: 16, DV: 16}, 1, true, 0},
	{gpu.DeltaRuleDims{NB: 3, T: 37, HK: 2, HV: 2, DK: 32, DV: 32}, 1, false, 0},
	{gpu.DeltaRuleDims{NB: 2, T: 130, HK: 2, HV: 4, DK: 16, DV: 37}, 1, true, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 130, HK: 1, HV: 1, DK: 16, DV: 16}, 40, true, 0},
	{gpu.DeltaRuleDims{NB: 2, T: 70, HK: 1, HV: 2, DK: 128, DV: 128}, 1, true, 0},
	{gpu.DeltaRuleDims{NB: 1, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}, 1, true, 40},
	{gpu.DeltaRuleDims{NB: 1, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}, 1, true, -40},
}

// deltaRuleImpl is one implementation of the gated delta rule forward under the parity
// suite testDeltaRule: its launcher, the inter-chunk slice widths to run it under
// (gpu.SetGDRCSlice; 0 is the device's choice), its tolerance relative to max|want|, and
// whether it is also compared with the token-by-token GPU kernel.
type deltaRuleImpl struct {
	run     func(r *gpu.Recorder, q, k, v, g, beta, o, state *gpu.Buffer, dims gpu.DeltaRuleDims) error
	slices  []int
	tol     func(gpu.DeltaRuleDims) float64
	vsToken bool
}

// deltaRuleTokenTol is the token-by-token kernel's tolerance: each step forms two dk-term
// f32 dot products and a few products per state entry, and the state map
// S ↦ (I − βkkᵀ)·e^g·S is non-expansive (|k| = 1, β ∈ (0,1), g ≤ 0), so rounding errors of
// the t steps add up without growth; as independent roundings they random-walk to
// ~√(t·(2dk+4))·u relative to the largest value (the worst case, linear in t·dk, is ~100×
// looser and would hide real bugs). Checked as atol = 16·√(t·(2dk+4))·u·max|want|
// (8.5e-5 relative at t = 37, dk = 128), rtol 0.
func deltaRuleTokenTol(d gpu.DeltaRuleDims) float64 {
	return 16 * math.Sqrt(float64(d.T*(2*d.DK+4))) * u32
}

// deltaRuleChunkedTol is the chunked form's tolerance: within a chunk each output is a sum
// of dot products of dk terms (W·S, Q·S, K·Kᵀ, Q·Kᵀ) and of ≤ 64 terms (Aqk·V', the forward
// substitution, the state update); the substitution's matrix I + A is unit lower triangular
// with |A_is| ≤ β_i|k_i·k_s| < 1, and the recurrence it solves is the delta rule's
// non-expansive one, so its rounding errors do not grow either; across chunks S is carried
// by the same non-expansive map. Independent roundings random-walk to
// ~√((t/64 + 1)·(4dk + 3·64))·u relative to the largest value (per chunk four dk-term and
// three 64-term sums); checked as atol = 16·√((t/64 + 1)·(4dk + 192))·u·max|want|, at least
// deltaRuleTokenTol for the short cases. The same tolerance applies against the GPU
// token-by-token kernel (both are within it of the f64 result).
func deltaRuleChunkedTol(d gpu.DeltaRuleDims) float64 {
	nck := float64((d.T + 63) / 64)
	return math.Max(16*math.Sqrt((nck+1)*float64(4*d.DK+192))*u32, deltaRuleTokenTol(d))
}

// TestGatedDeltaRule: the token-by-token kernel under the forward parity suite.
func TestGatedDeltaRule(t *testing.T) {
	testDeltaRule(t, deltaRuleImpl{gpu.GatedDeltaRule, []int{0}, deltaRuleTokenTol, false})
}

// TestGatedDeltaRuleLanes: the lane-blocked form of CPU adapters under the forward parity
// suite, also against the token-by-token GPU kernel.
func TestGatedDeltaRuleLanes(t *testing.T) {
	skipNoLanes(t, gputest.Open(t))
	testDeltaRule(t, deltaRuleImpl{gpu.GatedDeltaRuleLanes, []int{0}, deltaRuleTokenTol, true})
}

// TestGatedDeltaRuleAuto: the launcher nvgkit calls (chunked where it fits) under the
// forward parity suite, with the tolerance of the form it takes (the cooperative-matrix one
// where tensor cores are on: NVG_TENSOR_CORES=on on a device that has them).
func TestGatedDeltaRuleAuto(t *testing.T) {
	d := gputest.Open(t)
	testDeltaRule(t, deltaRuleImpl{gpu.GatedDeltaRuleAuto, []int{0}, func(dims gpu.DeltaRuleDims) float64 {
		if gpu.GatedDeltaRuleCoopmatFits(d, dims) {
			return deltaRuleCoopTol(dims)
		}
		return deltaRuleChunkedTol(dims)
	}, true})
}

// testDeltaRule is the forward parity suite: impl on every deltaRuleCases geometry and slice
// width against the host's float64 recurrence (o and, where asked, the final state), against
// the token-by-token GPU kernel when impl.vsToken, and its argument errors (wrong t, o
// aliasing q, hv not a multiple of hk, dk not a multiple of 4, a nil recorder: none may
// leave a dispatch recorded).
func testDeltaRule(t *testing.T, impl deltaRuleImpl) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(23, 24))
	for _, tc := range deltaRuleCases {
		for _, cs := range impl.slices {
			dm := tc.dims
			t.Run(fmt.Sprintf("cs=%d nb=%d t=%d hk=%d hv=%d dk=%d dv=%d gscale=%g ve=%d", cs, dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV, tc.gscale, tc.ve), func(t *testing.T) {
				defer gpu.SetGDRCSlice(cs)()
				rows := dm.NB * dm.T
				f, in := chunkedInputs(t, rng, rows, dm.HK, dm.HV, dm.DK, dm.DV, tc.gscale)
				scalePow2(pow2Scaled{f[2], in[2], tc.ve})
				bs := newBufs(t, d)
				q, k, v := bs.up("q", f[0], rows, dm.HK, dm.DK), bs.up("k", f[1], rows, dm.HK, dm.DK), bs.up("v", f[2], rows, dm.HV, dm.DV)
				g, beta := bs.up("g", f[3], rows, dm.HV), bs.up("beta", f[4], rows, dm.HV)
				o, oRef := bs.nw("o", rows, dm.HV, dm.DV), bs.nw("o token", rows, dm.HV, dm.DV)
				var st, stRef *gpu.Buffer
				if tc.state {
					st, stRef = bs.nw("state", dm.NB, dm.HV, dm.DK, dm.DV), bs.nw("state token", dm.NB, dm.HV, dm.DK, dm.DV)
				}
				if err := d.Run(func(r *gpu.Recorder) error {
					if err := impl.run(r, q, k, v, g, beta, o, st, dm); err != nil || !impl.vsToken {
						return err
					}
					return gpu.GatedDeltaRule(r, q, k, v, g, beta, oRef, stRef, dm)
				}); err != nil {
					t.Fatal(err)
				}
				wo, ws, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV, tc.state)
				if err != nil {
					t.Fatal(err)
				}
				tol := impl.tol(dm)
				got := must(d.ReadFloat32(o)).T(t)
				t.Logf("o: max |err|/max|want| %.3g (tolerance %.3g)", checkClose(t, "o vs host", got, wo, tol*maxAbs(wo), 0)/maxAbs(wo), tol)
				if impl.vsToken {
					checkClose(t, "o vs token-by-token GPU", got, f64(must(d.ReadFloat32(oRef)).T(t)), tol*maxAbs(wo), 0)
				}
				if tc.state {
					gs := must(d.ReadFloat32(st)).T(t)
					t.Logf("state: max |err|/max|want| %.3g (tolerance %.3g)", checkClose(t, "state vs host", gs, ws, tol*maxAbs(ws), 0)/maxAbs(ws), tol)
					if impl.vsToken {
						checkClose(t, "state vs token-by-token GPU", gs, f64(must(d.ReadFloat32(stRef)).T(t)), tol*maxAbs(ws), 0)
					}
				}
				r := d.Begin()
				defer r.Discard()
				with := func(f func(*gpu.DeltaRuleDims)) gpu.DeltaRuleDims { x := dm; f(&x); return x }
				for name, err := range map[string]error{
					"wrong t":                 impl.run(r, q, k, v, g, beta, o, st, with(func(x *gpu.DeltaRuleDims) { x.T++ })),
					"o aliasing q":            impl.run(r, q, k, v, g, beta, q, st, dm),
					"hv not a multiple of hk": impl.run(r, q, k, v, g, beta, o, nil, with(func(x *gpu.DeltaRuleDims) { x.HV++ })),
					"dk not a multiple of 4":  impl.run(r, q, k, v, g, beta, o, nil, with(func(x *gpu.DeltaRuleDims) { x.DK += 2 })),
					"nil recorder":            impl.run(nil, q, k, v, g, beta, o, nil, dm),
				} {
					if err == nil {
						t.Errorf("%s accepted", name)
					}
				}
				if r.Len() != 0 {
					t.Errorf("%d dispatches recorded by failing calls", r.Len())
				}
			})
		}
	}
}

// BenchmarkGatedDeltaRule: one window of t = 512 tokens, hk = 1, hv = 2, dk = dv = 128 (the
// recurrence's sequential cost per window), final state written; with NVG_BENCH_LARGE=1
// the model's batch of BenchmarkGatedDeltaRuleChunked (nb = 8 windows of t = 512, hk = 16,
// hv = 32), with NVG_BENCH_BIG=1 a model-sized batch (nb = 8 windows of t = 4096). Reports
// tokens/s of the whole call (submit and readback included) and gpu-µs, the kernel's GPU
// time from the timestamp profiler; "lanes" is GatedDeltaRuleLanes (CPU adapters only).
func BenchmarkGatedDeltaRule(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		env           string
	}{{1, 512, 1, 2, ""}, {8, 512, 16, 32, "NVG_BENCH_LARGE"}, {8, 4096, 16, 32, "NVG_BENCH_BIG"}} {
		for _, lanes := range []bool{false, true} {
			name, run, kernel := "token", gpu.GatedDeltaRule, "GatedDeltaRule"
			if lanes {
				name, run, kernel = "lanes", gpu.GatedDeltaRuleLanes, "GatedDeltaRuleLanes"
			}
			b.Run(fmt.Sprintf("%s,nb=%d,t=%d,hk=%d,hv=%d", name, sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
				if sz.env != "" && os.Getenv(sz.env) != "1" {
					b.Skip("model-sized run: set " + sz.env + "=1")
				}
				if lanes && gputest.Open(b).Info().SubgroupSize == 0 {
					b.Skip("the lane-blocked form runs on CPU adapters")
				}
				dims := gpu.DeltaRuleDims{NB: sz.nb, T: sz.t, HK: sz.hk, HV: sz.hv, DK: 128, DV: 128}
				benchDeltaRule(b, run, dims, func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, st *gpu.Buffer) {
					benchKernel(b, d, kernel, rows, rec, st)
				})
			})
		}
	}
}

// benchDeltaRule uploads deltaInputs of dims (final state written) and hands a call of run
// on them to time (benchKernel), with the rows and the buffer to wait on.
func benchDeltaRule(b *testing.B, run func(r *gpu.Recorder, q, k, v, g, beta, o, state *gpu.Buffer, dims gpu.DeltaRuleDims) error, dims gpu.DeltaRuleDims, time func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, st *gpu.Buffer)) {
	d := gputest.Open(b)
	rng := rand.New(rand.NewPCG(19, 20))
	nb, hk, hv, dk, dv := dims.NB, dims.HK, dims.HV, dims.DK, dims.DV
	rows := nb * dims.T
	f, _ := deltaInputs(b, rng, rows, hk, hv, dk, dv)
	q := must(d.UploadFloat32("q", f[0], rows, hk, dk)).T(b)
	k := must(d.UploadFloat32("k", f[1], rows, hk, dk)).T(b)
	v := must(d.UploadFloat32("v", f[2], rows, hv, dv)).T(b)
	g := must(d.UploadFloat32("g", f[3], rows, hv)).T(b)
	beta := must(d.UploadFloat32("beta", f[4], rows, hv)).T(b)
	o := must(d.NewBuffer("o", gpu.F32, rows, hv, dv)).T(b)
	st := must(d.NewBuffer("state", gpu.F32, nb, hv, dk, dv)).T(b)
	for _, x := range []*gpu.Buffer{q, k, v, g, beta, o, st} {
		defer x.Release()
	}
	time(d, rows, func(r *gpu.Recorder) error { return run(r, q, k, v, g, beta, o, st, dims) }, st)
}

// benchKernel times rec (recorded, submitted and waited for by reading wait back) b.N times
// after one untimed call that compiles the pipeline and 200 ms of warm-up (benchWarm),
// reports tokens/s for rows tokens per
// call, and then, from the timestamp profiler (absent when the device has no timestamp
// queries), the GPU time of one call of kernel name (gpu-µs) or, for name "" (launchers of
// several dispatches), ms per call, the GPU time of every kernel of one call (<kernel>-µs)
// and their sum (gpu-µs-all).
func benchKernel(b *testing.B, d *gpu.Device, name string, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer) {
	run := func() {
		if err := d.Run(rec); err != nil {
			b.Fatal(err)
		}
		if _, err := d.ReadFloat32(wait); err != nil { // waits for the GPU
			b.Fatal(err)
		}
	}
	run()
	benchWarm(run) // the H200 lowers its clock between spaced submits (DESIGN.md §9)
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if name == "" {
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/call")
	}
	if err := d.SetProfiling(true); err != nil {
		return
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	run()
	total := 0.0
	for _, kt := range d.Profile() {
		us := float64(kt.Total.Nanoseconds()) / 1e3
		switch {
		case name == "":
			total += us
			// A metric, not a log line: benchmark logs are truncated without -test.v.
			b.ReportMetric(us, strings.ReplaceAll(kt.Name, " ", "_")+"-µs")
		case kt.Name == name:
			b.ReportMetric(us/float64(kt.Calls), "gpu-µs")
		}
	}
	if name == "" {
		b.ReportMetric(total, "gpu-µs-all")
	}
}

// maxAbs is max |x_i| (0 for an empty slice).
func maxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// TestMixerKernelsNilRecorder: every attention and GatedDeltaNet forward launcher returns an
// error, not a panic, for a nil recorder (checked before any buffer is looked at).
func TestMixerKernelsNilRecorder(t *testing.T) {
	var b *gpu.Buffer
	for name, err := range map[string]error{
		"CausalConv1dSiLU": gpu.CausalConv1dSiLU(nil, b, b, b, 1, 1, 1, 4),
		"GatedDeltaGates":  gpu.GatedDeltaGates(nil, b, b, b, b, b, b, 1, 1),
		"L2Norm":           gpu.L2Norm(nil, b, b, 1, 1, 1),
		"GatedDeltaRule":   gpu.GatedDeltaRule(nil, b, b, b, b, b, b, nil, gpu.DeltaRuleDims{NB: 1, T: 1, HK: 1, HV: 1, DK: 4, DV: 4}),
		"GatedRMSNorm":     gpu.GatedRMSNorm(nil, b, b, b, b, 1, 1, 1, 1e-6),
		"SplitQueryGate":   gpu.SplitQueryGate(nil, b, b, b, 1, 1, 1),
		"QKNormRoPE":       gpu.QKNormRoPE(nil, b, b, b, gpu.QKNormRoPEDims{Rows: 1, Heads: 1, HeadDim: 2, Eps: 1e-6, Rot: 2, Theta: 1e4, T: 1}),
		"Attention":        gpu.Attention(nil, b, b, b, b, b, gpu.AttentionDims{NB: 1, T: 1, NH: 1, NKV: 1, HeadDim: 4}),
		"AttentionGate":    gpu.AttentionGate(nil, b, b, b),
	} {
		if err == nil {
			t.Errorf("%s accepted a nil recorder", name)
		}
	}
}
