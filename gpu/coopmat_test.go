package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestTensorCoresStatus: the status is consistent, and on a Mesa lavapipe older than 26 (Debian
// bookworm's 22.3, what CI runs the suite on) the Vulkan layer loaded and reported the
// fallback: "off: … lacks VK_KHR_cooperative_matrix". Where tensor cores are available, the
// self-test at Open ran; NVG_EXPECT_TENSOR_CORES=1 (.ci/coopmat) requires them.
func TestTensorCoresStatus(t *testing.T) {
	d := gputest.Open(t)
	tc := d.TensorCores()
	info := d.Info()
	t.Logf("%s: tensor cores %s; shapes %v; self-test: %s; %s", info.Name, tc, tc.Shapes, tc.SelfTest, tc.Features)
	switch {
	case tc.On:
		if !tc.Available || tc.Reason != "" || !strings.HasPrefix(tc.String(), "on (") {
			t.Errorf("on, but Available=%v Reason=%q String=%q", tc.Available, tc.Reason, tc)
		}
	case tc.Reason == "" || !strings.HasPrefix(tc.String(), "off: "):
		t.Errorf("off without a reason: %+v", tc)
	}
	if os.Getenv("NVG_EXPECT_TENSOR_CORES") == "1" && !tc.Available { // .ci/coopmat (Mesa 26)
		t.Errorf("NVG_EXPECT_TENSOR_CORES=1 but %s has none: %s", info.Name, tc.Reason)
	}
	t.Logf("coopmat2: %v %s; self-test: %s; pipeline robustness extension: %v; limits %+v; flexible shapes %v", tc.Coopmat2,
		tc.Coopmat2Reason, tc.Coopmat2SelfTest, tc.PipelineRobustness, tc.Coopmat2Limits, tc.FlexShapes)
	if tc.Coopmat2 && (!tc.Available || tc.Coopmat2Reason != "") || tc.Coopmat2On && (!tc.Coopmat2 || tc.Coopmat2SelfTest == "") {
		t.Errorf("coopmat2 available without tensor cores or with a reason, or chosen without a self-test: %+v", tc)
	}
	if !tc.Coopmat2 && tc.Coopmat2Reason == "" && tc.Available {
		t.Errorf("coopmat2 off without a reason: %+v", tc)
	}
	if os.Getenv("NVG_EXPECT_COOPMAT2") == "1" && !tc.Coopmat2 { // bench/device.sh parity on NVIDIA
		t.Errorf("NVG_EXPECT_COOPMAT2=1 but %s has no coopmat2 GEMM: %s", info.Name, tc.Coopmat2Reason)
	}
	if tc.Available && (tc.SelfTest == "" || tc.Shape.M == 0 || tc.SubgroupSize == 0) {
		t.Errorf("available without a self-test, shape or subgroup size: %+v", tc)
	}
	if info.CPU && tc.Available && tc.On != (os.Getenv("NVG_TENSOR_CORES") == "on") {
		t.Errorf("CPU adapter: On = %v, want it only with NVG_TENSOR_CORES=on", tc.On)
	}
	if old := strings.Contains(info.Description, "Mesa 22.") || strings.Contains(info.Description, "Mesa 25."); old &&
		os.Getenv("NVG_TENSOR_CORES") != "off" && !strings.Contains(tc.Reason, "lacks VK_KHR_cooperative_matrix") {
		t.Errorf("%s (%s): want the layer's fallback \"lacks VK_KHR_cooperative_matrix\", got %q", info.Name, info.Description, tc)
	}
}

// TestChildTensorCores is the body run in a child process by TestTensorCoresFallbacks.
func TestChildTensorCores(t *testing.T) {
	if os.Getenv("GPUTEST_CHILD") != "1" {
		t.Skip("run by TestTensorCoresFallbacks in a child process")
	}
	d := gputest.Open(t)
	t.Logf("TC: %s", d.TensorCores())
	t.Logf("LAYERS: %s", os.Getenv("VK_INSTANCE_LAYERS"))
}

// TestTensorCoresFallbacks opens the device in child processes under the failures the
// status must name in one line, with the device still usable: the opt-out
// (NVG_TENSOR_CORES=off: no layer at all), a loader that does not load the layer, and no C
// compiler to build the layer (an empty cache and CC pointing at nothing).
func TestTensorCoresFallbacks(t *testing.T) {
	if os.Getenv("GPUTEST_CHILD") == "1" {
		return
	}
	gputest.Open(t) // skips or fails as the other GPU tests do
	run := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildTensorCores$", "-test.v", "-test.count=1")
		// This process put the layer into the loader's variables; the child starts without.
		cmd.Env = append(os.Environ(), append([]string{"GPUTEST_CHILD=1", "NVG_REQUIRE_GPU=1",
			"VK_INSTANCE_LAYERS=", "VK_ADD_LAYER_PATH="}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with %v: %v\n%s", env, err, out)
		}
		return string(out)
	}
	out := run("NVG_TENSOR_CORES=off")
	if !strings.Contains(out, "TC: off: NVG_TENSOR_CORES=off") || strings.Contains(out, "VK_LAYER_NVG") {
		t.Errorf("NVG_TENSOR_CORES=off: want \"off: NVG_TENSOR_CORES=off\" and no layer in VK_INSTANCE_LAYERS, got\n%s", out)
	}
	// The loader told to skip the layer (VK_LOADER_LAYERS_DISABLE, loader ≥ 1.3.234): nvg
	// retries with VK_LAYER_PATH, then reports it.
	out = run("VK_LOADER_LAYERS_DISABLE=VK_LAYER_NVG_tensor_cores")
	if !strings.Contains(out, "TC: off: the Vulkan loader did not load the layer VK_LAYER_NVG_tensor_cores") {
		t.Errorf("layer disabled in the loader: want \"off: the Vulkan loader did not load the layer…\", got\n%s", out)
	}
	out = run("CC=/nonexistent/cc", "XDG_CACHE_HOME="+t.TempDir())
	if !strings.Contains(out, "TC: off: building the Vulkan layer with /nonexistent/cc failed") {
		t.Errorf("no compiler: want \"off: building the Vulkan layer with /nonexistent/cc failed…\", got\n%s", out)
	}
}

// TestTensorCoresForcedOff: SetTensorCores(false) keeps every GEMM on the WGSL kernels.
func TestTensorCoresForcedOff(t *testing.T) {
	d := gputest.Open(t)
	defer gpu.SetTensorCores(false)()
	x := must(d.NewBuffer("x", gpu.F32, 16, 64)).T(t)
	w := must(d.UploadF16("W", make([]uint16, 64*64), 64, 64)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 16, 64)).T(t)
	defer func() { x.Release(); w.Release(); y.Release() }()
	c0 := gpu.CoopDispatches()
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.Linear(r, x, w, y, 16, 64, 64) }); err != nil {
		t.Fatal(err)
	}
	if n := gpu.CoopDispatches() - c0; n != 0 {
		t.Errorf("%d cooperative-matrix GEMMs with tensor cores forced off", n)
	}
}

