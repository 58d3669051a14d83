package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
	"github.com/x448/float16"
)

// quantCase is one shape of the LinearQuant suite: y [rows, out] = x [rows, in]·Wᵀ with W in
// format, scales per block of block[0] rows × block[1] inputs, stored f16 when scaleF16,
// drawn with exponents in [scaleExp − 10, scaleExp + 1] (newQuantInputs).
type quantCase struct {
	rows, in, out int
	format        gpu.QuantFormat
	block         [2]int
	scaleF16      bool
	scaleExp      int
}

func (c quantCase) String() string {
	s := "f32"
	if c.scaleF16 {
		s = "f16"
	}
	name := fmt.Sprintf("%s-%dx%dx%d-block%dx%d-%s", c.format, c.rows, c.in, c.out, c.block[0], c.block[1], s)
	if c.scaleExp != 0 {
		name += fmt.Sprintf("-scale2^%d", c.scaleExp)
	}
	return name
}

var (
	fp8Block = [2]int{128, 128}
	q8Block  = [2]int{1, cmf.QuantQ8Group}
	// quantGeneralCases: dimensions that are not multiples of the block or of any tile
	// (ragged last blocks in both directions), odd K (codes of a row start mid-word), a
	// single row, small blocks whose columns are (3×8) and are not (2×5) a multiple of 4.
	quantGeneralCases = []quantCase{
		{67, 300, 131, gpu.QuantFP8, fp8Block, false, 0},
		{5, 37, 9, gpu.QuantQ8, q8Block, true, 0},
		{130, 129, 65, gpu.QuantFP8, fp8Block, true, 0},
		{1, 260, 12, gpu.QuantQ8, q8Block, true, 0},
		{130, 36, 70, gpu.QuantFP8, [2]int{3, 8}, false, 0},
		{9, 23, 11, gpu.QuantFP8, [2]int{2, 5}, true, 0},
	}
	// quantFastCases take the tiled kernels' fast path for some tiles (out a multiple of 64
	// or 128, in of 32), with ragged blocks (192 rows of 128-row FP8 blocks, 160 inputs of
	// 128-wide blocks and groups) and rows that are not.
	quantFastCases = []quantCase{
		{67, 160, 192, gpu.QuantFP8, fp8Block, false, 0},
		{3, 256, 128, gpu.QuantQ8, q8Block, true, 0},
		{131, 160, 256, gpu.QuantFP8, fp8Block, true, 0},
		{20, 160, 128, gpu.QuantQ8, q8Block, true, 0},
	}
	// quantCoopCases are the cooperative-matrix form's (in and block columns multiples of
	// 8, quantCoopFits): ragged last blocks in both directions (131 outputs of 128-row
	// blocks, 296 inputs of 128-wide blocks), rows and outputs not multiples of any tile, K
	// not a multiple of BK, inputs fewer than one group, one row, FP8 with f16 scales,
	// small blocks (3×8, 2×16, 4×40); and scales far from 1, where value·scale in f16 would
	// overflow (FP8 scales up to 2¹⁵: weights to 2²⁴; q8 scales up to 2⁹: weights to 2¹⁶)
	// or underflow (FP8 scales near 2⁻³⁵: every weight below f16's least normal 2⁻¹⁴)
	// without the kernel's power of two per row.
	quantCoopCases = []quantCase{
		{67, 296, 131, gpu.QuantFP8, fp8Block, false, 0},
		{5, 40, 9, gpu.QuantQ8, q8Block, true, 0},
		{130, 136, 65, gpu.QuantFP8, fp8Block, true, 0},
		{1, 264, 12, gpu.QuantQ8, q8Block, true, 0},
		{33, 48, 70, gpu.QuantFP8, [2]int{3, 8}, false, 0},
		{9, 64, 24, gpu.QuantFP8, [2]int{2, 16}, false, 14},
		{7, 128, 136, gpu.QuantQ8, q8Block, true, 8},
		{12, 200, 40, gpu.QuantFP8, [2]int{4, 40}, false, -30},
		{9, 264, 40, gpu.QuantFP8, [2]int{2, 8}, false, 14}, // 33 scales a row: the scan's 4-load steps
		{5, 200, 24, gpu.QuantQ8, [2]int{1, 8}, true, 0},
	}
)

