package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
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
// student step's batch nb = 8 windows of t = 512 with the 0.8B's heads (hk = hv = 16) and
// the 4B's (hk = 16, hv = 32); each for the kernel forms of
// NVG_TC_VARIANTS (wgsl: GatedDeltaRuleChunked, coopmat: GatedDeltaRuleChunkedCoopmat).
// Reports tokens/s, ms per call and the GPU time of each kernel and of all (benchKernel
// with no name).
func BenchmarkGatedDeltaRuleChunked(b *testing.B) {
	for _, sz := range []struct {
		nb, t, hk, hv int
		large         bool
	}{{1, 512, 1, 2, false}, {8, 512, 16, 16, true}, {8, 512, 16, 32, true}} {
		b.Run(fmt.Sprintf("nb=%d,t=%d,hk=%d,hv=%d", sz.nb, sz.t, sz.hk, sz.hv), func(b *testing.B) {
			if sz.large && os.Getenv("NVG_BENCH_LARGE") != "1" {
				b.Skip("model-sized run: set NVG_BENCH_LARGE=1")
			}
			eachTCVariant(b, func(b *testing.B, coop bool) {
				run := gpu.GatedDeltaRuleChunked
				if coop {
					run = gpu.GatedDeltaRuleChunkedCoopmat
				}
				benchDeltaRule(b, run, gpu.DeltaRuleDims{NB: sz.nb, T: sz.t, HK: sz.hk, HV: sz.hv, DK: 128, DV: 128},
					func(d *gpu.Device, rows int, rec func(*gpu.Recorder) error, st *gpu.Buffer) {
						benchKernel(b, d, "", rows, rec, st)
					})
			})
		})
	}
}

// TestGatedDeltaRuleChunkedCoopmat: the chunked form with its inter-chunk stage on
// cooperative matrices (where tensor cores are available) under the forward parity suite,
// against the host and the token-by-token GPU kernel, with deltaRuleCoopTol; the suite's
// v ×2⁴⁰ and ×2⁻⁴⁰ cases put the state and V' beyond f16's range and below its normals. The
// "gputiles" subtest runs the suite under the GPUs' tiles (gpuTiles: L value columns, one
// fragment column a workgroup, as on an H100), "wide" under 4·L where the workgroup memory
// allows (wideDeltaTiles).
func TestGatedDeltaRuleChunkedCoopmat(t *testing.T) {
	skipNoCoopmat(t, gputest.Open(t))
	coop0 := gpu.CoopDispatches()
	testDeltaRule(t, deltaRuleImpl{gpu.GatedDeltaRuleChunkedCoopmat, []int{0}, deltaRuleCoopTol, true})
	t.Run("gputiles", func(t *testing.T) {
		testDeltaRule(t, deltaRuleImpl{gpuTiles(gpu.GatedDeltaRuleChunkedCoopmat), []int{0}, deltaRuleCoopTol, true})
	})
	t.Run("wide", func(t *testing.T) {
		testDeltaRule(t, deltaRuleImpl{wideDeltaTiles(gpu.GatedDeltaRuleChunkedCoopmat), []int{0}, deltaRuleCoopTol, true})
	})
	if gpu.CoopDispatches() == coop0 {
		t.Error("no cooperative-matrix kernel recorded")
	}
}

// wideDeltaTiles is f run with the delta rule's widest cooperative-matrix tiles
// (gpu.SetCoopDeltaWide: 4·L value columns, halved until the workgroup memory fits).
func wideDeltaTiles[F any](f F) F {
	v := reflect.ValueOf(f)
	return reflect.MakeFunc(v.Type(), func(args []reflect.Value) []reflect.Value {
		defer gpu.SetCoopDeltaWide(true)()
		return v.Call(args)
	}).Interface().(F)
}

// deltaRuleCoopTol is the cooperative-matrix form's tolerance relative to the largest
// value: every f16 operand (q, k, W, Aqk packed per chunk; S and V' scaled per chunk by
// their largest value) carries one rounding of ≤ e16 relative (values below 2⁻²⁸ of their
// block's largest round to f16 subnormals, ≤ 2⁻³⁹ of it: negligible here); within a chunk an
// output passes through at most three products of rounded operands (W·S or Q·S, then Aqk·V'
// or Kᵀ·V'), each adding ≤ 2e16 of the sizes it combines, which the model's inputs keep at
// the size of the outputs (l2-normalised q and k, |A_is| < 1); the chunks' recurrence is
// non-expansive (deltaRuleChunkedTol), so the errors of the ⌈t/64⌉ chunks add: atol =
// 6·(⌈t/64⌉ + 1)·e16·max|want| (1.2 % at one chunk), at least the f32 form's tolerance.
func deltaRuleCoopTol(d gpu.DeltaRuleDims) float64 {
	nck := float64((d.T + 63) / 64)
	return math.Max(6*(nck+1)*e16, deltaRuleChunkedTol(d))
}

