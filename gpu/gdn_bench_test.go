package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// BenchmarkGatedDeltaNetRows profiles the GatedDeltaNet's memory-bound kernels around the
// delta rule — CausalConv1dSiLU and its backward, L2Norm and its backward (keys and queries:
// tokens·heads rows of dk), GatedRMSNorm and its backward — on one layer of Qwen3.5 0.8B
// (8 windows × 512 tokens, 16 key and 16 value heads of 128, 6,144 conv channels, 4 taps)
// with NVG_BENCH_LARGE=1, else on a small shape, printing per-kernel GPU time and GB/s
// (GDNROW lines) for each variant of NVG_GDN_VARIANTS: "auto", "conv-runs" (the causal
// convolution's run form), "conv-element" (its per-element form) and "rows-N" (the norms'
// workgroup form with N rows a workgroup). Needs timestamp queries. Run with -benchtime 3x.
func BenchmarkGatedDeltaNetRows(b *testing.B) {
	d := gputest.Open(b)
	if err := d.SetProfiling(true); err != nil {
		b.Skip(err)
	}
	defer d.SetProfiling(false)
	nb, t, heads, dk, K := 2, 64, 4, 32, 4
	if os.Getenv("NVG_BENCH_LARGE") != "" {
		nb, t, heads, dk = 8, 512, 16, 128
	}
	rows, hd := nb*t, heads*dk
	ch := 3 * hd
	rng := rand.New(rand.NewPCG(7, 11))
	var bufs []*gpu.Buffer
	up := func(scale float64, n int) *gpu.Buffer {
		v, _ := randF32(rng, n, scale)
		buf := must(d.UploadFloat32("in", v, n)).T(b)
		bufs = append(bufs, buf)
		return buf
	}
	defer func() {
		for _, buf := range bufs {
			buf.Release()
		}
	}()
	x, w, dy, y, dx := up(1, rows*ch), up(0.5, ch*K), up(1, rows*ch), up(1, rows*ch), up(1, rows*ch)
	k, kn, kdy, kdx, kdz := up(1, rows*hd), up(1, rows*hd), up(1, rows*hd), up(1, rows*hd), up(1, rows*hd)
	nw, nz, ndw := up(1, dk), up(1, rows*hd), up(1, dk)
	run := func() {
		err := d.Run(func(r *gpu.Recorder) error {
			if err := gpu.CausalConv1dSiLU(r, x, w, y, nb, t, ch, K); err != nil {
				return err
			}
			if err := gpu.CausalConv1dSiLUBackward(r, x, w, dy, dx, nb, t, ch, K); err != nil {
				return err
			}
			if err := gpu.L2Norm(r, k, kn, rows*heads, dk, 1); err != nil {
				return err
			}
			if err := gpu.L2NormBackward(r, k, kdy, kdx, rows*heads, dk, 1); err != nil {
				return err
			}
			if err := gpu.GatedRMSNorm(r, k, nz, nw, kn, rows, heads, dk, 1e-6); err != nil {
				return err
			}
			return gpu.GatedRMSNormBackward(r, k, nz, nw, kdy, kdx, kdz, ndw, rows, heads, dk, 1e-6)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range benchVariants("NVG_GDN_VARIANTS", "auto") {
		b.Run(v, func(b *testing.B) {
			switch v {
			case "auto":
			case "conv-runs", "conv-element":
				defer gpu.SetCausalConvRuns(v == "conv-runs")()
			default:
				var rw int
				if _, err := fmt.Sscanf(v, "rows-%d", &rw); err != nil || rw < 1 {
					b.Fatalf("variant %q: want auto, conv-runs, conv-element or rows-N (N ≥ 1)", v)
				}
				defer both(gpu.SetRowLanes(false), gpu.SetRowGroupRows(rw))()
			}
			benchProfiled(b, d, run)
			for _, kt := range d.Profile() {
				fmt.Printf("GDNROW variant=%-12s kernel=%-32s calls=%3d mean_us=%8.1f GB/s=%7.0f\n",
					v, kt.Name, kt.Calls, float64(kt.Total.Microseconds())/float64(max(kt.Calls, 1)), kt.GBps())
				b.ReportMetric(kt.GBps(), kt.Name+"-GB/s")
			}
		})
	}
}
