package gpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// The dense f16 GEMM on VK_NV_cooperative_matrix2 (coopmat/coopmat2_gemm.comp): workgroup-
// scope cooperative matrices loaded by tensor addressing, where the Vulkan layer enabled the
// extension (NVIDIA drivers list it on Ampere and newer). It stands in for coopmat_gemm.spv
// in coopGEMM — the same packed A, bindings, split-K and results within the same bound
// (TestLinearFamily's coopmat2 lines) — where chosen (NVG_COOPMAT2=on, SetCoopmat2), and is
// switched off alone, keeping the KHR kernels, where its self-test at Open fails or its
// pipeline cannot be made. Not chosen by default: on an H100 (driver 580) it ran the dense
// GEMMs at 35–56 TFLOP/s where the KHR kernel runs 190–270 (DESIGN.md §7).

// CoopFlexType is one flexible-dimension cooperative-matrix type a device reports
// (VkCooperativeMatrixFlexibleDimensionsPropertiesNV): CoopType's fields, with M, N and K the
// granularities a matrix's dimensions must be multiples of, and Invocations the workgroup
// size a workgroup-scope type requires (0 for other scopes).
type CoopFlexType struct {
	CoopType
	Invocations int `json:"invocations"`
}

// Coopmat2Limits are a device's VkPhysicalDeviceCooperativeMatrix2PropertiesNV: the largest
// workgroup for workgroup-scope matrices, the largest flexible dimension, and the shared
// memory (bytes) the driver reserves for workgroup-scope matrices.
type Coopmat2Limits struct {
	MaxWorkgroup   int `json:"max_workgroup"`
	MaxDimension   int `json:"max_dimension"`
	ReservedShared int `json:"reserved_shared"`
}

// coop2Tile is a coopmat2 GEMM's block: BM×BN outputs per workgroup of NT invocations over
// BK slices.
type coop2Tile struct{ BM, BN, BK, NT int }

func (t coop2Tile) String() string { return fmt.Sprintf("%dx%dx%d/%d", t.BM, t.BN, t.BK, t.NT) }

// parseCoop2Tile parses "BMxBNxBK/NT" (NVG_COOPMAT2_TILE).
func parseCoop2Tile(s string) (coop2Tile, error) {
	var t coop2Tile
	blk, nt, ok := strings.Cut(s, "/")
	a := strings.Split(blk, "x")
	if !ok || len(a) != 3 {
		return t, fmt.Errorf("NVG_COOPMAT2_TILE=%q: want BMxBNxBK/NT, e.g. 128x128x64/256", s)
	}
	var v [4]int
	for i, f := range append(a, nt) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return t, fmt.Errorf("NVG_COOPMAT2_TILE=%q: %q is not a positive integer", s, f)
		}
		v[i] = n
	}
	return coop2Tile{v[0], v[1], v[2], v[3]}, nil
}

// check validates t against the device's flexible-dimension types and limits: an f16×f16→f32
// workgroup-scope type of NT invocations whose granularities divide BM, BN and BK (BK also a
// multiple of 8: the packed A's 16-byte rows), dimensions within MaxDimension and NT within
// MaxWorkgroup and the device's invocations.
func (t coop2Tile) check(flex []CoopFlexType, lim Coopmat2Limits, info Info) error {
	if t.BK%8 != 0 {
		return fmt.Errorf("coopmat2 tile %s: BK not a multiple of 8", t)
	}
	if lim.MaxDimension > 0 && max(t.BM, t.BN, t.BK) > lim.MaxDimension {
		return fmt.Errorf("coopmat2 tile %s: a dimension exceeds the device's %d", t, lim.MaxDimension)
	}
	if (lim.MaxWorkgroup > 0 && t.NT > lim.MaxWorkgroup) || (info.MaxInvocations > 0 && t.NT > int(info.MaxInvocations)) {
		return fmt.Errorf("coopmat2 tile %s: %d invocations exceed the device's limits", t, t.NT)
	}
	for _, f := range flex {
		if f.A == "f16" && f.B == "f16" && f.C == "f32" && f.Result == "f32" && !f.Saturating && f.Scope == "workgroup" &&
			f.Invocations == t.NT && f.M > 0 && f.N > 0 && f.K > 0 && t.BM%f.M == 0 && t.BN%f.N == 0 && t.BK%f.K == 0 {
			return nil
		}
	}
	return fmt.Errorf("coopmat2 tile %s: no f16×f16→f32 workgroup-scope type of %d invocations divides it (the device lists %v)", t, t.NT, flex)
}

// coop2Force is SetCoopmat2's choice: 0 automatic (on where available), 1 on, −1 off.
var coop2Force atomic.Int32

// coop2Dispatches counts the coopmat2 GEMMs recorded (tests check that a forced path ran).
var coop2Dispatches atomic.Int64

