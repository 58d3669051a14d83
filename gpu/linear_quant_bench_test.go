package gpu_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// quantBenchOps are the ops BenchmarkLinearQuant measures, by their profile names: the f16
// plane and the two 8-bit forms of the same product.
var quantBenchOps = []string{"Linear", "LinearQuant.fp8", "LinearQuant.q8"}

// BenchmarkLinearQuant profiles y = x·Wᵀ with W as an f16 plane (Linear) and as 8-bit
// codes (LinearQuant: FP8 with f32 scales per 128×128 block, q8 with f16 scales per row and
// 128 inputs) on gemmBenchShapes' dense shapes — rows 4096 and the models' shapes with
// NVG_BENCH_LARGE=1, plus the 27B MLP and projection shapes (27B.gate, 27B.down,
// 27B.proj6144); NVG_BENCH_SHAPES keeps the named ones (e.g. 0.8B.gate,4B.gate);
// NVG_BENCH_Q8_SCALES=f32 gives q8 its scales as f32 (the kernels take either) — for each
// GEMM path of NVG_TC_VARIANTS (wgsl, coopmat). Per shape and path it prints each kernel's
// GPU time and TFLOP/s (GEMMROW lines; on tensor cores an op's f16 pack of x is its own
// kernel, "<op>.pack") and one QUANTROW line per op with its GPU time per call (the op's
// kernels together) and TFLOP/s over that, reported as the metrics <op>-gpu-µs/call and
// <op>-TFLOP/s. Each measurement follows a warm-up (benchWarm) and repeats the products
// within one submit (benchReps). On a coopmat path the 8-bit outputs are checked against
// the WGSL kernels' (quantBenchRef.check, GEMMCHECK lines), so a fast wrong kernel cannot
// win. Needs timestamp queries. Run with -benchtime 3x.
func BenchmarkLinearQuant(b *testing.B) {
	d := gputest.Open(b)
	if err := d.SetProfiling(true); err != nil {
		b.Skip(err)
	}
	defer d.SetProfiling(false)
	rows, dense, _ := gemmBenchShapes()
	if rows > 64 {
		for _, sh := range []gemmBenchShape{{"27B.gate", 17408, 5120}, {"27B.down", 5120, 17408}, {"27B.proj6144", 6144, 5120}} {
			if v := os.Getenv("NVG_BENCH_SHAPES"); v == "" || strings.Contains(","+v+",", ","+sh.name+",") {
				dense = append(dense, sh)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 6))
	for _, sh := range dense {
		var bufs []*gpu.Buffer
		keep := func(buf *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, buf); return buf }
		wb, _ := randF16(rng, 1024, 1)
		full := make([]uint16, sh.n*sh.k)
		codes := make([]byte, sh.n*sh.k)
		for i := range full {
			full[i] = wb[i%len(wb)]
			codes[i] = byte(i*37) &^ 0x40 // finite FP8 codes, int8 codes
			if codes[i] == 0x80 {
				codes[i] = 0 // not −128 (q8 codes are within ±127), so |code| is a code
			}
		}
		sr, sc := (sh.n+127)/128, (sh.k+127)/128
		fp8s := make([]float32, sr*sc)
		for i := range fp8s {
			fp8s[i] = float32(math.Ldexp(1+rng.Float64(), -9)) // amax/448 of weights ~0.1–0.5
		}
		q8s := make([]uint16, sh.n*sc)
		for i := range q8s {
			q8s[i] = float16.Fromfloat32(float32(math.Ldexp(1+rng.Float64(), -10))).Bits()
		}
		xf := benchRandom(rng, rows*sh.k)
		x := keep(must(d.UploadFloat32("x", xf, rows, sh.k)).T(b))
		y := keep(must(d.NewBuffer("y", gpu.F32, rows, sh.n)).T(b))
		w := keep(must(d.UploadF16("W", full, sh.n, sh.k)).T(b))
		qc := keep(must(d.UploadQuantCodes("codes", codes, sh.n, sh.k)).T(b))
		fp8 := gpu.QuantWeight{Codes: qc, Format: gpu.QuantFP8, Out: sh.n, In: sh.k, Block: [2]int{128, 128},
			Scales: keep(must(d.UploadFloat32("fp8 scales", fp8s, sr, sc)).T(b))}
		q8 := gpu.QuantWeight{Codes: qc, Format: gpu.QuantQ8, Out: sh.n, In: sh.k, Block: [2]int{1, 128},
			Scales: keep(must(d.UploadF16("q8 scales", q8s, sh.n, sc)).T(b))}
		if os.Getenv("NVG_BENCH_Q8_SCALES") == "f32" {
			// The same scales as f32 (exact): an experiment on what q8's f16 scales cost the
			// tensor-core kernel's staging against FP8's f32 ones.
			f := make([]float32, len(q8s))
			for i, h := range q8s {
				f[i] = float16.Frombits(h).Float32()
			}
			q8.Scales = keep(must(d.UploadFloat32("q8 scales (f32)", f, sh.n, sc)).T(b))
		}
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
		var ref *quantBenchRef
		for _, v := range benchVariants("NVG_TC_VARIANTS", "wgsl", "coopmat") {
			b.Run(sh.name+"/"+v, func(b *testing.B) {
				defer applyGEMMVariant(b, v)()
				benchProfiled(b, d, run)
				reportQuantOps(b, printGEMMProfile(d, v, sh.name), v, sh.name, 2*float64(rows)*float64(sh.n)*float64(sh.k))
				if !benchChecked(v) {
					return
				}
				if ref == nil {
					ref = newQuantBenchRef(b, d, x, xf, codes, []gpu.QuantWeight{fp8, q8}, rows)
					bufs = append(bufs, ref.bufs...)
				}
				ref.check(b, d, x, []gpu.QuantWeight{fp8, q8}, v, sh.name)
			})
		}
		for _, buf := range bufs {
			buf.Release()
		}
	}
}

