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

// TestGatedDeltaRule compares the recurrence with the host's float64 one, on the model's
// dk = dv = 128 (t = 37, two windows, GVA hv = 2·hk, the final state too) and on an awkward
// geometry (dv = 37 not a multiple of the 32-column slice, dk = 12, hv = 3·hk, key head
// mapping j / 3), and t = 1. Tolerance: each step forms two dk-term f32 dot products and a
// few products per state entry, and the state map S ↦ (I − βkkᵀ)·e^g·S is non-expansive
// (|k| = 1, β ∈ (0,1), g ≤ 0), so rounding errors of the t steps add up without growth; as
// independent roundings they random-walk to ~√(t·(2dk+4))·u relative to the largest value
// (the worst case, linear in t·dk, is ~100× looser and would hide real bugs). Checked as
// atol = 16·√(t·(2dk+4))·u·max|want| (8.5e-5 relative at t = 37, dk = 128), rtol 0.
func TestGatedDeltaRule(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(17, 18))
	for _, tc := range []struct {
		nb, t, hk, hv, dk, dv int
		state                 bool
	}{{2, 37, 1, 2, 128, 128, true}, {3, 5, 2, 6, 12, 37, false}, {1, 1, 1, 1, 8, 3, true}} {
		rows := tc.nb * tc.t
		f, in := deltaInputs(t, rng, rows, tc.hk, tc.hv, tc.dk, tc.dv)
		q := must(d.UploadFloat32("q", f[0], rows, tc.hk, tc.dk)).T(t)
		k := must(d.UploadFloat32("k", f[1], rows, tc.hk, tc.dk)).T(t)
		v := must(d.UploadFloat32("v", f[2], rows, tc.hv, tc.dv)).T(t)
		g := must(d.UploadFloat32("g", f[3], rows, tc.hv)).T(t)
		beta := must(d.UploadFloat32("beta", f[4], rows, tc.hv)).T(t)
		o := must(d.NewBuffer("o", gpu.F32, rows, tc.hv, tc.dv)).T(t)
		var st *gpu.Buffer
		if tc.state {
			st = must(d.NewBuffer("state", gpu.F32, tc.nb, tc.hv, tc.dk, tc.dv)).T(t)
		}
		if err := d.Run(func(r *gpu.Recorder) error {
			return gpu.GatedDeltaRule(r, q, k, v, g, beta, o, st, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv)
		}); err != nil {
			t.Fatal(err)
		}
		wo, ws, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv, tc.state)
		if err != nil {
			t.Fatal(err)
		}
		tol := 16 * math.Sqrt(float64(tc.t*(2*tc.dk+4))) * u32
		checkClose(t, "GatedDeltaRule o", must(d.ReadFloat32(o)).T(t), wo, tol*maxAbs(wo), 0)
		if tc.state {
			checkClose(t, "GatedDeltaRule state", must(d.ReadFloat32(st)).T(t), ws, tol*maxAbs(ws), 0)
		}
		r := d.Begin()
		if err := gpu.GatedDeltaRule(r, q, k, v, g, beta, o, st, tc.nb, tc.t+1, tc.hk, tc.hv, tc.dk, tc.dv); err == nil {
			t.Error("wrong t accepted")
		}
		if err := gpu.GatedDeltaRule(r, q, k, v, g, beta, q, st, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv); err == nil {
			t.Error("o aliasing q accepted")
		}
		if err := gpu.GatedDeltaRule(r, q, k, v, g, beta, o, nil, tc.nb, tc.t, tc.hk, tc.hv+1, tc.dk, tc.dv); err == nil {
			t.Error("hv not a multiple of hk accepted")
		}
		if r.Len() != 0 {
			t.Errorf("%d dispatches recorded by failing calls", r.Len())
		}
		r.Discard()
		for _, b := range []*gpu.Buffer{q, k, v, g, beta, o, st} {
			if b != nil {
				b.Release()
			}
		}
	}
}

// BenchmarkGatedDeltaRule: one window of t = 512 tokens, hk = 1, hv = 2, dk = dv = 128 (the
// recurrence's sequential cost per window), final state written; with NVG_BENCH_LARGE=1
// the model's batch of BenchmarkGatedDeltaRuleChunked (nb = 8 windows of t = 512, hk = 16,
// hv = 32), with NVG_BENCH_BIG=1 a model-sized batch (nb = 8 windows of t = 4096). Reports
// tokens/s of the whole call (submit and readback included) and gpu-µs, the kernel's GPU
// time from the timestamp profiler.
func BenchmarkGatedDeltaRule(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		env           string
	}{{1, 512, 1, 2, ""}, {8, 512, 16, 32, "NVG_BENCH_LARGE"}, {8, 4096, 16, 32, "NVG_BENCH_BIG"}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
			if sz.env != "" && os.Getenv(sz.env) != "1" {
				b.Skip("model-sized run: set " + sz.env + "=1")
			}
			benchGatedDeltaRule(b, sz.nb, sz.t, sz.hk, sz.hv, 128, 128)
		})
	}
}

func benchGatedDeltaRule(b *testing.B, nb, tt, hk, hv, dk, dv int) {
	d := gputest.Open(b)
	rng := rand.New(rand.NewPCG(19, 20))
	rows := nb * tt
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
	benchKernel(b, d, "GatedDeltaRule", rows, func(r *gpu.Recorder) error {
		return gpu.GatedDeltaRule(r, q, k, v, g, beta, o, st, nb, tt, hk, hv, dk, dv)
	}, st)
}

// benchKernel times rec (recorded, submitted and waited for by reading wait back) b.N times
// after one untimed call that compiles the pipeline, reports tokens/s for rows tokens per
// call, and then the GPU time of one call of kernel name from the timestamp profiler
// (gpu-µs; absent when the device has no timestamp queries).
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
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if err := d.SetProfiling(true); err != nil {
		return
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	run()
	for _, kt := range d.Profile() {
		if kt.Name == name {
			b.ReportMetric(float64(kt.Total.Nanoseconds())/1e3/float64(kt.Calls), "gpu-µs")
		}
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
		"GatedDeltaRule":   gpu.GatedDeltaRule(nil, b, b, b, b, b, b, nil, 1, 1, 1, 1, 4, 4),
		"GatedRMSNorm":     gpu.GatedRMSNorm(nil, b, b, b, b, 1, 1, 1, 1e-6),
		"SplitQueryGate":   gpu.SplitQueryGate(nil, b, b, b, 1, 1, 1),
		"QKNormRoPE":       gpu.QKNormRoPE(nil, b, b, b, 1, 1, 2, 1e-6, 2, 1e4, 1),
		"Attention":        gpu.Attention(nil, b, b, b, b, b, 1, 1, 1, 1, 4),
		"AttentionGate":    gpu.AttentionGate(nil, b, b, b),
	} {
		if err == nil {
			t.Errorf("%s accepted a nil recorder", name)
		}
	}
}