// lanes reports whether the lane-blocked form applies to c (gpu.LinearQuant).
func (c quantCase) lanes() bool { return c.in%4 == 0 && c.block[1]%4 == 0 }

// quantInputs are one case's operands on the host and the GPU, and the float64 reference.
type quantInputs struct {
	x       *gpu.Buffer
	w       gpu.QuantWeight
	want    []float64 // host.LinearQuant
	bound   []float64 // (K+2)·u·Σ|x||W| per output
	xd, wd  []float64 // x and the dequantized W (host.Dequantize), float64
	scales  []float64 // the scales as uploaded, row-major [ceil(out/block[0]), ceil(in/block[1])]
	release func()
}

// newQuantInputs draws x uniform in [−1, 1), codes uniform over all non-NaN codes (FP8:
// magnitudes 2⁻⁹ … 448; q8: −127 … 127) and positive scales of random exponent (f16-exact
// when scaleF16), uploads them and computes the reference and its bound: each weight is
// rounded to f32 once when dequantized (exact for q8) and each output is K fused
// multiply-adds, so |err| ≤ (K+1)·u·Σ|x||W| + u·Σ|x||W| with u = 2⁻²⁴.
func newQuantInputs(t *testing.T, d *gpu.Device, rng *rand.Rand, c quantCase) quantInputs {
	t.Helper()
	xf, xd := randF32(rng, c.rows*c.in, 1)
	codes := make([]byte, c.out*c.in)
	for i := range codes {
		for {
			codes[i] = byte(rng.IntN(256))
			if c.format == gpu.QuantFP8 && codes[i]&0x7F != 0x7F || c.format == gpu.QuantQ8 && codes[i] != 0x80 {
				break
			}
		}
	}
	sr, sc := (c.out+c.block[0]-1)/c.block[0], (c.in+c.block[1]-1)/c.block[1]
	scales := make([]float64, sr*sc)
	sf32 := make([]float32, len(scales))
	sf16 := make([]uint16, len(scales))
	for i := range scales {
		v := math.Ldexp(0.5+rng.Float64(), rng.IntN(12)-10+c.scaleExp)
		sf32[i] = float32(v)
		h := float16.Fromfloat32(float32(v))
		sf16[i] = h.Bits()
		if c.scaleF16 {
			scales[i] = float64(h.Float32())
		} else {
			scales[i] = float64(sf32[i])
		}
	}
	scheme := cmf.QuantFP8
	if c.format == gpu.QuantQ8 {
		scheme = cmf.QuantQ8
	}
	hw := host.QuantWeight{Scheme: scheme, Codes: codes, Scales: scales, Out: c.out, In: c.in, Block: c.block}
	want, err := host.LinearQuant(xd, c.rows, hw)
	if err != nil {
		t.Fatal(err)
	}
	W, _ := host.Dequantize(hw)
	_, abs := refGEMM(xd, c.rows, c.in, W, c.out, true)
	bound := make([]float64, len(abs))
	for i, a := range abs {
		bound[i] = float64(c.in+2) * 0x1p-24 * a
	}
	x := must(d.UploadFloat32("x", xf, c.rows, c.in)).T(t)
	cb := must(d.UploadQuantCodes("codes", codes, c.out, c.in)).T(t)
	var sb *gpu.Buffer
	if c.scaleF16 {
		sb = must(d.UploadF16("scales", sf16, sr, sc)).T(t)
	} else {
		sb = must(d.UploadFloat32("scales", sf32, sr, sc)).T(t)
	}
	w := gpu.QuantWeight{Codes: cb, Scales: sb, Format: c.format, Out: c.out, In: c.in, Block: c.block}
	return quantInputs{x: x, w: w, want: want, bound: bound, xd: xd, wd: W, scales: scales,
		release: func() { x.Release(); w.Release() }}
}

