package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

// chunkedInputs is deltaInputs with g multiplied by gscale (still ≤ 0, rounded to f32).
func chunkedInputs(t testing.TB, rng *rand.Rand, rows, hk, hv, dk, dv int, gscale float64) (f [5][]float32, d [5][]float64) {
	f, d = deltaInputs(t, rng, rows, hk, hv, dk, dv)
	for i := range d[3] {
		f[3][i] = float32(d[3][i] * gscale)
		d[3][i] = float64(f[3][i])
	}
	return f, d
}

// TestGatedDeltaRuleChunked: the chunked form under the forward parity suite (testDeltaRule),
// with the device's inter-chunk slice width and with 8 columns, and compared with the
// token-by-token GPU kernel too.
func TestGatedDeltaRuleChunked(t *testing.T) {
	testDeltaRule(t, deltaRuleImpl{gpu.GatedDeltaRuleChunked, []int{0, 8}, deltaRuleChunkedTol, true})
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
// and the GPU time of each kernel and of all (benchKernel with no name).
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
	benchDeltaRule(b, gpu.GatedDeltaRuleChunked, gpu.DeltaRuleDims{NB: nb, T: tt, HK: hk, HV: hv, DK: dk, DV: dv}, func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, st *gpu.Buffer) {
		benchKernel(b, d, "", rows, rec, st)
	})
}
