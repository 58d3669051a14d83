package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// BenchmarkLinearQuant profiles y = x·Wᵀ with W as an f16 plane (Linear) and as 8-bit
// codes (LinearQuant: FP8 with f32 scales per 128×128 block, q8 with f16 scales per 128
// inputs) on gemmBenchShapes' dense shapes and, with NVG_BENCH_LARGE=1, the 27B MLP and
// projection shapes, printing per-kernel GPU time and TFLOP/s (GEMMROW lines; the kernel
// names tell the three apart: Linear, LinearQuant.fp8, LinearQuant.q8). Each measurement
// follows a warm-up and repeats the products within one submit, as BenchmarkGEMM. Needs
// timestamp queries. Run with -benchtime 3x.
func BenchmarkLinearQuant(b *testing.B) {
	d := gputest.Open(b)
	if err := d.SetProfiling(true); err != nil {
		b.Skip(err)
	}
	defer d.SetProfiling(false)
	rows, dense, _ := gemmBenchShapes()
	if rows > 64 {
		dense = append(dense, gemmBenchShape{"27B.gate", 17408, 5120}, gemmBenchShape{"27B.down", 5120, 17408}, gemmBenchShape{"27B.proj6144", 6144, 5120})
	}
	rng := rand.New(rand.NewPCG(3, 6))
	for _, sh := range dense {
		wb, _ := randF16(rng, 1024, 1)
		full := make([]uint16, sh.n*sh.k)
		codes := make([]byte, sh.n*sh.k)
		for i := range full {
			full[i] = wb[i%len(wb)]
			codes[i] = byte(i*37) &^ 0x40 // finite FP8 codes, any int8
		}
		x := must(d.NewBuffer("x", gpu.F32, rows, sh.k)).T(b)
		y := must(d.NewBuffer("y", gpu.F32, rows, sh.n)).T(b)
		w := must(d.UploadF16("W", full, sh.n, sh.k)).T(b)
		qc := must(d.UploadQuantCodes("codes", codes, sh.n, sh.k)).T(b)
		fp8 := gpu.QuantWeight{Codes: qc, Format: gpu.QuantFP8, Out: sh.n, In: sh.k, Block: [2]int{128, 128}}
		fp8.Scales = must(d.UploadFloat32("fp8 scales", make([]float32, ((sh.n+127)/128)*((sh.k+127)/128)), (sh.n+127)/128, (sh.k+127)/128)).T(b)
		q8 := gpu.QuantWeight{Codes: qc, Format: gpu.QuantQ8, Out: sh.n, In: sh.k, Block: [2]int{1, 128}}
		q8.Scales = must(d.UploadF16("q8 scales", make([]uint16, sh.n*((sh.k+127)/128)), sh.n, (sh.k+127)/128)).T(b)
		reps := benchReps(2 * float64(rows) * float64(sh.n) * float64(sh.k))
		run := func() {
			err := d.Run(func(r *gpu.Recorder) error {
				for range reps {
					err := gpu.Linear(r, x, w, y, rows, sh.k, sh.n)
					for _, q := range []gpu.QuantWeight{fp8, q8} {
						if err == nil {
							err = gpu.LinearQuant(r, x, q, y, rows)
						}
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.Run(sh.name, func(b *testing.B) {
			benchWarm(run)
			d.ResetProfile()
			for b.Loop() {
				run()
			}
			for _, k := range printGEMMProfile(d, "auto", sh.name) {
				b.ReportMetric(k.TFLOPs(), k.Name+"-TFLOP/s")
			}
		})
		for _, buf := range []*gpu.Buffer{x, y, w, qc, fp8.Scales, q8.Scales} {
			buf.Release()
		}
	}
}