// coop2TileForce is NVG_COOPMAT2_TILE, parsed at Open (zero: automatic).
var coop2TileForce coop2Tile

// coop2Robust is NVG_COOPMAT2_ROBUST=on, read at Open: the coopmat2 pipelines keep robust
// buffer access (for an A/B measurement; their loads clamp and their stores drop what lies
// outside, so they never need it).
var coop2Robust bool

// coop2Slow is NVG_COOPMAT2_FAST=off, read at Open: every block takes the kernel's clamped
// loop without stride hints (coopmat2_gemm.comp's FAST off; for an A/B measurement).
var coop2Slow bool

// SetCoopmat2 forces the coopmat2 GEMM on (where TensorCores().Coopmat2) or off (the KHR
// kernel) for every device of the process, and returns a function restoring the previous
// choice. For tests and benchmarks.
func SetCoopmat2(on bool) (restore func()) { return setForce(&coop2Force, on) }

// coop2Use reports whether coopGEMM takes the coopmat2 kernel now: where available, when
// forced on (SetCoopmat2) or, unforced, when NVG_COOPMAT2=on chose it at Open.
func (d *Device) coop2Use() bool {
	d.mu.Lock()
	tc := d.tc
	d.mu.Unlock()
	switch coop2Force.Load() {
	case 1:
		return tc.Coopmat2
	case -1:
		return false
	}
	return tc.Coopmat2 && tc.Coopmat2On
}

// coop2Off turns the coopmat2 GEMM off on d with reason (the KHR kernels stay), printing it
// once on stderr.
func (d *Device) coop2Off(reason string) {
	d.mu.Lock()
	was := d.tc.Coopmat2
	d.tc.Coopmat2, d.tc.Coopmat2On, d.tc.Coopmat2Reason = false, false, reason
	d.mu.Unlock()
	if was {
		fmt.Fprintf(os.Stderr, "nvg/gpu: coopmat2 GEMM off (KHR cooperative matrices stay): %s\n", reason)
	}
}

// coop2TileRules are the blocks coop2TileFor chooses among, in order of preference (a block
// is taken for an output of at least min workgroups of it); the last is the fallback.
// NVG_COOPMAT2_TILE: that block alone.
func (d *Device) coop2TileRules() []coop2TileRule {
	if coop2TileForce != (coop2Tile{}) {
		return []coop2TileRule{{coop2TileForce, 0}}
	}
	return []coop2TileRule{{coop2Tile{128, 256, 64, 256}, 132}, {coop2Tile{128, 128, 64, 256}, coopBigTileGroups}, {coop2Tile{64, 64, 64, 128}, 0}}
}

// coop2TileRule is one candidate block of coop2TileFor.
type coop2TileRule struct {
	t   coop2Tile
	min int
}

// coop2TileFor picks the block of an m×n output: the first rule that makes enough
// workgroups and suits the device, else the last that suits it; ok false where none does.
func (d *Device) coop2TileFor(m, n int) (coop2Tile, bool) {
	if d.coop2TileTest != (coop2Tile{}) {
		return d.coop2TileTest, true
	}
	var last coop2Tile
	found := false
	for _, r := range d.coop2TileRules() {
		if r.t.check(d.tc.FlexShapes, d.tc.Coopmat2Limits, d.info) != nil {
			continue
		}
		groups := ((m + r.t.BM - 1) / r.t.BM) * ((n + r.t.BN - 1) / r.t.BN)
		if groups >= r.min {
			return r.t, true
		}
		last, found = r.t, true
	}
	return last, found
}

// coop2GEMM is coopGEMM on the coopmat2 kernel: C[m, n] = A·B with B f16 [n, k] (transB) or
// [k, n]; coopGEMM checked B's rows and binding. It returns false, recording nothing, where
// no block suits the device or the sizes are past the limits, or where the kernel's pipeline
// could not be made (which turned coopmat2 off).
func coop2GEMM(r *Recorder, op string, a, b, c Binding, m, k, n int, transB bool) (bool, error) {
	d := r.d
	t, ok := d.coop2TileFor(m, n)
	if !ok {
		return false, nil
	}
	mp, kp := roundUp(m, t.BM), roundUp(k, t.BK)
	grid := [3]int{(n + t.BN - 1) / t.BN, mp / t.BM, 1}
	lim := d.Info().MaxStorageBindingSize
	if grid[0] > 65535 || grid[1] > 65535 || uint64(mp)*uint64(kp)*2 > lim || mp*kp/2 > maxU32Elems {
		return false, nil
	}
	kn, err := d.coopProgram(op, coopProgramSpec{File: coop2File, WG: t.NT, Access: []Access{Read, Read, Read, ReadWrite}, Uniforms: 4,
		Values: []uint32{uint32(t.BM), uint32(t.BN), uint32(t.BK), b2u(transB), b2u(!coop2Slow)}, NoRobust: !coop2Robust, Coopmat2: true})
	if err != nil {
		return false, nil // coopProgram switched coopmat2 off with the reason
	}
	if err := coopDenseDispatch(r, op, kn, a, b, c, m, k, n, t.BK, mp, kp, grid); err != nil {
		return true, err
	}
	coop2Dispatches.Add(1)
	return true, nil
}