// TestCoopmatPack: CoopmatPack (the f16 A operand of the cooperative-matrix GEMMs) against a
// host reference in each of its forms — the general one (k % 4 ≠ 0, or rows past 16384
// columns; forced on every shape too) and 16-byte vectors held in registers, R = 1 … 16 per
// invocation, 32 to 256 threads a row (8 to 1 rows a workgroup, some past mp) — with and
// without the column scales sa, in column order and in the 8-bit GEMM's pairs order (each
// group of 4 columns stored as 0, 2, 1, 3): each row's inverse scale
// rs = 2^−e exactly, e = clamp(15 − exp(max_c |v_c|), −126, 126) (0 for a zero row), each
// element within one f16 step of v·2^e (the WGSL conversion's rounding is the
// implementation's), the padding columns and rows zero, a padding row's rs 1. Plain WGSL: it
// runs on every adapter.
func TestCoopmatPack(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(36, 1))
	for _, c := range []struct {
		m, k, kp, wg, r int
		scale           bool
	}{
		{5, 40, 64, 32, 1, false}, {3, 131, 160, 64, 0, true}, {4, 1024, 1024, 32, 8, true},
		{9, 384, 384, 32, 3, true}, {3, 3584, 3584, 128, 7, false}, {2, 6144, 6208, 256, 7, true},
		{2, 8192, 8192, 256, 8, false}, {2, 8196, 8256, 256, 9, true}, {2, 16384, 16384, 256, 16, false},
		{2, 16388, 16448, 64, 0, false},
	} {
		for _, form := range []struct{ general, pairs bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			general, pairs := form.general, form.pairs
			t.Run(fmt.Sprintf("%dx%d_kp%d_scale%v_general%v_pairs%v", c.m, c.k, c.kp, c.scale, general, pairs), func(t *testing.T) {
				defer gpu.SetCoopPackGeneral(general)()
				if wg, r := gpu.CoopmatPackForm(c.k, c.kp); !general && (wg != c.wg || r != c.r) {
					t.Errorf("form: %d threads a row, %d vectors per invocation; want %d, %d", wg, r, c.wg, c.r)
				}
				mp := c.m + 2
				af := make([]float32, c.m*c.k)
				for i := range af {
					if row := i / c.k; row != 1 { // row 1 stays zero
						af[i] = float32((rng.Float64()*2 - 1) * math.Pow(10, float64(row%12)-8+float64(c.k%5)))
					}
				}
				sa := make([]float32, c.k)
				for i := range sa {
					sa[i] = 1
					if c.scale {
						sa[i] = float32(0.5 + rng.Float64())
					}
				}
				a := must(d.UploadFloat32("A", af, c.m, c.k)).T(t)
				defer a.Release()
				var sab *gpu.Buffer
				if c.scale {
					sab = must(d.UploadFloat32("sa", sa, c.k)).T(t)
					defer sab.Release()
				}
				a16 := must(d.NewBuffer("a16", gpu.U32, mp, c.kp/2)).T(t)
				rs := must(d.NewBuffer("rs", gpu.F32, mp)).T(t)
				defer a16.Release()
				defer rs.Release()
				if err := d.Run(func(r *gpu.Recorder) error { return gpu.CoopmatPack(r, a, sab, a16, rs, c.m, c.k, mp, c.kp, pairs) }); err != nil {
					t.Fatal(err)
				}
				words := must(d.ReadUint32(a16)).T(t)
				scales := must(d.ReadFloat32(rs)).T(t)
				bad := 0
				for i := range mp {
					v := make([]float32, c.k)
					amax := 0.0
					for col := range v {
						if i < c.m {
							v[col] = af[i*c.k+col] * sa[col]
						}
						amax = math.Max(amax, math.Abs(float64(v[col])))
					}
					e := 0
					if amax > 0 {
						_, ex := math.Frexp(amax)
						e = min(max(15-ex, -126), 126)
					}
					if want := float32(math.Ldexp(1, -e)); scales[i] != want {
						t.Errorf("rs[%d] = %g, want %g", i, scales[i], want)
					}
					for pos := range c.kp {
						h := uint16(words[(i*c.kp+pos)/2] >> (16 * (pos % 2)))
						col := pos // the column stored at pos
						if pairs {
							col = pos&^3 | [4]int{0, 2, 1, 3}[pos&3]
						}
						got := float64(float16.Frombits(h).Float32())
						if col >= c.k || i >= c.m {
							if h != 0 {
								t.Errorf("padding a16[%d, %d] = %#04x, want 0", i, pos, h)
							}
							continue
						}
						x := float64(float32(math.Ldexp(float64(v[col]), e)))
						step := math.Pow(2, -24) // f16's subnormal step, and its step below 2⁻¹⁴
						if ax := math.Abs(x); ax >= math.Pow(2, -14) {
							_, ex := math.Frexp(ax)
							step = math.Ldexp(1, ex-11)
						}
						if !(math.Abs(got-x) <= step) && bad < 5 {
							bad++
							t.Errorf("a16[%d, %d] (column %d) = %g, want f16(%g) within %g", i, pos, col, got, x, step)
						}
					}
				}
			})
		}
	}
}