// TestGatedDeltaRuleAutoCoopmat: the seams. With tensor cores forced on (where available),
// GatedDeltaRuleAuto records the cooperative-matrix form and gives GatedDeltaRuleChunkedCoopmat's
// bits (it takes every shape the WGSL chunked form takes: dv of any size), and
// GatedDeltaRuleBackwardAuto GatedDeltaRuleChunkedBackwardCoopmat's, except for dv = 21 (not a
// multiple of 4), where the backward falls back to the WGSL form the automatic choice takes;
// with tensor cores forced off neither records any and both give the WGSL forms' bits.
func TestGatedDeltaRuleAutoCoopmat(t *testing.T) {
	d := gputest.Open(t)
	skipNoCoopmat(t, d)
	rng := rand.New(rand.NewPCG(41, 42))
	type fwdFn = func(r *gpu.Recorder, q, k, v, g, beta, o, state *gpu.Buffer, dims gpu.DeltaRuleDims) error
	type bwdFn = func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error
	for _, c := range []struct {
		dv               int
		on, coopF, coopB bool // tensor cores forced on; Auto must take the cooperative-matrix forms
	}{{20, true, true, true}, {21, true, true, false}, {20, false, false, false}} {
		dm := gpu.DeltaRuleDims{NB: 2, T: 100, HK: 1, HV: 2, DK: 16, DV: c.dv}
		t.Run(fmt.Sprintf("dv=%d tensorcores=%v", c.dv, c.on), func(t *testing.T) {
			defer gpu.SetTensorCores(c.on)()
			if f, b := gpu.GatedDeltaRuleCoopmatFits(d, dm), gpu.GatedDeltaRuleBackwardCoopmatFits(d, dm); f != c.coopF || b != c.coopB {
				t.Fatalf("GatedDeltaRuleCoopmatFits = %v, GatedDeltaRuleBackwardCoopmatFits = %v, want %v, %v", f, b, c.coopF, c.coopB)
			}
			rows := dm.NB * dm.T
			f, _ := chunkedInputs(t, rng, rows, dm.HK, dm.HV, dm.DK, dm.DV, 1)
			dof, _ := randF32(rng, rows*dm.HV*dm.DV, 1)
			bs := newBufs(t, d)
			q, k, v := bs.up("q", f[0], rows, dm.HK, dm.DK), bs.up("k", f[1], rows, dm.HK, dm.DK), bs.up("v", f[2], rows, dm.HV, dm.DV)
			g, beta, do := bs.up("g", f[3], rows, dm.HV), bs.up("beta", f[4], rows, dm.HV), bs.up("do", dof, rows, dm.HV, dm.DV)
			run := func(fwd fwdFn, bwd bwdFn) ([7][]float32, int) {
				outs := []*gpu.Buffer{bs.nw("o", rows, dm.HV, dm.DV), bs.nw("state", dm.NB, dm.HV, dm.DK, dm.DV), bs.nw("dq", rows, dm.HK, dm.DK),
					bs.nw("dk", rows, dm.HK, dm.DK), bs.nw("dv", rows, dm.HV, dm.DV), bs.nw("dg", rows, dm.HV), bs.nw("dbeta", rows, dm.HV)}
				c0 := gpu.CoopDispatches()
				if err := d.Run(func(r *gpu.Recorder) error {
					if err := fwd(r, q, k, v, g, beta, outs[0], outs[1], dm); err != nil {
						return err
					}
					return bwd(r, q, k, v, g, beta, do, outs[2], outs[3], outs[4], outs[5], outs[6], dm)
				}); err != nil {
					t.Fatal(err)
				}
				var res [7][]float32
				for i, b := range outs {
					res[i] = must(d.ReadFloat32(b)).T(t)
				}
				return res, gpu.CoopDispatches() - c0
			}
			auto, n := run(gpu.GatedDeltaRuleAuto, gpu.GatedDeltaRuleBackwardAuto)
			// The forms the automatic choice must take, in its order of preference.
			fwd := firstFit([]bool{c.coopF, gpu.GatedDeltaRuleLanesFits(d, dm), gpu.GatedDeltaRuleChunkedFits(d, dm)},
				[]fwdFn{gpu.GatedDeltaRuleChunkedCoopmat, gpu.GatedDeltaRuleLanes, gpu.GatedDeltaRuleChunked, gpu.GatedDeltaRule})
			bwd := firstFit([]bool{c.coopB, gpu.GatedDeltaRuleBackwardLanesFits(d, dm), gpu.GatedDeltaRuleChunkedBackwardFits(d, dm)},
				[]bwdFn{gpu.GatedDeltaRuleChunkedBackwardCoopmat, gpu.GatedDeltaRuleBackwardLanes, gpu.GatedDeltaRuleChunkedBackward, gpu.GatedDeltaRuleBackward})
			want, nref := run(fwd, bwd)
			if n != nref || (n > 0) != (c.coopF || c.coopB) {
				t.Errorf("%d cooperative-matrix kernels recorded, want %d (the forms the choice must take)", n, nref)
			}
			for i := range auto {
				for e := range auto[i] {
					if math.Float32bits(auto[i][e]) != math.Float32bits(want[i][e]) {
						t.Fatalf("output %d element %d: Auto %g, the form it should take %g", i, e, auto[i][e], want[i][e])
					}
				}
			}
		})
	}
}

