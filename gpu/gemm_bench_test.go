package gpu_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
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
	rows, dense, blr = gemmBenchAllShapes()
	if v := os.Getenv("NVG_BENCH_SHAPES"); v != "" {
		keep := strings.Split(v, ",")
		dense = slices.DeleteFunc(dense, func(s gemmBenchShape) bool { return !slices.Contains(keep, s.name) })
		blr = slices.DeleteFunc(blr, func(s blrBenchShape) bool { return !slices.Contains(keep, "BLR."+s.name) })
	}
	return rows, dense, blr
}

// gemmBenchAllShapes is gemmBenchShapes before NVG_BENCH_SHAPES (a comma-separated list of
// shape names, "BLR." before the BLR ones) filters it.
func gemmBenchAllShapes() (rows int, dense []gemmBenchShape, blr []blrBenchShape) {
	if os.Getenv("NVG_BENCH_LARGE") == "" {
		return 64, []gemmBenchShape{{"small", 96, 64}, {"small2", 64, 160}},
			[]blrBenchShape{{"small", 96, 64, 32}}
	}
	return 4096, []gemmBenchShape{
			{"sq4096", 4096, 4096},
			{"0.8B.gate", 3584, 1024}, {"0.8B.head", 4096, 1024}, {"0.8B.proj2048", 2048, 1024},
			{"0.8B.proj6144", 6144, 1024},
			{"4B.gate", 9216, 2560}, {"4B.down", 2560, 9216}, {"4B.proj6144", 6144, 2560},
			{"9B.gate", 12288, 4096}, {"9B.proj6144", 6144, 4096},
		}, []blrBenchShape{
			{"0.8B.gate", 3584, 1024, 384}, {"0.8B.down", 1024, 3584, 384},
			{"4B.gate", 9216, 2560, 896}, {"9B.gate", 12288, 4096, 1408},
		}
}