// run records impl on the case's inputs and returns y.
func (in quantInputs) run(t *testing.T, d *gpu.Device, impl func(r *gpu.Recorder, x *gpu.Buffer, w gpu.QuantWeight, y *gpu.Buffer, rows int) error, rows int) []float32 {
	t.Helper()
	y := must(d.NewBuffer("y", gpu.F32, rows, in.w.Out)).T(t)
	defer y.Release()
	if err := d.Run(func(r *gpu.Recorder) error { return impl(r, in.x, in.w, y, rows) }); err != nil {
		t.Fatal(err)
	}
	return must(d.ReadFloat32(y)).T(t)
}

// linearQuantImpl is one implementation of LinearQuant under the parity suite: its launcher,
// the setting it runs under (force, nil for none), its cases, and whether it is the
// cooperative-matrix form (coop: its bound is quantCoopBound, and it must have run).
type linearQuantImpl struct {
	name  string
	force func() func()
	run   func(r *gpu.Recorder, x *gpu.Buffer, w gpu.QuantWeight, y *gpu.Buffer, rows int) error
	cases []quantCase
	coop  bool
}

// linearQuantImpls: the naive twin on every case; the tiled kernel forced to 64×64×16 and
// 128×128×32 on the general path (general cases) and to every tile on the fast path (fast
// cases); the lane-blocked form on the cases it applies to; the cooperative-matrix form
// (tensor cores forced on) on quantCoopCases.
func linearQuantImpls() []linearQuantImpl {
	all := append(append([]quantCase{}, quantGeneralCases...), quantFastCases...)
	impls := []linearQuantImpl{{"naive", nil, gpu.LinearQuantNaive, all, false}}
	for _, v := range []gemmTestVariant{{bm: 64, bn: 64, bk: 16, general: true}, {bm: 128, bn: 128, bk: 32, general: true},
		{bm: 64, bn: 64, bk: 16}, {bm: 128, bn: 128, bk: 32}, {bm: 64, bn: 128, bk: 32}, {bm: 128, bn: 64, bk: 32}} {
		cases := quantFastCases
		if v.general {
			cases = quantGeneralCases
		}
		impls = append(impls, linearQuantImpl{v.String(), v.force, gpu.LinearQuant, cases, false})
	}
	var lanes []quantCase
	for _, c := range all {
		if c.lanes() {
			lanes = append(lanes, c)
		}
	}
	return append(impls, linearQuantImpl{"lanes", lanesVariant.force, gpu.LinearQuant, lanes, false},
		linearQuantImpl{"coopmat", coopmatVariant.force, gpu.LinearQuant, quantCoopCases, true},
		linearQuantImpl{quantBlockLine, func() func() {
			r1, r2 := coopmatVariant.force(), gpu.SetCoopQuantBlockGroups(0)
			return func() { r2(); r1() }
		}, gpu.LinearQuant, quantCoopCases, true},
		linearQuantImpl{quantScanLine, nil, gpu.LinearQuant, quantCoopCases, true})
}

// quantScanLine is the cooperative-matrix line on a block of 4L×2L×2L with 2×2 subgroups (L
// the device's cooperative-matrix side: 32×16×16 on Mesa lavapipe, 64×32×32 on NVIDIA), whose
// workgroup has at least twice as many threads as the block has rows of W, so that two
// threads scan each row's scales (coopmat_gemm.comp QUANT's QP = 2), as on the GPUs' own
// 8-bit block (quantBlockLine), which lavapipe cannot run.
const quantScanLine = "coopmat-scan2"

// quantBlockLine is the cooperative-matrix line that runs every case on the 8-bit GEMM's own
// 256×128×48 block (chosen on GPUs from 1,024 workgroups, so never at the suite's sizes
// otherwise). It needs ~44 KiB of workgroup memory: Mesa lavapipe (32 KiB) skips it, GPUs run it.
const quantBlockLine = "coopmat-block256"