// firstFit returns forms[i] for the first fits[i] that holds, else the last form.
func firstFit[F any](fits []bool, forms []F) F {
	for i, ok := range fits {
		if ok {
			return forms[i]
		}
	}
	return forms[len(forms)-1]
}

// TestGatedDeltaRuleChunkedUnrolled: the intra-chunk kernel's two forms of the forward
// substitution (gpu.SetGDRCUnroll: unrolled over the chunk's rows, what GPUs run; the loop,
// what CPU adapters run) both meet the host reference, and each other within the same
// tolerance (they add in the same order, but the driver may fuse multiplies and adds
// differently in each: 1 ulp apart on lavapipe). Two windows of 100 tokens (the second
// chunk of 36: rows past L skipped), dk = 16, dv = 20, hv = 2 per key head. One case only:
// lavapipe's LLVM takes ~1 min to compile the unrolled kernel.
func TestGatedDeltaRuleChunkedUnrolled(t *testing.T) {
	d := gputest.Open(t)
	dm := gpu.DeltaRuleDims{NB: 2, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}
	rows := dm.NB * dm.T
	f, in := chunkedInputs(t, rand.New(rand.NewPCG(51, 52)), rows, dm.HK, dm.HV, dm.DK, dm.DV, 1)
	bs := newBufs(t, d)
	q, k, v := bs.up("q", f[0], rows, dm.HK, dm.DK), bs.up("k", f[1], rows, dm.HK, dm.DK), bs.up("v", f[2], rows, dm.HV, dm.DV)
	g, beta := bs.up("g", f[3], rows, dm.HV), bs.up("beta", f[4], rows, dm.HV)
	wo, ws, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV, true)
	if err != nil {
		t.Fatal(err)
	}
	tol := deltaRuleChunkedTol(dm)
	var o, st [2][]float32
	for i, unrolled := range []bool{false, true} {
		restore := gpu.SetGDRCUnroll(unrolled)
		ob, sb := bs.nw("o", rows, dm.HV, dm.DV), bs.nw("state", dm.NB, dm.HV, dm.DK, dm.DV)
		err := d.Run(func(r *gpu.Recorder) error { return gpu.GatedDeltaRuleChunked(r, q, k, v, g, beta, ob, sb, dm) })
		restore()
		if err != nil {
			t.Fatal(err)
		}
		o[i], st[i] = must(d.ReadFloat32(ob)).T(t), must(d.ReadFloat32(sb)).T(t)
		form := map[bool]string{false: "loop", true: "unrolled"}[unrolled]
		t.Logf("%s: o max |err|/max|want| %.3g, state %.3g (tolerance %.3g)", form,
			checkClose(t, form+" o vs host", o[i], wo, tol*maxAbs(wo), 0)/maxAbs(wo),
			checkClose(t, form+" state vs host", st[i], ws, tol*maxAbs(ws), 0)/maxAbs(ws), tol)
	}
	checkClose(t, "o unrolled vs loop", o[1], f64(o[0]), tol*maxAbs(wo), 0)
	checkClose(t, "state unrolled vs loop", st[1], f64(st[0]), tol*maxAbs(ws), 0)
}