// benchVariants is the comma-separated list of variants for applyGEMMVariant in the
// environment variable env — NVG_GEMM_VARIANTS (BenchmarkGEMM; "auto" when unset) or
// NVG_TC_VARIANTS (BenchmarkLinearQuant: "wgsl" tensor cores off, "coopmat" on, skipped
// without them, or "coopmat:BMxBNxBK/WMxWN" on with that block; both when unset) — else def.
func benchVariants(env string, def ...string) []string {
	if v := os.Getenv(env); v != "" {
		return strings.Split(v, ",")
	}
	return def
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

// benchChecked reports whether variant v's outputs are checked against the WGSL kernels'
// (the cooperative-matrix variants).
func benchChecked(v string) bool { return strings.HasPrefix(v, "coopmat") }

// benchWarm keeps the GPU busy with run for at least 500 ms of wall time before a
// measurement: on the H200 the SM clock falls (to 345 MHz when idle) between short, spaced
// submits, and a measurement taken after host gaps (allocation, upload, compilation, the
// checks' comparisons) reads a fraction of the kernel's speed. With 200 ms, stretches of an
// H100 run with the checks read every kernel about 2× slower (DESIGN.md §7).
func benchWarm(run func()) {
	start := time.Now()
	for time.Since(start) < 500*time.Millisecond {
		run()
	}
}

// benchProfiled warms the GPU up (benchWarm), clears d's profile and runs run b.N times, so
// that d's profile then holds the timed submits alone.
func benchProfiled(b *testing.B, d *gpu.Device, run func()) {
	benchWarm(run)
	d.ResetProfile()
	for b.Loop() {
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
		xf := benchRandom(rng, rows*sh.k)
		x := keep(must(d.UploadFloat32("x", xf, rows, sh.k)).T(b))
		w := keep(must(d.UploadF16("W", full, sh.n, sh.k)).T(b))
		var ref *gemmBenchRef
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
		for _, v := range benchVariants("NVG_GEMM_VARIANTS", "auto") {
			b.Run(sh.name+"/"+v, func(b *testing.B) {
				defer applyGEMMVariant(b, v)()
				benchProfiled(b, d, run)
				for _, k := range printGEMMProfile(d, v, sh.name) {
					b.ReportMetric(k.TFLOPs(), k.Name+"-TFLOP/s")
				}
				if !benchChecked(v) {
					return
				}
				if ref == nil {
					ref = newGEMMBenchRef(b, d, x, xf, w, full, rows, sh.k, sh.n)
					bufs = append(bufs, ref.bufs...)
				}
				ref.check(b, d, x, w, v, sh.name)
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
		x := keep(must(d.UploadFloat32("x", benchRandom(rng, rows*sh.n), rows, sh.n)).T(b))
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
		var ref []blrBenchOut
		outs := func() []blrBenchOut {
			o := []blrBenchOut{{"y", y, nil}, {"t1", t1[0], nil}, {"dx", dx, nil}}
			err := d.Run(func(r *gpu.Recorder) error {
				if err := gpu.BLRForward(r, l, x, y, gpu.BLRKept{T1: t1}, rows); err != nil {
					return err
				}
				return gpu.BLRBackward(r, l, x, gpu.BLRKept{T1: t1}, y, dx, grads, rows)
			})
			if err != nil {
				b.Fatal(err)
			}
			for i := range o {
				o[i].v = must(d.ReadFloat32(o[i].buf)).T(b)
			}
			return o
		}
		for _, v := range benchVariants("NVG_GEMM_VARIANTS", "auto") {
			b.Run("BLR."+sh.name+"/"+v, func(b *testing.B) {
				defer applyGEMMVariant(b, v)()
				benchProfiled(b, d, run)
				for _, k := range printGEMMProfile(d, v, "BLR."+sh.name) {
					if k.Flops > 0 {
						b.ReportMetric(k.TFLOPs(), k.Name+"-TFLOP/s")
					}
				}
				if !benchChecked(v) {
					return
				}
				if ref == nil {
					restore := gpu.SetTensorCores(false)
					ref = outs()
					restore()
				}
				checkBLRBench(b, v, "BLR."+sh.name, ref, outs())
			})
		}
		for _, buf := range bufs {
			buf.Release()
		}
		l.Release()
	}
}

// benchRandom returns n uniform values in [−1, 1).
func benchRandom(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.Float64()*2 - 1)
	}
	return v
}

// gemmBenchRef holds the WGSL path's y = x·Wᵀ and dx = y·W of one dense shape and their
// magnitudes Σ|a||b| (the same GEMMs of |x|, |y| and |W|), the reference of the benchmark's
// check of the cooperative-matrix outputs.
type gemmBenchRef struct {
	y, dx, ymag, dxmag []float32
	yBuf               *gpu.Buffer // the reference y, the A of the checked dx
	rows, k, n         int
	bufs               []*gpu.Buffer
}

// newGEMMBenchRef computes the reference on the WGSL kernels.
func newGEMMBenchRef(b *testing.B, d *gpu.Device, x *gpu.Buffer, xf []float32, w *gpu.Buffer, wb []uint16, rows, k, n int) *gemmBenchRef {
	defer gpu.SetTensorCores(false)()
	ref := &gemmBenchRef{rows: rows, k: k, n: n}
	keep := func(buf *gpu.Buffer) *gpu.Buffer { ref.bufs = append(ref.bufs, buf); return buf }
	absF := func(v []float32) []float32 {
		a := make([]float32, len(v))
		for i, x := range v {
			a[i] = float32(math.Abs(float64(x)))
		}
		return a
	}
	absW := make([]uint16, len(wb))
	for i, h := range wb {
		absW[i] = h &^ 0x8000
	}
	ax := keep(must(d.UploadFloat32("|x|", absF(xf), rows, k)).T(b))
	aw := keep(must(d.UploadF16("|W|", absW, n, k)).T(b))
	ref.yBuf = keep(must(d.NewBuffer("y ref", gpu.F32, rows, n)).T(b))
	dx := keep(must(d.NewBuffer("dx ref", gpu.F32, rows, k)).T(b))
	ym := keep(must(d.NewBuffer("|y| ref", gpu.F32, rows, n)).T(b))
	dxm := keep(must(d.NewBuffer("|dx| ref", gpu.F32, rows, k)).T(b))
	err := d.Run(func(r *gpu.Recorder) error {
		return errors.Join(gpu.Linear(r, x, w, ref.yBuf, rows, k, n), gpu.LinearT(r, ref.yBuf, w, dx, rows, k, n),
			gpu.Linear(r, ax, aw, ym, rows, k, n))
	})
	if err != nil {
		b.Fatal(err)
	}
	ref.y = must(d.ReadFloat32(ref.yBuf)).T(b)
	ay := keep(must(d.UploadFloat32("|y ref|", absF(ref.y), rows, n)).T(b))
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.LinearT(r, ay, aw, dxm, rows, k, n) }); err != nil {
		b.Fatal(err)
	}
	ref.dx = must(d.ReadFloat32(dx)).T(b)
	ref.ymag = must(d.ReadFloat32(ym)).T(b)
	ref.dxmag = must(d.ReadFloat32(dxm)).T(b)
	return ref
}

