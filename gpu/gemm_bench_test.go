package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// gemmBenchShape is one GEMM geometry of the benchmark: Linear y = x·Wᵀ with x [rows, k],
// W [n, k]; LinearT runs the transposed product dx = dy·W (N = k, K = n) on the same W.
type gemmBenchShape struct {
	name string
	n, k int
}

// blrBenchShape is one BLR layer of the benchmark: m outputs, n inputs, rank r.
type blrBenchShape struct {
	name    string
	m, n, r int
}

// gemmBenchRows and the shape lists: the model's real shapes (rows = 8 windows × 512
// tokens; Qwen3.5 0.8B, 4B, 9B MLP, projections, head slice of 4096 vocabulary rows) with
// NVG_BENCH_LARGE=1, else small ones that run in seconds on lavapipe.
func gemmBenchShapes() (rows int, dense []gemmBenchShape, blr []blrBenchShape) {
	if os.Getenv("NVG_BENCH_LARGE") == "" {
		return 64, []gemmBenchShape{{"small", 96, 64}, {"small2", 64, 160}},
			[]blrBenchShape{{"small", 96, 64, 32}}
	}
	return 4096, []gemmBenchShape{
			{"sq4096", 4096, 4096},
			{"0.8B.gate", 3584, 1024}, {"0.8B.head", 4096, 1024}, {"0.8B.proj2048", 2048, 1024},
			{"0.8B.proj6144", 6144, 1024},
			{"4B.gate", 9216, 2560}, {"4B.proj6144", 6144, 2560},
			{"9B.gate", 12288, 4096}, {"9B.proj6144", 6144, 4096},
		}, []blrBenchShape{
			{"0.8B.gate", 3584, 1024, 384}, {"0.8B.down", 1024, 3584, 384},
			{"4B.gate", 9216, 2560, 896}, {"9B.gate", 12288, 4096, 1408},
		}
}

// gemmBenchVariants: NVG_GEMM_VARIANTS, a comma-separated list of variants for
// applyGEMMVariant ("auto" when unset).
func gemmBenchVariants() []string {
	v := os.Getenv("NVG_GEMM_VARIANTS")
	if v == "" {
		return []string{"auto"}
	}
	return strings.Split(v, ",")
}

// printGEMMProfile prints one line per kernel of the device's profile, tagged with the
// variant and shape, and returns the profile.
func printGEMMProfile(d *gpu.Device, variant, shape string) gpu.Profile {
	p := d.Profile()
	for _, k := range p {
		fmt.Printf("GEMMROW variant=%-16s shape=%-14s kernel=%-20s calls=%3d mean_us=%9.1f TFLOPs=%6.2f\n",
			variant, shape, k.Name, k.Calls, float64(k.Total.Microseconds())/float64(max(k.Calls, 1)), k.TFLOPs())
	}
	return p
}

// benchWarm keeps the GPU busy with run for at least 200 ms of wall time before a
// measurement: on the H200 the SM clock falls (to 345 MHz when idle) between short, spaced
// submits, and a measurement taken after host gaps (allocation, upload, compilation) reads a
// fraction of the kernel's speed.
func benchWarm(run func()) {
	start := time.Now()
	for time.Since(start) < 200*time.Millisecond {
		run()
	}
}

// benchReps is how many times (1 to 16) one measured submit repeats a product of flops
// arithmetic so that it holds ~0.5 TFLOP of work where it can (no idle gap between kernels).
func benchReps(flops float64) int {
	return min(16, max(1, int(5e11/flops)))
}