// coop2File is the coopmat2 GEMM's SPIR-V (generate.sh).
const coop2File = "coopmat2_gemm.spv"

// coop2Default: whether the dense GEMMs take the coopmat2 kernel where it is available
// without NVG_COOPMAT2=on — not while it is slower than the KHR kernel (DESIGN.md §7).
const coop2Default = false

// coop2Env is NVG_COOPMAT2: "on" (the dense GEMMs take the coopmat2 kernel where available),
// "off" (it is not even set up), else "" (available, not chosen).
func coop2Env() string { return strings.TrimSpace(os.Getenv("NVG_COOPMAT2")) }

// initCoopmat2 decides d.tc.Coopmat2 from the layer's device state ld once the KHR kernels
// are available (before their self-test, which runs with coopmat2 forced off): available
// where the layer enabled the extension, a block suits the device and NVG_COOPMAT2 is not
// "off"; chosen (Coopmat2On) with NVG_COOPMAT2=on. A forced NVG_COOPMAT2_TILE that does not
// parse is an error (tensor cores off, as for NVG_COOPMAT_TILE); one that does not suit the
// device leaves coopmat2 unavailable, the check's error its reason.
func (d *Device) initCoopmat2(ld *layerDeviceState) error {
	tc := &d.tc
	tc.FlexShapes = ld.FlexShapes
	tc.PipelineRobustness = ld.PipelineRobustness
	if ld.Coopmat2Limits != nil {
		tc.Coopmat2Limits = *ld.Coopmat2Limits
	}
	coop2Robust = strings.TrimSpace(os.Getenv("NVG_COOPMAT2_ROBUST")) == "on"
	coop2Slow = strings.TrimSpace(os.Getenv("NVG_COOPMAT2_FAST")) == "off"
	if v := strings.TrimSpace(os.Getenv("NVG_COOPMAT2_TILE")); v != "" {
		t, err := parseCoop2Tile(v)
		if err != nil {
			return err
		}
		coop2TileForce = t
	}
	switch {
	case !ld.Coopmat2:
		tc.Coopmat2Reason = ld.Coopmat2Reason
	case coop2Env() == "off":
		tc.Coopmat2Reason = "NVG_COOPMAT2=off"
	default:
		var errs []error
		for _, r := range d.coop2TileRules() {
			if err := r.t.check(tc.FlexShapes, tc.Coopmat2Limits, d.info); err != nil {
				errs = append(errs, err)
			} else {
				tc.Coopmat2 = true
			}
		}
		if !tc.Coopmat2 {
			tc.Coopmat2Reason = errors.Join(errs...).Error()
		}
		tc.Coopmat2On = tc.Coopmat2 && (coop2Default || coop2Env() == "on")
	}
	return nil
}

// coop2SelfTest runs the self-test's dense GEMM on every coopmat2 block that suits d against
// the WGSL twin (coopSelfTestTile, with K unaligned and aligned to the block: the kernel's
// clamped and FAST loops; its BLR half runs on the KHR kernels) and returns its summary, or
// the error that turns coopmat2 off.
func (d *Device) coop2SelfTest() (string, error) {
	restore := SetTensorCores(true)
	defer restore()
	r2 := SetCoopmat2(true)
	defer r2()
	defer func() { d.coop2TileTest = coop2Tile{} }()
	worst := 0.0
	var tiles []string
	for _, r := range d.coop2TileRules() {
		if r.t.check(d.tc.FlexShapes, d.tc.Coopmat2Limits, d.info) != nil {
			continue
		}
		d.coop2TileTest = r.t
		for _, aligned := range []bool{false, true} { // the clamped loop alone; the FAST one too
			before := coop2Dispatches.Load()
			w, err := d.coopSelfTestTile(coopTile{BM: r.t.BM, BN: r.t.BN, BK: r.t.BK}, aligned)
			if err != nil {
				return "", fmt.Errorf("block %s: %w", r.t, err)
			}
			if coop2Dispatches.Load() == before {
				return "", fmt.Errorf("block %s: the self-test's GEMM did not take the coopmat2 kernel", r.t)
			}
			worst = max(worst, w[0])
		}
		tiles = append(tiles, r.t.String())
	}
	norobust := "unknown"
	if st, err := d.layer.state(); err == nil {
		norobust = strconv.Itoa(st.NoRobust)
	}
	return fmt.Sprintf("Linear against the WGSL twin, blocks %s: worst |err|/bound %.2g; pipelines without robust buffer access so far: %s",
		strings.Join(tiles, ", "), worst, norobust), nil
}
