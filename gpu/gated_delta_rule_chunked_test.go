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

// chunkedCases are the geometries of the chunked tests: t not a multiple of the chunk of
// 64 (37: one short chunk; 100, 130: a short last chunk), hv/hk = 1 and 2, several
// windows, dv not a multiple of 4 or of the 32-column slice, the model's dk = dv = 128 with
// a small t, and gscale > 1 multiplying the model-range g (down to about −100 per token,
// so the chunk's cumulative decays underflow f32 entirely).
var chunkedCases = []struct {
	nb, t, hk, hv, dk, dv int
	gscale                float64
	state                 bool
}{
	{2, 100, 1, 2, 16, 16, 1, true},
	{3, 37, 2, 2, 32, 32, 1, false},
	{2, 130, 2, 4, 16, 37, 1, true},
	{1, 130, 1, 1, 16, 16, 40, true},
	{2, 70, 1, 2, 128, 128, 1, true},
	{1, 1, 1, 1, 8, 3, 1, true},
}

// chunkedInputs is deltaInputs with g multiplied by gscale (still ≤ 0, rounded to f32).
func chunkedInputs(t testing.TB, rng *rand.Rand, rows, hk, hv, dk, dv int, gscale float64) (f [5][]float32, d [5][]float64) {
	f, d = deltaInputs(t, rng, rows, hk, hv, dk, dv)
	for i := range d[3] {
		f[3][i] = float32(d[3][i] * gscale)
		d[3][i] = float64(f[3][i])
	}
	return f, d
}

// TestGatedDeltaRuleChunked compares the chunked form with the host's float64 token-by-token
// recurrence and with the token-by-token GPU kernel. Tolerance: within a chunk each output
// is a sum of dot products of dk terms (W·S, Q·S, K·Kᵀ, Q·Kᵀ) and of ≤ 64 terms (Aqk·V',
// the forward substitution, the state update); the substitution's matrix I + A is unit
// lower triangular with |A_is| ≤ β_i|k_i·k_s| < 1, and the recurrence it solves is the
// delta rule's non-expansive one, so its rounding errors do not grow either; across chunks
// S is carried by the same non-expansive map as in TestGatedDeltaRule. Independent
// roundings random-walk to ~√((t/64 + 1)·(4dk + 3·64))·u relative to the largest value
// (per chunk four dk-term and three 64-term sums); checked as
// atol = 16·√((t/64 + 1)·(4dk + 192))·u·max|want|, at least TestGatedDeltaRule's
// 16·√(t·(2dk + 4))·u·max|want| bound for the short cases. The same tolerance applies
// against the GPU token-by-token kernel (both are within it of the f64 result).
func TestGatedDeltaRuleChunked(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(23, 24))
	for _, tc := range chunkedCases {
		for _, cs := range []int{0, 8} {
			t.Run(fmt.Sprintf("cs=%d nb=%d t=%d hk=%d hv=%d dk=%d dv=%d gscale=%g", cs, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv, tc.gscale), func(t *testing.T) {
				defer gpu.SetGDRCSlice(cs)()
				rows := tc.nb * tc.t
				f, in := chunkedInputs(t, rng, rows, tc.hk, tc.hv, tc.dk, tc.dv, tc.gscale)
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
				q, k, v := up("q", f[0], rows, tc.hk, tc.dk), up("k", f[1], rows, tc.hk, tc.dk), up("v", f[2], rows, tc.hv, tc.dv)
				g, beta := up("g", f[3], rows, tc.hv), up("beta", f[4], rows, tc.hv)
				o, oRef := nw("o", rows, tc.hv, tc.dv), nw("o token", rows, tc.hv, tc.dv)
				var st, stRef *gpu.Buffer
				if tc.state {
					st, stRef = nw("state", tc.nb, tc.hv, tc.dk, tc.dv), nw("state token", tc.nb, tc.hv, tc.dk, tc.dv)
				}
				if err := d.Run(func(r *gpu.Recorder) error {
					if err := gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, st, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv); err != nil {
						return err
					}
					return gpu.GatedDeltaRule(r, q, k, v, g, beta, oRef, stRef, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv)
				}); err != nil {
					t.Fatal(err)
				}
				wo, ws, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv, tc.state)
				if err != nil {
					t.Fatal(err)
				}
				nck := float64((tc.t + 63) / 64)
				tol := math.Max(16*math.Sqrt((nck+1)*float64(4*tc.dk+192))*u32, 16*math.Sqrt(float64(tc.t*(2*tc.dk+4)))*u32)
				got := must(d.ReadFloat32(o)).T(t)
				checkClose(t, "chunked o vs host", got, wo, tol*maxAbs(wo), 0)
				checkClose(t, "chunked o vs token-by-token GPU", got, f64(must(d.ReadFloat32(oRef)).T(t)), tol*maxAbs(wo), 0)
				if tc.state {
					gs := must(d.ReadFloat32(st)).T(t)
					checkClose(t, "chunked state vs host", gs, ws, tol*maxAbs(ws), 0)
					checkClose(t, "chunked state vs token-by-token GPU", gs, f64(must(d.ReadFloat32(stRef)).T(t)), tol*maxAbs(ws), 0)
				}
				r := d.Begin()
				defer r.Discard()
				if err := gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, st, tc.nb, tc.t+1, tc.hk, tc.hv, tc.dk, tc.dv); err == nil {
					t.Error("wrong t accepted")
				}
				if err := gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, q, st, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv); err == nil {
					t.Error("o aliasing q accepted")
				}
				if err := gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, nil, tc.nb, tc.t, tc.hk, tc.hv+1, tc.dk, tc.dv); err == nil {
					t.Error("hv not a multiple of hk accepted")
				}
				if err := gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, nil, tc.nb, tc.t, tc.hk, tc.hv, tc.dk+2, tc.dv); err == nil {
					t.Error("dk not a multiple of 4 accepted")
				}
				if err := gpu.GatedDeltaRuleChunked(nil, q, k, v, g, beta, o, nil, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv); err == nil {
					t.Error("nil recorder accepted")
				}
				if r.Len() != 0 {
					t.Errorf("%d dispatches recorded by failing calls", r.Len())
				}
			})
		}
	}
}