// BenchmarkGEMM profiles Linear and LinearT (f16 W, M = rows) and the BLR sign GEMMs
// (BLRForward and BLRBackward with t1 kept, one path) on the shapes of gemmBenchShapes, for
// each variant of NVG_GEMM_VARIANTS, printing per-kernel GPU time and TFLOP/s (GEMMROW
// lines). Each measurement follows a warm-up (benchWarm) and repeats the products within
// one submit (benchReps). Needs timestamp queries. Run with -benchtime 3x.
func BenchmarkGEMM(b *testing.B) {
	d := gputest.Open(b)
	if err := d.SetProfiling(true); err != nil {
		b.Skip(err)
	}
	defer d.SetProfiling(false)
	rows, dense, blr := gemmBenchShapes()
	rng := rand.New(rand.NewPCG(3, 5))
	for _, sh := range dense {
		var bufs []*gpu.Buffer
		keep := func(buf *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, buf); return buf }
		wb, _ := randF16(rng, 1024, 1)
		full := make([]uint16, sh.n*sh.k)
		for i := range full {
			full[i] = wb[i%len(wb)]
		}
		x := keep(must(d.NewBuffer("x", gpu.F32, rows, sh.k)).T(b))
		w := keep(must(d.UploadF16("W", full, sh.n, sh.k)).T(b))
		y := keep(must(d.NewBuffer("y", gpu.F32, rows, sh.n)).T(b))
		dx := keep(must(d.NewBuffer("dx", gpu.F32, rows, sh.k)).T(b))
		reps := benchReps(4 * float64(rows) * float64(sh.n) * float64(sh.k))
		run := func() {
			err := d.Run(func(r *gpu.Recorder) error {
				for range reps {
					if err := gpu.Linear(r, x, w, y, rows, sh.k, sh.n); err != nil {
						return err
					}
					if err := gpu.LinearT(r, y, w, dx, rows, sh.k, sh.n); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, v := range gemmBenchVariants() {
			b.Run(sh.name+"/"+v, func(b *testing.B) {
				defer applyGEMMVariant(b, v)()
				benchWarm(run)
				d.ResetProfile()
				for b.Loop() {
					run()
				}
				for _, k := range printGEMMProfile(d, v, sh.name) {
					b.ReportMetric(k.TFLOPs(), k.Name+"-TFLOP/s")
				}
			})
		}
		for _, buf := range bufs {
			buf.Release()
		}
	}
	for _, sh := range blr {
		w := randBLR(rng, sh.m, sh.n, sh.r, 1, sh.r)
		l := uploadBLR(b, d, w, sh.r)
		var bufs []*gpu.Buffer
		keep := func(buf *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, buf); return buf }
		x := keep(must(d.NewBuffer("x", gpu.F32, rows, sh.n)).T(b))
		y := keep(must(d.NewBuffer("y", gpu.F32, rows, sh.m)).T(b))
		dx := keep(must(d.NewBuffer("dx", gpu.F32, rows, sh.n)).T(b))
		t1 := []*gpu.Buffer{keep(must(d.NewBuffer("t1", gpu.F32, rows, sh.r)).T(b))}
		grads := []gpu.BLRGrad{{H: keep(must(d.NewBuffer("dh", gpu.F32, sh.m)).T(b)),
			L: keep(must(d.NewBuffer("dl", gpu.F32, sh.r)).T(b)), G: keep(must(d.NewBuffer("dg", gpu.F32, sh.n)).T(b))}}
		reps := benchReps(2 * float64(rows) * float64(sh.r) * float64(3*sh.m+2*sh.n))
		run := func() {
			err := d.Run(func(r *gpu.Recorder) error {
				for range reps {
					if err := gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: t1}, rows); err != nil {
						return err
					}
					if err := gpu.BLRBackward(r, l, x, gpu.BLRKept{T1: t1}, y, dx, grads, rows); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, v := range gemmBenchVariants() {
			b.Run("BLR."+sh.name+"/"+v, func(b *testing.B) {
				defer applyGEMMVariant(b, v)()
				benchWarm(run)
				d.ResetProfile()
				for b.Loop() {
					run()
				}
				for _, k := range printGEMMProfile(d, v, "BLR."+sh.name) {
					if k.Flops > 0 {
						b.ReportMetric(k.TFLOPs(), k.Name+"-TFLOP/s")
					}
				}
			})
		}
		for _, buf := range bufs {
			buf.Release()
		}
		l.Release()
	}
}
