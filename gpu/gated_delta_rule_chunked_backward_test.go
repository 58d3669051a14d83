package gpu_test

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestGatedDeltaRuleChunkedBackward: the chunked backward under the backward parity suite
// (testDeltaRuleBackward), on the cases with dk and dv multiples of 4, compared with the
// token-by-token GPU backward too.
func TestGatedDeltaRuleChunkedBackward(t *testing.T) {
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleChunkedBackward, deltaRuleBackwardChunkedTol, true, true, true})
}

// BenchmarkGatedDeltaRuleChunkedBackward: as BenchmarkGatedDeltaRuleBackward's small case
// (nb = 1, t = 512, hk = 1, hv = 2, dk = dv = 128), and with NVG_BENCH_LARGE=1 the student
// step's batch nb = 8, t = 512 with the 0.8B's heads (hk = hv = 16) and the 4B's (hk = 16,
// hv = 32), for the chunked backward in the kernel forms of
// NVG_TC_VARIANTS (wgsl: GatedDeltaRuleChunkedBackward, coopmat:
// GatedDeltaRuleChunkedBackwardCoopmat) and, at the model's batch, the token-by-token one.
// Reports tokens/s and ms per call (submit and readback included) and gpu-µs-all, the
// summed GPU time of all the call's kernels.
func BenchmarkGatedDeltaRuleChunkedBackward(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		large         bool
	}{{1, 512, 1, 2, false}, {8, 512, 16, 16, true}, {8, 512, 16, 32, true}} {
		dims := gpu.DeltaRuleDims{NB: sz.nb, T: sz.t, HK: sz.hk, HV: sz.hv, DK: 128, DV: 128}
		bench := func(b *testing.B, bw func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error) {
			if sz.large && os.Getenv("NVG_BENCH_LARGE") != "1" {
				b.Skip("model-sized run: set NVG_BENCH_LARGE=1")
			}
			benchDeltaRuleBackward(b, bw, dims, func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, wait *gpu.Buffer) {
				benchKernel(b, d, "", rows, rec, wait)
			})
		}
		b.Run(fmt.Sprintf("chunked,nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
			eachTCVariant(b, func(b *testing.B, coop bool) {
				bw := gpu.GatedDeltaRuleChunkedBackward
				if coop {
					bw = gpu.GatedDeltaRuleChunkedBackwardCoopmat
				}
				bench(b, bw)
			})
		})
		if sz.large {
			b.Run(fmt.Sprintf("token,nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
				bench(b, gpu.GatedDeltaRuleBackward)
			})
		}
	}
}

// TestGatedDeltaRuleChunkedBackwardCoopmat: the chunked backward with its products on
// cooperative matrices (where tensor cores are available) under the backward parity suite,
// on the cases with dk and dv multiples of 4, compared with the token-by-token GPU backward
// too, with deltaRuleBackwardCoopTol (a second call gives the same bits: no atomics), also
// under the GPUs' tiles and the widest ones (as TestGatedDeltaRuleChunkedCoopmat).
func TestGatedDeltaRuleChunkedBackwardCoopmat(t *testing.T) {
	skipNoCoopmat(t, gputest.Open(t))
	coop0 := gpu.CoopDispatches()
	testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.GatedDeltaRuleChunkedBackwardCoopmat, deltaRuleBackwardCoopTol, true, true, true})
	t.Run("gputiles", func(t *testing.T) {
		testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpuTiles(gpu.GatedDeltaRuleChunkedBackwardCoopmat), deltaRuleBackwardCoopTol, true, true, true})
	})
	t.Run("wide", func(t *testing.T) {
		testDeltaRuleBackward(t, deltaRuleBackwardImpl{wideDeltaTiles(gpu.GatedDeltaRuleChunkedBackwardCoopmat), deltaRuleBackwardCoopTol, true, true, true})
	})
	if gpu.CoopDispatches() == coop0 {
		t.Error("no cooperative-matrix kernel recorded")
	}
}

// deltaRuleBackwardCoopTol is the cooperative-matrix backward's tolerance relative to each
// output's scale (testDeltaRuleBackward's). Every product of its f16 operands (each rounded
// once, ≤ e16 relative; values below 2⁻²⁸ of their block's largest round to subnormals, a
// negligible 2⁻³⁹ of it) adds ≤ 2e16 of the sizes it combines, which the model's inputs keep
// at the size of the outputs. Per chunk an output passes through at most eight chained
// products: the forward's three that make the saved states and V' (deltaRuleCoopTol), Dhu's
// three that make dh and dV' (K·dS and Aqkᵀ·dO, then Qᵀ·dO and Wᵀ·dV' carried to the next
// chunk), and two of the chunk-parallel stages (dO·V'ᵀ then dM·K; dR·[W U]ᵀ then F·K; or one:
// dO·Sᵀ, V'·dHᵀ, dV'·Sᵀ), the WY substitution and Final in f32. The recurrences are
// non-expansive (deltaRuleBackwardChunkedTol), so the chunks' errors add: atol =
// 16·(⌈t/64⌉ + 1)·e16·scale (3.1 % at one chunk), at least the f32 form's tolerance.
func deltaRuleBackwardCoopTol(d gpu.DeltaRuleDims) float64 {
	nck := float64((d.T + 63) / 64)
	return math.Max(16*(nck+1)*e16, deltaRuleBackwardChunkedTol(d))
}