// check runs Linear(x, W) and LinearT(y_ref, W) on the current (cooperative-matrix) variant
// and fails b unless every element is within the f16 bound of the WGSL reference:
// |coop − wgsl| ≤ (2⁻¹⁰ + 4(K+1)·2⁻²⁴)·Σ_k|a_ik||b_kj| (coopRel's bound for the kernel plus
// the f32 accumulation error of the reference itself), K = k for y, n for dx.
func (ref *gemmBenchRef) check(b *testing.B, d *gpu.Device, x, w *gpu.Buffer, v, shape string) {
	y := must(d.NewBuffer("y coop", gpu.F32, ref.rows, ref.n)).T(b)
	dx := must(d.NewBuffer("dx coop", gpu.F32, ref.rows, ref.k)).T(b)
	defer y.Release()
	defer dx.Release()
	err := d.Run(func(r *gpu.Recorder) error {
		return errors.Join(gpu.Linear(r, x, w, y, ref.rows, ref.k, ref.n), gpu.LinearT(r, ref.yBuf, w, dx, ref.rows, ref.k, ref.n))
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		got, want, mag []float32
		kk             int
	}{{"y", must(d.ReadFloat32(y)).T(b), ref.y, ref.ymag, ref.k}, {"dx", must(d.ReadFloat32(dx)).T(b), ref.dx, ref.dxmag, ref.n}} {
		tol := math.Pow(2, -10) + 4*float64(c.kk+1)*math.Pow(2, -24)
		worst, bad := 0.0, 0
		for i, g := range c.got {
			e := math.Abs(float64(g) - float64(c.want[i]))
			bound := tol * float64(c.mag[i])
			if !(e <= bound) {
				if bad == 0 {
					b.Errorf("%s %s: %s[%d] = %g, WGSL %g, |err| %.3g > bound %.3g", v, shape, c.name, i, g, c.want[i], e, bound)
				}
				bad++
			}
			if bound > 0 {
				worst = math.Max(worst, e/bound)
			}
		}
		fmt.Printf("GEMMCHECK variant=%-16s shape=%-14s out=%-3s worst |err|/bound %.3g, %d of %d outside\n", v, shape, c.name, worst, bad, len(c.got))
	}
}

// blrBenchOut is one output of the BLR benchmark's check.
type blrBenchOut struct {
	name string
	buf  *gpu.Buffer
	v    []float32
}

// checkBLRBench fails b unless the cooperative-matrix BLR outputs (y, t1, dx) are within
// 2⁻⁷·max|WGSL| of the WGSL ones in every element: a guard against a wrong fast kernel (a
// broken tile is off by the values' own size), not the parity bound (the parity suites'
// coopmat lines check that on awkward sizes).
func checkBLRBench(b *testing.B, v, shape string, ref, got []blrBenchOut) {
	for i := range ref {
		var mx, worst float64
		for _, w := range ref[i].v {
			mx = math.Max(mx, math.Abs(float64(w)))
		}
		for j, g := range got[i].v {
			worst = math.Max(worst, math.Abs(float64(g)-float64(ref[i].v[j])))
			if math.IsNaN(float64(g)) {
				worst = math.Inf(1)
			}
		}
		fmt.Printf("GEMMCHECK variant=%-16s shape=%-14s out=%-3s max |err|/max|ref| %.3g\n", v, shape, ref[i].name, worst/mx)
		if !(worst <= math.Pow(2, -7)*mx) {
			b.Errorf("%s %s: %s: max |coop − WGSL| %.3g > 2⁻⁷·max|WGSL| = %.3g", v, shape, ref[i].name, worst, math.Pow(2, -7)*mx)
		}
	}
}