// TestLinearQuant runs the parity suite on every implementation of linearQuantImpls.
func TestLinearQuant(t *testing.T) {
	for _, impl := range linearQuantImpls() {
		t.Run(impl.name, func(t *testing.T) { testLinearQuant(t, impl) })
	}
}

// testLinearQuant is LinearQuant's parity suite: impl on each of its cases against the
// float64 host reference (host.LinearQuant on host.Dequantize's weights) within the bound
// (K+2)·u·Σ|x||W| per output (newQuantInputs says why), or quantCoopBound for the
// cooperative-matrix form.
func testLinearQuant(t *testing.T, impl linearQuantImpl) {
	d := gputest.Open(t)
	if impl.name == "lanes" {
		skipNoLanes(t, d)
		lanes0 := gpu.GEMMLanesDispatches()
		defer func() {
			if got := gpu.GEMMLanesDispatches() - lanes0; got != len(impl.cases) {
				t.Errorf("%d lane-blocked GEMMs recorded, want %d (one per case)", got, len(impl.cases))
			}
		}()
	}
	if impl.coop {
		skipNoCoopmat(t, d)
		if need := gpu.CoopQuantBlockShared(d); impl.name == quantBlockLine && (d.Info().CPU || int(d.Info().MaxWorkgroupStorage) < need) {
			t.Skipf("%s: the 8-bit block needs %d bytes of workgroup memory and a GPU; %s offers %d (CPU adapter: %v)",
				impl.name, need, d.Info().Name, d.Info().MaxWorkgroupStorage, d.Info().CPU)
		}
		coop0 := gpu.CoopDispatches()
		defer func() {
			if got := gpu.CoopDispatches() - coop0; got != len(impl.cases) {
				t.Errorf("%d cooperative-matrix GEMMs recorded, want %d (one per case)", got, len(impl.cases))
			}
		}()
	}
	if impl.force != nil {
		defer impl.force()()
	}
	if impl.name == quantScanLine {
		l := d.TensorCores().Shape.M
		defer applyGEMMVariant(t, fmt.Sprintf("coopmat:%dx%dx%d/2x2", 4*l, 2*l, 2*l))()
	}
	rng := rand.New(rand.NewPCG(35, 8))
	for _, c := range impl.cases {
		t.Run(c.String(), func(t *testing.T) {
			in := newQuantInputs(t, d, rng, c)
			defer in.release()
			got := in.run(t, d, impl.run, c.rows)
			bound := in.bound
			if impl.coop {
				bound = quantCoopBound(c, in)
			}
			checkBound(t, "y", got, in.want, bound)
		})
	}
}