// f64 widens float32 values.
func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// BenchmarkGatedDeltaRuleChunked: as BenchmarkGatedDeltaRule (one window of t = 512,
// hk = 1, hv = 2, dk = dv = 128, final state written), and with NVG_BENCH_LARGE=1 the
// model's batch nb = 8 windows of t = 512, hk = 16, hv = 32. Reports tokens/s, ms per call
// and the GPU time of each kernel and of all (benchKernelAll).
func BenchmarkGatedDeltaRuleChunked(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		large         bool
	}{{1, 512, 1, 2, false}, {8, 512, 16, 32, true}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
			if sz.large && os.Getenv("NVG_BENCH_LARGE") != "1" {
				b.Skip("model-sized run: set NVG_BENCH_LARGE=1")
			}
			benchGatedDeltaRuleChunked(b, sz.nb, sz.t, sz.hk, sz.hv, 128, 128)
		})
	}
}

func benchGatedDeltaRuleChunked(b *testing.B, nb, tt, hk, hv, dk, dv int) {
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
	benchKernelAll(b, d, rows, func(r *gpu.Recorder) error {
		return gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, o, st, nb, tt, hk, hv, dk, dv)
	}, st)
}

// benchKernelAll is benchKernel reporting the GPU time of every kernel of one call
// (<kernel>-µs) and their sum (gpu-µs-all), for launchers of several dispatches.
func benchKernelAll(b *testing.B, d *gpu.Device, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer) {
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
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/call")
	if err := d.SetProfiling(true); err != nil {
		return
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	run()
	total := 0.0
	for _, kt := range d.Profile() {
		us := float64(kt.Total.Nanoseconds()) / 1e3
		total += us
		// A metric, not a log line: benchmark logs are truncated without -test.v.
		b.ReportMetric(us, strings.ReplaceAll(kt.Name, " ", "_")+"-µs")
	}
	b.ReportMetric(total, "gpu-µs-all")
}
