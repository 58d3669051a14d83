package gpu_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

// TestGatedDeltaRuleChunkedBackward: the chunked backward under the backward parity suite
// (testDeltaRuleBackward), on the cases with dk and dv multiples of 4, compared with the
// token-by-token GPU backward too.
func TestGatedDeltaRuleChunkedBackward(t *testing.T) {
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleChunkedBackward, deltaRuleBackwardChunkedTol, true, true, true})
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
				bw := gpu.GatedDeltaRuleBackward
				if chunked {
					bw = gpu.GatedDeltaRuleChunkedBackward
				}
				benchDeltaRuleBackward(b, bw, gpu.DeltaRuleDims{NB: sz.nb, T: sz.t, HK: sz.hk, HV: sz.hv, DK: 128, DV: 128},
					func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer) {
						benchKernel(b, d, "", rows, rec, wait)
					})
			})
		}
	}
}