// quantCoopBound is the error bound per output of LinearQuant's cooperative-matrix form,
// derived from the operands as coopRel is for Linear's. The kernel multiplies x̃ ≈ x and
// w̃ ≈ W in f16 with f32 accumulation:
//
//   - x̃: x·2^e_i rounded to f16 (CoopmatPack; e_i puts row i's largest |x| in [2¹⁴, 2¹⁵)),
//     so |x̃ − x| ≤ ρ|x| + ηx_i with ρ = 2⁻¹⁰ (one f16 rounding, taken as a full ulp for a
//     conversion that might not round to nearest, as coopRel) and ηx_i = 2^(−14−e_i)
//     (a value below f16's least normal, possibly flushed to zero);
//   - w̃: the scale times 2^E_j rounded to f16 (exact for f16 scales, one rounding ρ for
//     f32 ones), then value·scale rounded to f16 (ρ), so |w̃ − W| ≤ ρ_w|W| + ηw_j with
//     ρ_w = ρ (f16 scales) or 2ρ + ρ² (f32 scales) and ηw_j = 2^(−14−E_j), E_j the kernel's
//     exponent of row j of W (coopmat_gemm.comp's qexp, recomputed here from the largest
//     scale of the row's scale row);
//   - products exact in f32, the f32 sum of K terms in any order ≤ 2(K+1)u·Σ|x̃||w̃| (doubled
//     for an accumulator that truncates, as coopRel); the 2^−e_i and 2^−E_j undo is exact.
//
// With X̃ = (1+ρ)|x| + ηx and W̃ = (1+ρ_w)|W| + ηw (each an upper bound of both |x̃| and
// |x| + |x̃ − x|), |ŷ − y| ≤ (1 + 2(K+1)u)·Σ_k X̃_ik·W̃_jk − Σ_k |x_ik|·|W_jk|.
func quantCoopBound(c quantCase, in quantInputs) []float64 {
	const rho, u = 0x1p-10, 0x1p-24
	nc := (c.in + c.block[1] - 1) / c.block[1]
	xt := make([]float64, len(in.xd))
	for i := range c.rows {
		row := in.xd[i*c.in : (i+1)*c.in]
		mx := 0.0
		for _, v := range row {
			mx = math.Max(mx, math.Abs(v))
		}
		e := 0
		if mx > 0 {
			_, ex := math.Frexp(mx)
			e = min(max(15-ex, -126), 126)
		}
		eta := math.Ldexp(1, -14-e)
		for k, v := range row {
			xt[i*c.in+k] = (1+rho)*math.Abs(v) + eta
		}
	}
	vbits := 9 // |e4m3| ≤ 448 < 2⁹
	if c.format == gpu.QuantQ8 {
		vbits = 7 // |int8| ≤ 128
	}
	rw := rho // ρ_w
	if !c.scaleF16 {
		rw = 2*rho + rho*rho
	}
	wt := make([]float64, len(in.wd))
	for j := range c.out {
		smax := 0.0
		for _, s := range in.scales[j/c.block[0]*nc : (j/c.block[0]+1)*nc] {
			smax = math.Max(smax, math.Abs(s))
		}
		E := 0
		if smax > 0 {
			_, x := math.Frexp(smax)
			E = min(15-x-vbits, 126)
		}
		eta := math.Ldexp(1, -14-E)
		for k := range c.in {
			wt[j*c.in+k] = (1+rw)*math.Abs(in.wd[j*c.in+k]) + eta
		}
	}
	big, _ := refGEMM(xt, c.rows, c.in, wt, c.out, true)
	_, abs := refGEMM(in.xd, c.rows, c.in, in.wd, c.out, true)
	bound := make([]float64, len(big))
	for i := range bound {
		bound[i] = (1+2*float64(c.in+1)*u)*big[i] - abs[i]
	}
	return bound
}

// TestLinearQuantCoopmatDeclines: with tensor cores forced on, LinearQuant takes the
// cooperative-matrix form exactly where quantCoopFits allows it — in and the block's
// columns multiples of 8 — and otherwise declines, recording the WGSL forms, whose result
// is within their own f32 bound (K+2)·u·Σ|x||W| (so the decline fell back, not failed).
// Skipped, loudly, without tensor cores.
func TestLinearQuantCoopmatDeclines(t *testing.T) {
	d := gputest.Open(t)
	skipNoCoopmat(t, d)
	defer gpu.SetTensorCores(true)()
	rng := rand.New(rand.NewPCG(35, 9))
	for _, c := range []struct {
		quantCase
		coop bool
	}{
		{quantCase{9, 36, 20, gpu.QuantQ8, q8Block, true, 0}, false},         // in % 8 = 4
		{quantCase{9, 37, 20, gpu.QuantFP8, fp8Block, false, 0}, false},      // in odd
		{quantCase{9, 48, 20, gpu.QuantFP8, [2]int{2, 12}, false, 0}, false}, // block columns % 8 = 4
		{quantCase{9, 40, 20, gpu.QuantQ8, [2]int{1, 5}, true, 0}, false},    // block columns odd
		{quantCase{9, 48, 20, gpu.QuantFP8, [2]int{3, 24}, false, 0}, true},  // both multiples of 8
		{quantCase{9, 40, 21, gpu.QuantQ8, [2]int{7, 8}, true, 0}, true},     // any rows, any block rows
	} {
		t.Run(c.String(), func(t *testing.T) {
			in := newQuantInputs(t, d, rng, c.quantCase)
			defer in.release()
			c0 := gpu.CoopDispatches()
			got := in.run(t, d, gpu.LinearQuant, c.rows)
			n := gpu.CoopDispatches() - c0
			bound := in.bound
			if c.coop {
				bound = quantCoopBound(c.quantCase, in)
			}
			if want := map[bool]int{false: 0, true: 1}[c.coop]; n != want {
				t.Errorf("%d cooperative-matrix GEMMs recorded, want %d", n, want)
			}
			checkBound(t, "y", got, in.want, bound)
		})
	}
}