// TestCoopmatPackTwin: the twin form of CoopmatPack (both BLR paths' operands, A ⊙ sa and
// A ⊙ sb, in one pass) gives the bits of two single packs, in every vector form (R 1 … 9,
// 32 to 256 threads a row, rows past m), with sa and sb of different magnitudes (so the
// rows' powers of two differ between the packs), a zero row, and columns past k. It writes
// both packs into one a16 and one rs buffer as coopPackPaths lays them out (CoopPairLayout:
// path 1's part at an offset on the storage alignment, rs of a few rows padded up to it);
// the bytes between the parts are left as they were. Plain WGSL: it runs on every adapter.
func TestCoopmatPackTwin(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(36, 2))
	for _, c := range []struct{ m, k, kp int }{{5, 40, 64}, {9, 384, 384}, {3, 3584, 3584}, {2, 6144, 6208}, {4, 8196, 8256}} {
		t.Run(fmt.Sprintf("%dx%d_kp%d", c.m, c.k, c.kp), func(t *testing.T) {
			mp := c.m + 3
			af := make([]float32, c.m*c.k)
			for i := range af {
				if row := i / c.k; row != 1 { // row 1 stays zero
					af[i] = float32((rng.Float64()*2 - 1) * math.Pow(10, float64(row%7)-3))
				}
			}
			sa, sb := make([]float32, c.k), make([]float32, c.k)
			for i := range sa {
				sa[i] = float32(0.5 + rng.Float64())
				sb[i] = float32((0.5 + rng.Float64()) * math.Ldexp(1, -7+int(rng.IntN(3))))
			}
			tb := newBufs(t, d)
			a := tb.up("A", af, c.m, c.k)
			sab, sbb := tb.up("sa", sa, c.k), tb.up("sb", sb, c.k)
			var outs [2][2]*gpu.Buffer // single sa, single sb: a16 and rs
			for i := range outs {
				outs[i] = [2]*gpu.Buffer{tb.nwU32("a16", mp, c.kp/2), tb.nw("rs", mp)}
			}
			aOff, rsOff, aTotal, rsTotal := gpu.CoopPairLayout(d, mp, c.kp)
			align := d.StorageAlign()
			if aOff%align != 0 || rsOff%align != 0 || aOff < uint64(mp*c.kp*2) || rsOff < uint64(4*mp) ||
				aTotal != aOff+uint64(mp*c.kp*2) || rsTotal != rsOff+uint64(4*mp) {
				t.Fatalf("CoopPairLayout(%d, %d) = %d, %d, %d, %d: parts not aligned to %d or overlapping", mp, c.kp, aOff, rsOff, aTotal, rsTotal, align)
			}
			// Both paths' packs in one buffer each, filled with a marker the pack must not
			// overwrite between the parts.
			const marker = 0x7fc0dead
			fillA, fillR := make([]uint32, aTotal/4), make([]uint32, rsTotal/4)
			for i := range fillA {
				fillA[i] = marker
			}
			for i := range fillR {
				fillR[i] = marker
			}
			a16 := must(d.UploadUint32("a16 both", fillA, len(fillA))).T(t)
			t.Cleanup(a16.Release)
			rsBoth := must(d.UploadUint32("rs both", fillR, len(fillR))).T(t)
			t.Cleanup(rsBoth.Release)
			twins := gpu.CoopTwinPacks()
			err := d.Run(func(r *gpu.Recorder) error {
				if err := gpu.CoopmatPack(r, a, sab, outs[0][0], outs[0][1], c.m, c.k, mp, c.kp, false); err != nil {
					return err
				}
				if err := gpu.CoopmatPack(r, a, sbb, outs[1][0], outs[1][1], c.m, c.k, mp, c.kp, false); err != nil {
					return err
				}
				return gpu.CoopmatPackTwin(r, a, sab, sbb, a16, rsBoth, c.m, c.k, mp, c.kp)
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := gpu.CoopTwinPacks() - twins; n != 1 {
				t.Errorf("%d twin packs recorded, want 1", n)
			}
			wa, wr := must(d.ReadUint32(a16)).T(t), must(d.ReadUint32(rsBoth)).T(t)
			aw, rw := mp*c.kp/2, mp  // words of one path's part
			parts := [2][2][]uint32{ // path p's a16 and rs words in the shared buffers
				{wa[:aw], wr[:rw]},
				{wa[aOff/4 : aOff/4+uint64(aw)], wr[rsOff/4 : rsOff/4+uint64(rw)]},
			}
			for p := range 2 {
				ws, wt := must(d.ReadUint32(outs[p][0])).T(t), parts[p][0]
				for i := range ws {
					if ws[i] != wt[i] {
						t.Fatalf("path %d: a16 word %d = %#08x, the single pack's %#08x", p, i, wt[i], ws[i])
					}
				}
				sameBits(t, fmt.Sprintf("path %d rs", p), must(d.ReadFloat32(outs[p][1])).T(t), f32s(parts[p][1]))
			}
			for _, gap := range [][]uint32{wa[aw : aOff/4], wr[rw : rsOff/4]} {
				for i, w := range gap {
					if w != marker {
						t.Fatalf("word %d between the paths' parts = %#08x: the pack wrote outside its part", i, w)
					}
				}
			}
			// The paths' scales differ by 2⁻⁷ … 2⁻⁵ (sb against sa): their rows' powers of two must too.
			r0, r1 := f32s(parts[0][1]), f32s(parts[1][1])
			if r0[0] == r1[0] {
				t.Errorf("row 0's inverse scales are equal in both packs (%g): the test does not tell the packs apart", r0[0])
			}
		})
	}
}

// f32s returns the words as f32 values (their bits).
func f32s(w []uint32) []float32 {
	f := make([]float32, len(w))
	for i, v := range w {
		f[i] = math.Float32frombits(v)
	}
	return f
}

// eachTCVariant runs body as a sub-benchmark per kernel form of NVG_TC_VARIANTS (a
// comma-separated list of "wgsl" and "coopmat"; both when unset): the attention and delta-rule
// benchmarks compare their WGSL kernels with the cooperative-matrix ones in one run. The
// coopmat variant skips on a device without tensor cores.
func eachTCVariant(b *testing.B, body func(b *testing.B, coop bool)) {
	vs := os.Getenv("NVG_TC_VARIANTS")
	if vs == "" {
		vs = "wgsl,coopmat"
	}
	for _, v := range strings.Split(vs, ",") {
		b.Run(v, func(b *testing.B) {
			switch v {
			case "wgsl":
			case "coopmat":
				d := gputest.Open(b)
				if tc := d.TensorCores(); !tc.Available {
					b.Skipf("no tensor cores on %s: %s", d.Info().Name, tc.Reason)
				}
			default:
				b.Fatalf("NVG_TC_VARIANTS: %q is neither wgsl nor coopmat", v)
			}
			body(b, v == "coopmat")
		})
	}
}