// reportQuantOps prints a QUANTROW line per op of quantBenchOps found in the profile p —
// its GPU µs per call (the mean of each of its kernels, "<op>" and "<op>.pack", summed) and
// flops over that time — and reports both as b's metrics.
func reportQuantOps(b *testing.B, p gpu.Profile, variant, shape string, flops float64) {
	for _, op := range quantBenchOps {
		us, kernels := 0.0, 0
		for _, k := range p {
			if k.Name == op || strings.HasPrefix(k.Name, op+".pack") {
				us += float64(k.Total.Nanoseconds()) / 1e3 / float64(max(k.Calls, 1))
				kernels++
			}
		}
		if kernels == 0 || us == 0 {
			continue
		}
		tflops := flops / (us * 1e-6) / 1e12
		fmt.Printf("QUANTROW variant=%-16s shape=%-14s op=%-16s kernels=%d gpu_us_per_call=%9.1f TFLOPs=%6.2f\n",
			variant, shape, op, kernels, us, tflops)
		b.ReportMetric(us, op+"-gpu-µs/call")
		b.ReportMetric(tflops, op+"-TFLOP/s")
	}
}

// quantBenchRef holds, per 8-bit weight of one shape, the WGSL path's y = x·Wᵀ and its
// magnitudes Σ|x||W| (the same WGSL GEMM of |x| and |W|: FP8 codes without their sign bit,
// int8 codes' absolute values, the same scales), the reference of the benchmark's check of
// the cooperative-matrix outputs.
type quantBenchRef struct {
	y, mag [][]float32
	k      int
	bufs   []*gpu.Buffer
}

// newQuantBenchRef computes the reference on the WGSL kernels.
func newQuantBenchRef(b *testing.B, d *gpu.Device, xb *gpu.Buffer, xf []float32, codes []byte, ws []gpu.QuantWeight, rows int) *quantBenchRef {
	defer gpu.SetTensorCores(false)()
	ref := &quantBenchRef{k: ws[0].In}
	keep := func(buf *gpu.Buffer) *gpu.Buffer { ref.bufs = append(ref.bufs, buf); return buf }
	ax := make([]float32, len(xf))
	for i, v := range xf {
		ax[i] = float32(math.Abs(float64(v)))
	}
	axb := keep(must(d.UploadFloat32("|x|", ax, rows, ref.k)).T(b))
	ac := make([]byte, len(codes))
	for _, w := range ws {
		for i, c := range codes {
			ac[i] = c &^ 0x80 // FP8: the magnitude's code
			if w.Format == gpu.QuantQ8 && int8(c) < 0 {
				ac[i] = byte(-int8(c))
			}
		}
		aw := w
		aw.Codes = keep(must(d.UploadQuantCodes("|codes|", ac, w.Out, w.In)).T(b))
		y := keep(must(d.NewBuffer("y ref", gpu.F32, rows, w.Out)).T(b))
		mag := keep(must(d.NewBuffer("|y| ref", gpu.F32, rows, w.Out)).T(b))
		err := d.Run(func(r *gpu.Recorder) error {
			return errors.Join(gpu.LinearQuant(r, xb, w, y, rows), gpu.LinearQuant(r, axb, aw, mag, rows))
		})
		if err != nil {
			b.Fatal(err)
		}
		ref.y = append(ref.y, must(d.ReadFloat32(y)).T(b))
		ref.mag = append(ref.mag, must(d.ReadFloat32(mag)).T(b))
	}
	return ref
}

// check runs LinearQuant on each weight on the current (cooperative-matrix) path and fails
// b unless every element is within |coop − wgsl| ≤ (2⁻⁹ + 2⁻¹⁸ + 4(K+2)·2⁻²⁴)·Σ|x||W| of
// the WGSL reference: x's and the weight's f16 roundings (2⁻¹⁰ each, their product, the
// weight's f32 rounding) and both paths' f32 sums (quantCoopBound's terms, with the WGSL
// path's (K+2)·u added); the f16 subnormal floors of quantCoopBound, below 2⁻²⁷ of a row's
// largest x or weight, are negligible against these data's Σ|x||W|.
func (ref *quantBenchRef) check(b *testing.B, d *gpu.Device, x *gpu.Buffer, ws []gpu.QuantWeight, v, shape string) {
	tol := math.Pow(2, -9) + math.Pow(2, -18) + 4*float64(ref.k+2)*math.Pow(2, -24)
	for i, w := range ws {
		rows := len(ref.y[i]) / w.Out
		y := must(d.NewBuffer("y coop", gpu.F32, rows, w.Out)).T(b)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.LinearQuant(r, x, w, y, rows) }); err != nil {
			y.Release()
			b.Fatal(err)
		}
		got := must(d.ReadFloat32(y)).T(b)
		y.Release()
		worst, bad := 0.0, 0
		for j, g := range got {
			e := math.Abs(float64(g) - float64(ref.y[i][j]))
			bound := tol * float64(ref.mag[i][j])
			if !(e <= bound) {
				if bad == 0 {
					b.Errorf("%s %s %s: y[%d] = %g, WGSL %g, |err| %.3g > bound %.3g", v, shape, w.Format, j, g, ref.y[i][j], e, bound)
				}
				bad++
			}
			if bound > 0 {
				worst = math.Max(worst, e/bound)
			}
		}
		fmt.Printf("GEMMCHECK variant=%-16s shape=%-14s out=%-3s worst |err|/bound %.3g, %d of %d outside\n", v, shape, w.Format, worst, bad, len(got))
	}
}