// TestLinearQuantBitIdentical: the forms LinearQuant takes on this device (tiled or lanes,
// automatic choice) give the naive twin's bits: the same dequantized weights and one fma
// chain in K order per output.
func TestLinearQuantBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(36, 9))
	for _, c := range []quantCase{quantGeneralCases[0], quantGeneralCases[4], quantFastCases[0], quantFastCases[3]} {
		t.Run(c.String(), func(t *testing.T) {
			in := newQuantInputs(t, d, rng, c)
			defer in.release()
			a := in.run(t, d, gpu.LinearQuantNaive, c.rows)
			b := in.run(t, d, gpu.LinearQuant, c.rows)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("y[%d]: LinearQuant %g, naive %g", i, b[i], a[i])
				}
			}
		})
	}
}

// TestLinearQuantScaleDTypes: q8's f16 scales uploaded as f32 (exactly; what a resident
// nvgkit net does) give the bits of the f16 upload, on the path LinearQuant takes here and on
// tensor cores where the device has them: every form rounds value·scale the same way from
// either dtype.
func TestLinearQuantScaleDTypes(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(37, 10))
	for _, line := range []struct {
		name  string
		force func() func()
		cases []quantCase
	}{{"auto", nil, []quantCase{quantGeneralCases[1], quantFastCases[3]}}, {"coopmat", coopmatVariant.force, []quantCase{quantCoopCases[1], quantCoopCases[6], quantCoopCases[9]}}} {
		t.Run(line.name, func(t *testing.T) {
			if line.force != nil {
				skipNoCoopmat(t, d)
				coop0 := gpu.CoopDispatches()
				defer func() {
					if got := gpu.CoopDispatches() - coop0; got != 2*len(line.cases) {
						t.Errorf("%d cooperative-matrix GEMMs recorded, want %d (two per case)", got, 2*len(line.cases))
					}
				}()
				defer line.force()()
			}
			for _, c := range line.cases {
				if c.format != gpu.QuantQ8 || !c.scaleF16 {
					t.Fatalf("case %v: want q8 with f16 scales", c)
				}
				in := newQuantInputs(t, d, rng, c)
				a := in.run(t, d, gpu.LinearQuant, c.rows)
				f := make([]float32, len(in.scales))
				for i, v := range in.scales {
					f[i] = float32(v) // the f16 scale, exactly
				}
				f16 := in.w.Scales
				in.w.Scales = must(d.UploadFloat32("scales (f32)", f, f16.Shape()...)).T(t)
				b := in.run(t, d, gpu.LinearQuant, c.rows)
				in.w.Scales.Release()
				in.w.Scales = f16
				in.release()
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%v: y[%d] %g with f32 scales, %g with f16", c, i, b[i], a[i])
					}
				}
			}
		})
	}
}

// TestLinearQuantErrors: bad arguments are refused in Go, naming the op and the argument.
func TestLinearQuantErrors(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(37, 1))
	in := newQuantInputs(t, d, rng, quantCase{4, 20, 10, gpu.QuantQ8, q8Block, true, 0})
	defer in.release()
	y := must(d.NewBuffer("y", gpu.F32, 4, 10)).T(t)
	defer y.Release()
	bad16 := must(d.NewBuffer("bad", gpu.F16, 3)).T(t)
	defer bad16.Release()
	for _, c := range []struct {
		edit func(w *gpu.QuantWeight)
		x, y *gpu.Buffer
		rows int
		want string
	}{
		{func(w *gpu.QuantWeight) { w.Format = 0 }, in.x, y, 4, "unknown weight format"},
		{func(w *gpu.QuantWeight) { w.In = 21 }, in.x, y, 4, "codes"},
		{func(w *gpu.QuantWeight) { w.Block = [2]int{1, 8} }, in.x, y, 4, "scales"},
		{func(w *gpu.QuantWeight) { w.Scales = bad16 }, in.x, y, 4, "scales"},
		{func(w *gpu.QuantWeight) { w.Block = [2]int{0, 128} }, in.x, y, 4, "must be positive"},
		{func(w *gpu.QuantWeight) {}, in.x, y, 3, "input"},
		{func(w *gpu.QuantWeight) {}, in.x, in.x, 4, "output"},
		{func(w *gpu.QuantWeight) { w.Codes = y }, in.x, y, 4, "codes"},
	} {
		w := in.w
		c.edit(&w)
		err := d.Run(func(r *gpu.Recorder) error { return gpu.LinearQuant(r, c.x, w, c.y, c.rows) })
		if err == nil || !strings.Contains(err.Error(), "LinearQuant") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want LinearQuant and %q", err, c.want)
		}
	}
	if _, err := d.UploadQuantCodes("c", make([]byte, 5), 2, 3); err == nil || !strings.Contains(err.Error(), "5 codes for [2, 3]") {
		t.Errorf("UploadQuantCodes: %v", err)
	}
}

// TestLinearQuantFixture runs LinearQuant on real quantized weights, loaded the way a
// teacher net does (cmf.Tensor.QuantCodes and QuantScales, UploadQuantCodes): the FP8
// fixture's down_proj [256, 768] and in_proj_a [2, 256] (a ragged 2-row block), and the
// same down_proj quantized to q8 with its f16 scales, against host.LinearQuant of the same
// tensors within the suite's bound.
func TestLinearQuantFixture(t *testing.T) {
	d := gputest.Open(t)
	m := must(cmf.Open("../testdata/fixtures/tiny-fp8")).T(t)
	defer m.Close()
	down := m.Tensors["model.layers.0.mlp.down_proj.weight"]
	q8 := must(cmf.QuantizeQ8(down.Dequantized())).T(t)
	rng := rand.New(rand.NewPCG(38, 2))
	for _, tt := range []*cmf.Tensor{down, m.Tensors["model.layers.0.linear_attn.in_proj_a.weight"], q8} {
		t.Run(tt.Name+"-"+string(tt.Quant.Scheme), func(t *testing.T) {
			out, in := tt.Shape[0], tt.Shape[1]
			hw := must(host.QuantWeightOf(tt)).T(t)
			codes := must(tt.QuantCodes()).T(t)
			scales := must(tt.QuantScales()).T(t)
			w := gpu.QuantWeight{Codes: must(d.UploadQuantCodes("codes", codes, out, in)).T(t), Format: gpu.QuantFP8, Out: out, In: in, Block: tt.Quant.Block}
			ss := tt.Quant.Scale.Shape
			if tt.Quant.Scheme == cmf.QuantQ8 {
				w.Format = gpu.QuantQ8
				bits := make([]uint16, len(scales))
				for i, s := range scales {
					bits[i] = float16.Fromfloat32(s).Bits() // exact: the scales are f16
				}
				w.Scales = must(d.UploadF16("scales", bits, ss...)).T(t)
			} else {
				w.Scales = must(d.UploadFloat32("scales", scales, ss...)).T(t)
			}
			defer w.Release()
			rows := 37
			xf, xd := randF32(rng, rows*in, 1)
			x := must(d.UploadFloat32("x", xf, rows, in)).T(t)
			defer x.Release()
			want := must(host.LinearQuant(xd, rows, hw)).T(t)
			W := must(host.Dequantize(hw)).T(t)
			_, abs := refGEMM(xd, rows, in, W, out, true)
			for i := range abs {
				abs[i] *= float64(in+2) * 0x1p-24
			}
			got := quantInputs{x: x, w: w}.run(t, d, gpu.LinearQuant, rows)
			checkBound(t, "y", got, want, abs)
		})
	}
}
