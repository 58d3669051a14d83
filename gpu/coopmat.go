package gpu

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/x448/float16"
)

// Tensor cores (cooperative matrices) through the Vulkan layer: DESIGN.md §7 "Tensor cores
// through a Vulkan layer". The GEMM launchers ask coopGEMM / coopBLRGEMM / coopSignGrad /
// coopQuantGEMM (gpu/linear_quant.go) first — the seam where the implementation is chosen; a
// future wgpu-native with WGSL cooperative matrices replaces the layer in coopKernel — and
// fall back to the WGSL kernels when these decline.

//go:generate bash coopmat/generate.sh

//go:embed coopmat/*.spv coopmat/spv.sum coopmat/*.comp
var coopFS embed.FS

// CoopType is one cooperative-matrix type a device reports
// (VkCooperativeMatrixPropertiesKHR): an M×K A times a K×N B plus an M×N C, with the
// component types ("f16", "f32", "bf16", "s8", …) and the scope ("subgroup", …).
type CoopType struct {
	M          int    `json:"m"`
	N          int    `json:"n"`
	K          int    `json:"k"`
	A          string `json:"a"`
	B          string `json:"b"`
	C          string `json:"c"`
	Result     string `json:"result"`
	Saturating bool   `json:"saturating"`
	Scope      string `json:"scope"`
}

func (c CoopType) String() string {
	return fmt.Sprintf("%d×%d×%d %s→%s", c.M, c.N, c.K, c.A, c.Result)
}

// TensorCores says whether a Device runs its GEMMs on cooperative matrices and why not.
type TensorCores struct {
	// On: the f16-weight GEMMs (Linear, LinearT, LinearRows, the KL head's and LogitsTopK's
	// vocabulary GEMMs), the 8-bit ones (LinearQuant, where its shape fits) and every BLR
	// sign GEMM use the cooperative-matrix kernels.
	On bool
	// Available: the device can run them (the layer enabled VK_KHR_cooperative_matrix, a
	// usable shape exists, the self-test at Open agreed with the WGSL twins). On CPU adapters
	// they are available but not on unless NVG_TENSOR_CORES=on (or SetTensorCores).
	Available bool
	// Reason is why they are off (or, when Available but off, why not chosen); "" when On.
	Reason string
	// Shape is the chosen f16×f16→f32 subgroup shape; SubgroupSize the device's.
	Shape        CoopType
	SubgroupSize int
	// Shapes are all the types the device reports (nil without the extension).
	Shapes []CoopType
	// SelfTest summarises the self-test at Open (the worst error relative to its bound).
	SelfTest string
	// Features says where the layer turned vulkanMemoryModel and cooperativeMatrix on at
	// vkCreateDevice (in wgpu's feature structs or in ones it prepended), for diagnosis.
	Features string
	// Coopmat2: the device can run the dense f16 GEMMs (Linear, LinearT, LinearRows, the
	// vocabulary GEMMs) on the VK_NV_cooperative_matrix2 kernel (coopmat2.go) instead of the
	// KHR one — the layer enabled the extension and a block suits the device — and
	// Coopmat2On: they do (NVG_COOPMAT2=on; off by default: slower than the KHR kernel on an
	// H100, DESIGN.md §7), after its self-test at Open agreed with the WGSL twin
	// (Coopmat2SelfTest; a failure turns it off). Coopmat2Reason says why not available.
	// NVG_COOPMAT2=off skips it altogether.
	Coopmat2, Coopmat2On bool
	Coopmat2Reason       string
	Coopmat2SelfTest     string
	// FlexShapes and Coopmat2Limits are the device's coopmat2 types and limits (nil and zero
	// without the extension).
	FlexShapes     []CoopFlexType
	Coopmat2Limits Coopmat2Limits
	// PipelineRobustness: the layer enabled VK_EXT_pipeline_robustness, so the coopmat2
	// pipelines run with robust buffer access off (their loads clamp by themselves).
	PipelineRobustness bool
}

// String is "on (16×16×16 f16→f32, subgroup 32)" or "off: reason".
func (t TensorCores) String() string {
	if t.On && t.Coopmat2 && t.Coopmat2On {
		return fmt.Sprintf("on (%s, subgroup %d; dense GEMMs on coopmat2)", t.Shape, t.SubgroupSize)
	}
	if t.On {
		return fmt.Sprintf("on (%s, subgroup %d)", t.Shape, t.SubgroupSize)
	}
	return "off: " + t.Reason
}

// TensorCores returns the device's tensor-core status.
func (d *Device) TensorCores() TensorCores {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tc
	t.Shapes = append([]CoopType(nil), d.tc.Shapes...)
	t.FlexShapes = append([]CoopFlexType(nil), d.tc.FlexShapes...)
	return t
}

// coopForce is SetTensorCores' choice: 0 automatic, 1 on, −1 off.
var coopForce atomic.Int32

// coopDispatches counts the cooperative-matrix GEMMs recorded (tests check a forced path ran).
var coopDispatches atomic.Int64

// coopTwinPacks counts the twin packs recorded (coopPackPaths: tests check that they ran).
var coopTwinPacks atomic.Int64

// coopPairGEMMs counts the pair dispatches recorded (coopBLRGEMMPair: both paths' t1 or dt2
// GEMMs in one dispatch; tests check that they ran).
var coopPairGEMMs atomic.Int64

// coopDualGEMMs counts the DUAL dispatches recorded (coopBLRGEMMDual: both paths' y GEMMs of
// a BLR layer's forward in one dispatch; tests check that they ran).
var coopDualGEMMs atomic.Int64

// coopSplitKs counts the split-K cooperative-matrix GEMMs recorded (tests check that a forced
// split ran).
var coopSplitKs atomic.Int64

// SetTensorCores forces the cooperative-matrix kernels on (where the device has them
// available, TensorCores().Available, also on CPU adapters and under a forced WGSL GEMM
// variant) or off (the WGSL kernels everywhere), for every device of the process, and
// returns a function restoring the previous choice. For tests and benchmarks (the two
// paths' parity suites, GradCheck on each path).
func SetTensorCores(on bool) (restore func()) { return setForce(&coopForce, on) }

// setForce stores a forced choice (1 on, −1 off) in f and returns the function restoring the
// previous one.
func setForce(f *atomic.Int32, on bool) (restore func()) {
	v := int32(-1)
	if on {
		v = 1
	}
	old := f.Swap(v)
	return func() { f.Store(old) }
}

// coopUse reports whether the GEMMs take the cooperative-matrix kernels now.
func (d *Device) coopUse() bool {
	d.mu.Lock()
	tc := d.tc
	d.mu.Unlock()
	if !tc.Available {
		return false
	}
	switch coopForce.Load() {
	case 1:
		return true
	case -1:
		return false
	}
	// A test or benchmark forcing a WGSL variant gets it.
	return tc.On && gemmForce == (gemmVariant{}) && !gemmLanesForce
}

// coopOff turns tensor cores off on d with reason, printing it once on stderr.
func (d *Device) coopOff(reason string) {
	d.mu.Lock()
	was := d.tc.Available
	d.tc.On, d.tc.Available, d.tc.Reason = false, false, reason
	d.mu.Unlock()
	if was {
		fmt.Fprintf(os.Stderr, "nvg/gpu: tensor cores off: %s\n", reason)
	}
}

// coopTile is a cooperative-matrix GEMM's block: BM×BN outputs per workgroup over BK slices,
// WM×WN subgroups each owning (BM/WM)×(BN/WN) outputs.
type coopTile struct{ BM, BN, BK, WM, WN int }

func (t coopTile) String() string {
	return fmt.Sprintf("%dx%dx%d/%dx%d", t.BM, t.BN, t.BK, t.WM, t.WN)
}

// parseCoopTile parses "BMxBNxBK/WMxWN" (NVG_COOPMAT_TILE).
func parseCoopTile(s string) (coopTile, error) {
	var t coopTile
	blk, sgs, ok := strings.Cut(s, "/")
	a := strings.Split(blk, "x")
	b := strings.Split(sgs, "x")
	if !ok || len(a) != 3 || len(b) != 2 {
		return t, fmt.Errorf("NVG_COOPMAT_TILE=%q: want BMxBNxBK/WMxWN, e.g. 128x128x64/2x4", s)
	}
	var v [5]int
	for i, f := range append(a, b...) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return t, fmt.Errorf("NVG_COOPMAT_TILE=%q: %q is not a positive integer", s, f)
		}
		v[i] = n
	}
	return coopTile{v[0], v[1], v[2], v[3], v[4]}, nil
}

// check validates t for the shape s and subgroup size sg on d: the kernel's divisibility
// rules (coopmat_gemm.comp's header), the workgroup size and the workgroup memory.
func (t coopTile) check(s CoopType, sg int, info Info) error {
	nt := sg * t.WM * t.WN
	switch {
	case t.BM%(t.WM*s.M) != 0 || t.BN%(t.WN*s.N) != 0 || t.BK%s.K != 0 || t.BK%8 != 0:
		return fmt.Errorf("tile %s does not divide into %s subgroup tiles", t, s)
	case (t.BM*t.BK/8)%nt != 0 || (t.BN*t.BK/8)%nt != 0:
		return fmt.Errorf("tile %s: %d threads do not divide its 16-byte loads", t, nt)
	case info.MaxInvocations > 0 && nt > int(info.MaxInvocations):
		return fmt.Errorf("tile %s: %d threads exceed the device's %d", t, nt, info.MaxInvocations)
	}
	if shared := t.shared(s); info.MaxWorkgroupStorage > 0 && shared > int(info.MaxWorkgroupStorage) {
		return fmt.Errorf("tile %s: %d bytes of workgroup memory exceed the device's %d", t, shared, info.MaxWorkgroupStorage)
	}
	return nil
}

// shared is the workgroup memory of coopmat_gemm.comp with block t and shape s, in bytes:
// the A and B tiles (rows padded by 8 halves), the epilogue's f32 tile per subgroup reusing
// the A tile's memory (the QUANT variant adds 8·BN: coopQuantGEMM).
func (t coopTile) shared(s CoopType) int {
	return max(t.BM*(t.BK+8)*2, t.WM*t.WN*s.M*s.N*4) + (t.BN*t.BK+8*(t.BN+t.BK))*2
}

// coopTileForce is NVG_COOPMAT_TILE, parsed at Open (zero: automatic).
var coopTileForce coopTile

// coopTileRule is one candidate block of coopTileFor: chosen for an output that makes at
// least min workgroups of it.
type coopTileRule struct {
	t   coopTile
	min int
}

// coopBigTileGroups: the least grid for the 128×128×64 block. The BLR GEMMs whose N is the
// rank (t1, dt2: 3 × 32 = 96 blocks at the 0.8B's rank 384 and 4096 rows) ran 1.3–1.5×
// faster on 96 of them than on 192 of 64×128 (H100, 2026-12-07: dt2 251 → 167 µs, t1 172 →
// 118 µs at K 3584); fewer than half an H100's SMs is not measured.
const coopBigTileGroups = 64

// coopTileRules are the blocks coopTileFor chooses among on d, in order of preference; the
// last is the fallback. NVG_COOPMAT_TILE: that block alone. CPU adapters (the tests of the
// Mesa 26 step): 4×4 shapes by 2 shapes deep, 2×2 subgroups. GPUs: 128×128×64 with 2×4
// subgroups (each 64×32: 4×2 accumulators of 16×16; 256 threads, 37 KiB of workgroup memory)
// when that makes ≥ coopBigTileGroups workgroups, else 64×64×64 (2×2). (64×128 and 128×64
// blocks, chosen before at ≥ 132 workgroups, lost to 128×128 wherever both applied.) BK 64
// (four 16-deep products per staged slice, two barriers) measured 1.2–1.4× faster than BK
// 32 on an H100 (DESIGN.md §7).
func (d *Device) coopTileRules() []coopTileRule {
	if coopTileForce != (coopTile{}) {
		return []coopTileRule{{coopTileForce, 0}}
	}
	if s := d.tc.Shape; d.info.CPU {
		return []coopTileRule{{coopTile{4 * s.M, 4 * s.N, 2 * s.K, 2, 2}, 0}}
	}
	return []coopTileRule{{coopTile{128, 128, 64, 2, 4}, coopBigTileGroups}, {coopTile{64, 64, 64, 2, 2}, 0}}
}

// coopTileFor picks the block of an m×n output: the first of coopTileRules that makes
// enough workgroups and suits the device (coopTile.check) with colBytes more bytes of
// workgroup memory per block column (the QUANT variant's row powers of two: 8; else 0), else
// the last (the self-test's block while it runs).
func (d *Device) coopTileFor(m, n, colBytes int) coopTile {
	if d.coopTileTest != (coopTile{}) {
		return d.coopTileTest
	}
	rules := d.coopTileRules()
	for _, r := range rules {
		groups := ((m + r.t.BM - 1) / r.t.BM) * ((n + r.t.BN - 1) / r.t.BN)
		if groups >= r.min && r.t.check(d.tc.Shape, d.tc.SubgroupSize, d.info) == nil && r.t.fits(d, colBytes) {
			return r.t
		}
	}
	return rules[len(rules)-1].t
}

// fits reports whether block t with colBytes more bytes per block column fits d's workgroup
// memory (a device that reports none always fits).
func (t coopTile) fits(d *Device, colBytes int) bool {
	return d.info.MaxWorkgroupStorage == 0 || t.shared(d.tc.Shape)+colBytes*t.BN <= int(d.info.MaxWorkgroupStorage)
}

// coopVariant is one committed SPIR-V of coopmat_gemm.comp (generate.sh's variants): its
// bindings after b are sc (Scale) and raw (Raw); Signs: b is sign bits, else f16. Pair (with
// Signs alone): both paths of a BLR layer in one dispatch, workgroup z the path, bindings
// a16, rs, bits0, bits1, c0, c1 and six uniform words (coopBLRGEMMPair). Dual (with Signs and
// Scale, perhaps Raw): both paths' y GEMMs of a BLR layer's forward, path 0's then path 1's
// in each workgroup, bindings a16, rs, bits0, bits1, sc0, sc1, c (y), [raw0, raw1] and six
// uniform words (coopBLRGEMMDual).
type coopVariant struct {
	File                          string
	Signs, Scale, Raw, Pair, Dual bool
}

var (
	coopDense       = coopVariant{File: "coopmat_gemm.spv"}
	coopDenseScale  = coopVariant{File: "coopmat_gemm_scale.spv", Scale: true}
	coopBLR         = coopVariant{File: "coopmat_blr.spv", Signs: true}
	coopBLRScale    = coopVariant{File: "coopmat_blr_scale.spv", Signs: true, Scale: true}
	coopBLRScaleRaw = coopVariant{File: "coopmat_blr_scale_raw.spv", Signs: true, Scale: true, Raw: true}
	coopBLRPair     = coopVariant{File: "coopmat_blr_pair.spv", Signs: true, Pair: true}
	coopBLRDual     = coopVariant{File: "coopmat_blr_dual.spv", Signs: true, Scale: true, Dual: true}
	coopBLRDualRaw  = coopVariant{File: "coopmat_blr_dual_raw.spv", Signs: true, Scale: true, Raw: true, Dual: true}
)

// coopmat_gemm.comp's SpecIds.
const (
	specSG = iota
	specLM
	specLN
	specLK
	specBM
	specBN
	specBK
	specWM
	specWN
	specTransB
	specAccum
)

// coopPlaceholderParams are wgsl/coopmat.wgsl's template parameters: Access holds one letter
// per storage binding, 'r' (read) or 'w' (read_write) — a string, so that the parameters stay
// comparable (the pipeline cache key).
type coopPlaceholderParams struct {
	Entry    string
	WG       int
	Access   string
	Uniforms int
}

// RW is Access as the template reads it: true for a read_write binding.
func (p coopPlaceholderParams) RW() []bool {
	rw := make([]bool, len(p.Access))
	for i := range rw {
		rw[i] = p.Access[i] == 'w'
	}
	return rw
}

// coopProgramSpec is one specialisation of a committed cooperative-matrix kernel.
type coopProgramSpec struct {
	// File is the SPIR-V under gpu/coopmat/ (a variant of a .comp source, generate.sh).
	File string
	// Values are the specialisation constants by SpecId: Values[i] for SpecId i (a bool
	// constant takes non-zero as true).
	Values []uint32
	// WG is the workgroup size (OpExecutionMode LocalSize x).
	WG int
	// Access are the storage bindings in order (Read or ReadWrite); the uniform parameters
	// (Uniforms u32 words) follow at binding len(Access).
	Access   []Access
	Uniforms int
	// NoRobust: the pipeline is created with robust buffer access off where the device
	// allows it (the kernel bounds every access itself: the coopmat2 kernels' clamped tensor
	// loads and dropped stores).
	NoRobust bool
	// Coopmat2: a coopmat2 kernel, whose failure turns coopmat2 off (coop2Off) rather than
	// every tensor-core kernel (coopOff).
	Coopmat2 bool
}

// coopProgram returns the pipeline of s: a WGSL placeholder (wgsl/coopmat.wgsl) whose module
// the layer swaps for the specialised SPIR-V, under the entry name
// nvgcm_<file stem>_<values joined by _>, unique per specialisation. A new pipeline is
// checked to have been swapped. Errors: the SPIR-V could not be read or specialised, the
// entry name is too long for the layer, the pipeline failed, or the layer did not swap it
// (each switches tensor cores off on d with the reason; the caller falls back to WGSL).
func (d *Device) coopProgram(op string, s coopProgramSpec) (*Kernel, error) {
	var name strings.Builder
	name.WriteString("nvgcm_" + strings.TrimSuffix(s.File, ".spv"))
	for _, v := range s.Values {
		fmt.Fprintf(&name, "_%d", v)
	}
	entry := name.String()
	access := make([]byte, len(s.Access))
	for i, a := range s.Access {
		access[i] = 'r'
		if a == ReadWrite {
			access[i] = 'w'
		}
	}
	spec := KernelSpec{Name: op, File: "coopmat.wgsl", Entry: entry,
		Params:   coopPlaceholderParams{Entry: entry, WG: s.WG, Access: string(access), Uniforms: s.Uniforms},
		Bindings: s.Access, Uniforms: s.Uniforms}
	key := op + "/" + entry
	d.mu.Lock()
	checked := d.coopChecked[key]
	lay := d.layer
	d.mu.Unlock()
	if checked {
		return d.Kernel(spec)
	}
	fail := func(err error) (*Kernel, error) {
		err = fmt.Errorf("%s: cooperative-matrix kernel %s: %w", op, entry, err)
		if s.Coopmat2 {
			d.coop2Off(err.Error())
		} else {
			d.coopOff(err.Error())
		}
		return nil, err
	}
	if lay == nil {
		return fail(errors.New("no Vulkan layer"))
	}
	if len(entry) > coopMaxEntry {
		return fail(fmt.Errorf("entry name of %d bytes, the layer matches at most %d", len(entry), coopMaxEntry))
	}
	raw, err := coopFS.ReadFile("coopmat/" + s.File)
	if err != nil {
		return fail(err)
	}
	words, err := spirvWords(raw)
	if err != nil {
		return fail(err)
	}
	values := make(map[uint32]uint32, len(s.Values))
	for id, v := range s.Values {
		values[uint32(id)] = v
	}
	words, err = spirvSpecialize(words, spirvSpec{Entry: entry, LocalSize: [3]uint32{uint32(s.WG), 1, 1}, Values: values,
		Roll: d.info.CPU}) // lavapipe: no forced unrolling (spirvSpec)
	if err != nil {
		return fail(err)
	}
	if err := lay.registerSPIRV(entry, words, s.NoRobust); err != nil {
		return fail(err)
	}
	before := lay.swapCount(entry)
	k, err := d.Kernel(spec)
	if err != nil {
		return fail(err)
	}
	if lay.swapCount(entry) <= before {
		d.mu.Lock()
		delete(d.kernels, kernelKey{spec.Name, spec.File, spec.Entry, spec.Params})
		d.mu.Unlock()
		k.release()
		return fail(errors.New("the Vulkan layer did not swap the placeholder's shader module"))
	}
	d.mu.Lock()
	d.coopChecked[key] = true
	d.mu.Unlock()
	return k, nil
}

// coopPackParams are wgsl/coopmat_pack.wgsl's template parameters: WG threads a workgroup,
// Scale, Pairs (each group of 4 columns stored in the order 0, 2, 1, 3: the 8-bit GEMM's A),
// Twin (two column scales, two packs: coopPackPaths), and for the vector form R 16-byte
// vectors an invocation and T threads a row (WG/T rows a workgroup); R 0: the general form,
// one row a workgroup.
type coopPackParams struct {
	WG                 int
	Scale, Pairs, Twin bool
	R, T               int
}

// groups is the number of workgroups for mp rows: WG/T rows a workgroup in the vector form,
// one in the general form.
func (p coopPackParams) groups(mp int) int {
	if p.R == 0 {
		return mp
	}
	rw := p.WG / p.T
	return (mp + rw - 1) / rw
}

// coopPackGeneral, set by tests (SetCoopPackGeneral), makes CoopmatPack take its general form
// everywhere.
var coopPackGeneral bool

// coopPackFor returns CoopmatPack's parameters for rows of k columns padded to kp: where
// k % 4 = 0 (every Qwen3.5 and BLR shape) and a row fits in 16 16-byte vectors per
// invocation of 256 (kp ≤ 16384), the vector form with the fewest threads a row, from 32, that
// hold it in at most 8 vectors each (more rows a workgroup for short rows: on an H100 the
// one-row workgroups packed BLR's [4096, 384] and [4096, 1024] operands at a fifth and a
// third of the memory's bandwidth); else the general form (4-byte loads, the row read twice;
// 64 invocations).
func coopPackFor(k, kp int, scale, pairs bool) coopPackParams {
	const wg = 256
	if k%4 == 0 && !coopPackGeneral {
		v := kp / 4
		t := 32
		for t < wg && (v+t-1)/t > 8 {
			t *= 2
		}
		if r := (v + t - 1) / t; r <= 16 {
			return coopPackParams{WG: wg, Scale: scale, Pairs: pairs, R: r, T: t}
		}
	}
	return coopPackParams{WG: 64, Scale: scale, Pairs: pairs}
}

// errCoopOff marks the errors of a cooperative-matrix launcher that mean "not on this
// device" (tensor cores unavailable, or a kernel the layer could not swap, which turned them
// off): the Auto functions then take the WGSL kernels.
var errCoopOff = errors.New("tensor cores unavailable")

// coopFiles are the committed SPIR-V files the launchers use (TestCoopmatSPIRVFresh checks
// spv.sum has each).
func coopFiles() []string {
	f := []string{coopDense.File, coop2File, coopDenseScale.File, coopBLR.File, coopBLRScale.File, coopBLRScaleRaw.File, coopBLRPair.File, coopBLRDual.File, coopBLRDualRaw.File, coopQuantFile}
	return append(append(f, coopAttnFiles[:]...), "coopmat_delta.spv", "coopmat_delta_dhu.spv",
		"coopmat_delta_state.spv", "coopmat_delta_qk.spv", "coopmat_delta_f.spv")
}

// coopMaxEntry is the longest entry name the layer compares (nvg_layer.c reads 127 bytes).
const coopMaxEntry = 120

// b2u is 1 for true, 0 for false (a bool specialisation constant).
func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// coopKernel returns the GEMM pipeline of variant v (coopmat_gemm.comp) specialised for tile
// t, B's layout and the accumulate mode (coopProgram: its errors).
func (d *Device) coopKernel(op string, v coopVariant, t coopTile, transB, accum bool) (*Kernel, error) {
	sg := d.tc.SubgroupSize
	if v.Pair {
		return d.coopProgram(op, coopProgramSpec{File: v.File, WG: sg * t.WM * t.WN,
			Access: []Access{Read, Read, Read, Read, ReadWrite, ReadWrite}, Uniforms: 6,
			Values: d.coopGEMMSpec(t, transB, accum)})
	}
	if v.Dual {
		access := []Access{Read, Read, Read, Read, Read, Read, ReadWrite}
		if v.Raw {
			access = append(access, ReadWrite, ReadWrite)
		}
		return d.coopProgram(op, coopProgramSpec{File: v.File, WG: sg * t.WM * t.WN, Access: access, Uniforms: 6,
			Values: d.coopGEMMSpec(t, transB, accum)})
	}
	access := []Access{Read, Read, Read}
	if v.Scale {
		access = append(access, Read)
	}
	access = append(access, ReadWrite)
	if v.Raw {
		access = append(access, ReadWrite)
	}
	return d.coopProgram(op, coopProgramSpec{File: v.File, WG: sg * t.WM * t.WN, Access: access, Uniforms: 4,
		Values: d.coopGEMMSpec(t, transB, accum)})
}

// coopGEMMSpec is the values of coopmat_gemm.comp's SpecIds specSG … specAccum, in order:
// the device's subgroup size and shape, tile t, B's layout and the accumulate mode (its
// variants' own SpecIds follow: coopQuantGEMM).
func (d *Device) coopGEMMSpec(t coopTile, transB, accum bool) []uint32 {
	s := d.tc.Shape
	return []uint32{uint32(d.tc.SubgroupSize), uint32(s.M), uint32(s.N), uint32(s.K), uint32(t.BM), uint32(t.BN),
		uint32(t.BK), uint32(t.WM), uint32(t.WN), b2u(transB), b2u(accum)}
}

// coopPack records CoopmatPack (wgsl/coopmat_pack.wgsl): A [m, k] (⊙ sa) to f16 rows with
// a power-of-two scale each, zero-padded to [mp, kp], into borrowed buffers that done gives
// back; pairs stores each group of 4 columns in the order 0, 2, 1, 3 (the 8-bit GEMM's A,
// kp % 4 = 0).
func coopPack(r *Recorder, op string, a Binding, sa *Buffer, m, k, mp, kp int, pairs bool) (a16, rs *Buffer, done func(), err error) {
	a16, d1, err := r.Borrow(op+" a16", U32, mp, kp/2)
	if err != nil {
		return nil, nil, nil, err
	}
	rs, d2, err := r.Borrow(op+" rs", F32, mp)
	if err != nil {
		d1()
		return nil, nil, nil, err
	}
	done = func() { d1(); d2() }
	if err := coopPackInto(r, op, a, sa, Whole(a16), Whole(rs), m, k, mp, kp, pairs); err != nil {
		done()
		return nil, nil, nil, err
	}
	return a16, rs, done, nil
}

// coopA is an A operand packed ahead of its cooperative-matrix GEMM: CoopmatPack's a16 (f16
// pairs, U32 [mp, kp/2]) and rs (F32 [mp]), each a binding — the whole of a buffer, or (a
// twin pack, coopPackPaths) one path's range of a buffer that holds both paths' packs —
// with the padded sizes it was packed to.
type coopA struct {
	a16, rs Binding
	mp, kp  int
}

// coopPairLayout is where the two paths' packs of an A [mp, kp] lie in the buffers that
// coopPackPaths borrows: path 0's a16 and rs at byte 0, path 1's at aOff and rsOff (a16's
// aBytes = mp·kp·2 and rs's rsBytes = mp·4 rounded up to the storage alignment align, so
// that each path's part can be bound on its own: 32 on lavapipe, 256 on most GPUs; rs of a
// few rows is padded up to it), and the buffers' sizes aTotal and rsTotal in bytes (multiples
// of 4).
func coopPairLayout(align uint64, mp, kp int) (aOff, rsOff, aTotal, rsTotal uint64) {
	aBytes, rsBytes := uint64(mp)*uint64(kp)*2, uint64(mp)*4
	aOff, rsOff = (aBytes+align-1)/align*align, (rsBytes+align-1)/align*align
	return aOff, rsOff, aOff + aBytes, rsOff + rsBytes
}

// coopPackPaths records CoopmatPack's twin form for the two paths of a BLR layer whose GEMMs
// share A — t1 (A = x [m, k], sa = g_p) or dt2 (A = dy, sa = h_p), each an m×n output over k
// — packing A ⊙ sa[0] and A ⊙ sa[1] in one pass that reads A once, padded to those GEMMs'
// plan (coopPlan): the bits of two coopPack calls, one dispatch instead of two. Both paths'
// packs go into ONE borrowed a16 buffer and ONE rs buffer (coopPairLayout: path 1's part at
// an offset on the storage alignment), so that coopBLRGEMMPair can run both GEMMs as one
// dispatch; packs[p] binds path p's part (what coopBLRGEMM takes alone), and done gives the
// buffers back. The packs are nil (nothing recorded, done a no-op) where the twin does not
// apply — tensor cores off, pathPairsOff, sizes past the limits (coopPairPlanFor: the shared
// buffers past a binding or a buffer), or rows that do not take the vector form (k % 4 ≠ 0, kp > 16384) — and
// each GEMM then packs its own (coopBLRGEMM).
func coopPackPaths(r *Recorder, op string, a *Buffer, sa [2]*Buffer, m, k, n int) (packs [2]*coopA, done func(), err error) {
	d := r.d
	done = func() {}
	if pathPairsOff || !d.coopUse() || sa[0] == nil || sa[1] == nil {
		return packs, done, nil
	}
	pl, ok := d.coopPairPlanFor(m, k, n)
	if !ok || coopPackFor(k, pl.kp, true, false).R == 0 {
		return packs, done, nil
	}
	a16, rs, give, err := pl.borrow(r, op)
	if err != nil {
		return packs, done, err
	}
	packs = pl.parts(a16, rs)
	if err := coopPackTwinInto(r, op, a, sa, [2]Binding{packs[0].a16, packs[1].a16}, [2]Binding{packs[0].rs, packs[1].rs}, m, k, pl.mp, pl.kp); err != nil {
		give()
		return [2]*coopA{}, func() {}, err
	}
	return packs, give, nil
}

// coopPackTwinInto records CoopmatPack's twin form: A [m, k] ⊙ sa[p] into a16[p] (U32
// [mp, kp/2]) and rs[p] (F32 [mp]) for p = 0, 1, in one pass (the vector form: k % 4 = 0,
// kp ≤ 16384; the caller checks). The four outputs are bindings: ranges of one a16 and one
// rs buffer in coopPackPaths (Dispatch checks their offsets and sizes).
func coopPackTwinInto(r *Recorder, op string, a *Buffer, sa [2]*Buffer, a16, rs [2]Binding, m, k, mp, kp int) error {
	pp := coopPackFor(k, kp, true, false)
	if pp.R == 0 {
		return fmt.Errorf("gpu: %s: the twin pack needs the vector form (k %% 4 = 0, kp ≤ 16384; k %d, kp %d)", op, k, kp)
	}
	pp.Twin = true
	if err := r.dispatch1D(KernelSpec{Name: op + ".pack", File: "coopmat_pack.wgsl", Params: pp,
		Bindings: []Access{Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite}, Uniforms: 4},
		pp.groups(mp), []uint32{uint32(m), uint32(k), uint32(kp), uint32(mp)},
		Whole(a), Whole(sa[0]), Whole(sa[1]), a16[0], rs[0], a16[1], rs[1]); err != nil {
		return err
	}
	coopTwinPacks.Add(1)
	return nil
}

// coopPackInto records CoopmatPack into a16 (U32 [mp, kp/2]) and rs (F32 [mp]), each group
// of 4 columns in the order 0, 2, 1, 3 where pairs. a16 and rs are bindings: whole buffers
// (coopPack), or one path's range of buffers that hold both paths' packs (coopBLRGEMMDual;
// Dispatch checks their offsets and sizes).
func coopPackInto(r *Recorder, op string, a Binding, sa *Buffer, a16, rs Binding, m, k, mp, kp int, pairs bool) error {
	binds := []Binding{a}
	access := []Access{Read}
	if sa != nil {
		binds = append(binds, Whole(sa))
		access = append(access, Read)
	}
	binds = append(binds, a16, rs)
	access = append(access, ReadWrite, ReadWrite)
	pp := coopPackFor(k, kp, sa != nil, pairs)
	return r.dispatch1D(KernelSpec{Name: op + ".pack", File: "coopmat_pack.wgsl", Params: pp,
		Bindings: access, Uniforms: 4}, pp.groups(mp), []uint32{uint32(m), uint32(k), uint32(kp), uint32(mp)}, binds...)
}

func roundUp(x, q int) int { return (x + q - 1) / q * q }

// lcm is the least common multiple of the positive a and b.
func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// coopPlan is the tile, padded sizes and grid of one cooperative-matrix GEMM, or ok false
// where it does not fit the limits or the tile does not suit the device (the WGSL kernel
// takes it). The packed A (borrowed for the call) adds mp·kp·2 bytes, half of A's f32 bytes
// plus the padding.
func (d *Device) coopPlan(m, k, n int) (t coopTile, mp, kp int, grid [3]int, ok bool) {
	return d.coopPlanTile(d.coopTileFor(m, n, 0), m, k, n)
}

// coopPlanTile is coopPlan with the block t.
func (d *Device) coopPlanTile(t coopTile, m, k, n int) (coopTile, int, int, [3]int, bool) {
	mp, kp := roundUp(m, t.BM), roundUp(k, t.BK)
	grid := [3]int{(n + t.BN - 1) / t.BN, mp / t.BM, 1}
	lim := d.Info().MaxStorageBindingSize
	ok := grid[0] <= 65535 && grid[1] <= 65535 && uint64(mp)*uint64(kp)*2 <= lim && mp*kp/2 <= maxU32Elems &&
		t.check(d.tc.Shape, d.tc.SubgroupSize, d.info) == nil
	return t, mp, kp, grid, ok
}

// coopSplitForce is NVG_COOPMAT_SPLITK, parsed at Open (0: automatic): the split-K factor
// of every cooperative-matrix GEMM that may split (benchmarks, tests).
var coopSplitForce int

// The automatic split-K (coopSplitK): a grid of fewer than coopSplitGroups workgroups over
// at least coopSplitSlices BK slices of K splits in coopSplitRuns. Measured on an H100
// (2026-12-07, BenchmarkGEMM with NVG_COOPMAT_SPLITK): the 4B's dt2 (224 blocks of
// 128×128, K 9216: 144 slices) 812 µs unsplit, 746 in 2 runs, 665 in 4 (the slab sum
// included: 25–43 µs); at K 3584 (56 slices) and 96 blocks the sum ate the gain (t1 118 →
// 127 µs in 4 runs, dt2 167 → 158) and at K ≤ 2560 split GEMMs were slower.
const (
	coopSplitGroups = 264
	coopSplitSlices = 96
	coopSplitRuns   = 4
)

// coopSplitK returns S, how many runs of whole BK slices a GEMM of groups workgroups (tile t)
// over kp columns of K is split into (coopmat_gemm.comp's split-K: S workgroups along z,
// each writing a slab that coopSplitSum adds up): 1 on CPU adapters, else coopSplitRuns for
// a grid below coopSplitGroups over ≥ coopSplitSlices slices, else 1; NVG_COOPMAT_SPLITK
// forces S. S is then cut to the slices and so that every run is non-empty (⌈ns/⌈ns/S⌉⌉
// runs of ⌈ns/S⌉ slices).
func (d *Device) coopSplitK(t coopTile, groups, kp int) int {
	ns := kp / t.BK
	if ns <= 1 {
		return 1
	}
	s := 1
	switch {
	case coopSplitForce > 0:
		s = coopSplitForce
	case !d.info.CPU && groups < coopSplitGroups && ns >= coopSplitSlices:
		s = coopSplitRuns
	}
	s = max(1, min(s, ns))
	per := (ns + s - 1) / s
	return (ns + per - 1) / per
}

// coopSplitOut returns the binding a GEMM of S runs (coopSplitK) writes: c itself for S = 1,
// else a borrowed F32 [S, m, n] (given back by done), with the S that fits: 1 where the slabs
// would pass the index range or a binding.
func coopSplitOut(r *Recorder, op string, c Binding, s, m, n int) (out Binding, s2 int, done func(), err error) {
	if s <= 1 || uint64(s)*uint64(m)*uint64(n) > maxU32Elems || uint64(s)*uint64(m)*uint64(n)*4 > r.d.Info().MaxStorageBindingSize {
		return c, 1, func() {}, nil
	}
	part, done, err := r.Borrow(op+" split-K slabs", F32, s, m, n)
	if err != nil {
		return Binding{}, 0, nil, err
	}
	return Whole(part), s, done, nil
}

// coopSplitSum records CoopmatSplitK (wgsl/coopmat_splitk.wgsl): c (+)= the sum of part's
// s slabs of mn values each, in slab order.
func coopSplitSum(r *Recorder, op string, part, c Binding, mn, s int, accum bool) error {
	const wg = 256
	if err := r.dispatch1D(KernelSpec{Name: op + ".splitk", File: "coopmat_splitk.wgsl",
		Params: struct {
			WG    int
			Accum bool
		}{wg, accum},
		Bindings: []Access{Read, ReadWrite}, Uniforms: 2,
	}, (mn+wg-1)/wg, []uint32{uint32(mn), uint32(s)}, part, c); err != nil {
		return err
	}
	r.Cost(0, 4*float64(mn)*float64(s+1+int(b2u(accum))))
	coopSplitKs.Add(1)
	return nil
}

// coopGEMM is the cooperative-matrix form of gemm for an f16 B (bf16): C[m, n] = A·B with B
// [n, k] (transB) or [k, n]. It returns false, recording nothing, where it does not apply:
// tensor cores off, an f32 B (MatMul keeps f32 products), B's rows not whole 16-byte
// vectors (k % 8 ≠ 0 for transB, n % 8 ≠ 0 otherwise) or B's binding off a 16-byte
// boundary, or sizes past the limits.
func coopGEMM(r *Recorder, op string, a, b, c Binding, bf16 bool, m, k, n int, transB bool) (bool, error) {
	d := r.d
	if !bf16 || !d.coopUse() || (transB && k%8 != 0) || (!transB && n%8 != 0) || b.Offset%16 != 0 {
		return false, nil
	}
	if d.coop2Use() {
		if ok, err := coop2GEMM(r, op, a, b, c, m, k, n, transB); ok || err != nil {
			return ok, err
		}
	}
	t, mp, kp, grid, ok := d.coopPlan(m, k, n)
	if !ok {
		return false, nil
	}
	kn, err := d.coopKernel(op, coopDense, t, transB, false)
	if err != nil {
		return false, nil // coopKernel switched tensor cores off with the reason
	}
	return true, coopDenseDispatch(r, op, kn, a, b, c, m, k, n, t.BK, mp, kp, grid)
}

// coopDenseDispatch records a dense cooperative-matrix GEMM's work with kernel kn (the KHR
// or the coopmat2 one, same bindings): A packed to [mp, kp] (CoopmatPack), the dispatch on
// grid (z set to coopSplitK's runs of bk-deep slices) and, when split, the slab sum into c;
// on an error nothing stays recorded.
func coopDenseDispatch(r *Recorder, op string, kn *Kernel, a, b, c Binding, m, k, n, bk, mp, kp int, grid [3]int) error {
	d := r.d
	mark := len(r.ops)
	a16, rs, done, err := coopPack(r, op, a, nil, m, k, mp, kp, false)
	if err != nil {
		return err
	}
	defer done()
	out, s, done2, err := coopSplitOut(r, op, c, d.coopSplitK(coopTile{BK: bk}, grid[0]*grid[1], kp), m, n)
	if err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	defer done2()
	grid[2] = s
	err = r.Dispatch(kn, grid, []uint32{uint32(m), uint32(n), uint32(k), uint32(kp)}, Whole(a16), Whole(rs), b, out)
	if err == nil {
		r.Cost(gemmCost(m, k, n, true))
		if s > 1 {
			err = coopSplitSum(r, op, out, c, m*n, s, false)
		}
	}
	if err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	coopDispatches.Add(1)
	return nil
}

// coopBLRGEMM is the cooperative-matrix form of blrGEMM: C[m, n] (+)= (A ⊙ sa)·B (⊙ sc) with
// B packed sign bits ([n, k] when transB, else [k, n]), raw receiving the sums before ⊙ sc;
// pre, when not nil and packed to this GEMM's plan, is A ⊙ sa already packed
// (coopPackPaths: one path's range of the buffers holding both paths' packs).
// It returns false, recording nothing, where tensor cores are off, B's rows do not hold
// whole bytes (k % 8 ≠ 0 for transB, n % 8 ≠ 0 otherwise: never for a BLR layer, whose n
// and rank are multiples of 8), or the sizes are past the limits.
func coopBLRGEMM(r *Recorder, op string, pre *coopA, a, bits, sa, sc, c, raw *Buffer, m, k, n int, transB, accum bool) (bool, error) {
	d := r.d
	if !d.coopUse() || (transB && k%8 != 0) || (!transB && n%8 != 0) {
		return false, nil
	}
	v := coopBLR
	switch {
	case sc != nil && raw != nil:
		v = coopBLRScaleRaw
	case sc != nil:
		v = coopBLRScale
	case raw != nil:
		return false, nil
	}
	t, mp, kp, grid, ok := d.coopPlan(m, k, n)
	if !ok {
		return false, nil
	}
	s := 1
	if raw == nil { // raw would need its own slabs
		s = d.coopSplitK(t, grid[0]*grid[1], kp)
	}
	mark := len(r.ops)
	out, s, done2, err := coopSplitOut(r, op, Whole(c), s, m, n)
	if err != nil {
		return true, err
	}
	defer done2()
	kn, err := d.coopKernel(op, v, t, transB, accum && s == 1) // split: the sum accumulates
	if err != nil {
		return false, nil
	}
	var a16, rs Binding
	if pre != nil && pre.mp == mp && pre.kp == kp {
		a16, rs = pre.a16, pre.rs
	} else {
		a16b, rsb, done, err := coopPack(r, op, Whole(a), sa, m, k, mp, kp, false)
		if err != nil {
			return true, err
		}
		defer done()
		a16, rs = Whole(a16b), Whole(rsb)
	}
	binds := []Binding{a16, rs, Whole(bits)}
	if sc != nil {
		binds = append(binds, Whole(sc))
	}
	binds = append(binds, out)
	if raw != nil {
		binds = append(binds, Whole(raw))
	}
	grid[2] = s
	err = r.Dispatch(kn, grid, []uint32{uint32(m), uint32(n), uint32(k), uint32(kp)}, binds...)
	if err == nil {
		r.Cost(blrGEMMCost(m, k, n, accum && s == 1, raw != nil))
		if s > 1 {
			err = coopSplitSum(r, op, out, Whole(c), m*n, s, accum)
		}
	}
	if err != nil {
		r.ops = r.ops[:mark]
		return true, err
	}
	coopDispatches.Add(1)
	return true, nil
}

// coopBLRGEMMPair is the cooperative-matrix form of the two paths' GEMMs of a BLR layer that
// share A — t1 (A = x, B = V_p [n, k], transB) or dt2 (A = dy, B = U_p [k, n]) — as ONE
// dispatch: c[p][m, n] = (A ⊙ sa_p)·B_p for p = 0, 1, with bits[p] path p's sign bits and
// A ⊙ sa_p the twin pack pre[p] (coopPackPaths: both paths' packs in one a16 and one rs
// buffer, coopPairLayout), on the grid [nx, ny, 2] whose workgroup z is the path
// (coopmat_gemm.comp's PAIR, coopmat_blr_pair.spv). Each path's workgroups run the single
// GEMM's code on the same block and pack, so c[p] gets the bits of coopBLRGEMM with pre[p];
// the gain is twice the workgroups in flight: at the 0.8B's t1 and dt2 (4,096 rows, N = rank
// 384) a single GEMM is 3×32 = 96 workgroups of 128×128, one per SM on a 132-SM H100 (not
// yet measured on a GPU). Costs: two blrGEMMCost.
// It returns false, recording nothing, where it does not apply: tensor cores off,
// pathPairsOff, B's rows not whole bytes (as coopBLRGEMM), a nil pack, bits or c, c[0] =
// c[1], packs not of one a16 and one rs buffer laid out by coopPairLayout for this GEMM's
// plan, the two paths' buffers past a binding (maxStorageBufferBindingSize), or where the
// single GEMM would split K (coopSplitK > 1: at 4B's dt2, K 9216, the split is measured
// faster). Buffers are checked by the caller (c[p] F32 [m, n], distinct from the operands).
// Errors: those of Dispatch (nothing recorded).
func coopBLRGEMMPair(r *Recorder, op string, pre [2]*coopA, bits, c [2]*Buffer, m, k, n int, transB bool) (bool, error) {
	d := r.d
	if pathPairsOff || !d.coopUse() || (transB && k%8 != 0) || (!transB && n%8 != 0) ||
		pre[0] == nil || pre[1] == nil || bits[0] == nil || bits[1] == nil || c[0] == nil || c[1] == nil || c[0] == c[1] {
		return false, nil
	}
	pl, ok := d.coopPairGEMMPlan(m, k, n, false)
	if !ok {
		return false, nil
	}
	a16, rs := pre[0].a16.Buf, pre[0].rs.Buf
	if want := pl.parts(a16, rs); a16 == nil || rs == nil || *pre[0] != *want[0] || *pre[1] != *want[1] {
		return false, nil // not coopPackPaths' packs for this plan
	}
	t, grid := pl.t, pl.grid
	kn, err := d.coopKernel(op, coopBLRPair, t, transB, false)
	if err != nil {
		return false, nil // coopKernel switched tensor cores off with the reason
	}
	grid[2] = 2
	if err := r.Dispatch(kn, grid, pl.uniforms(m, n, k), Binding{Buf: a16, Size: pl.aTotal}, Binding{Buf: rs, Size: pl.rsTotal},
		Whole(bits[0]), Whole(bits[1]), Whole(c[0]), Whole(c[1])); err != nil {
		return true, err
	}
	f, b := blrGEMMCost(m, k, n, false, false)
	r.Cost(2*f, 2*b)
	coopDispatches.Add(2)
	coopPairGEMMs.Add(1)
	return true, nil
}

// coopBLRDualPlan is the plan of coopBLRGEMMDual for the y GEMMs of a two-path BLR layer
// (C [m, n] over K = k, B = U_p [n, k] sign bits, transB), raw telling whether the raw sums
// are kept: coopPairPlanFor's, with ok false also where k % 8 ≠ 0 (U's rows not whole bytes:
// never for a BLR layer) or where the single y GEMM would split K (coopSplitK > 1 without
// raw, as coopBLRGEMM; with raw it never splits). blrForward asks it before it chooses the
// t1 buffers (two where the dual dispatch will need both paths' t1 at once).
func (d *Device) coopBLRDualPlan(m, k, n int, raw bool) (pl coopPairPlan, ok bool) {
	if k%8 != 0 {
		return pl, false
	}
	return d.coopPairGEMMPlan(m, k, n, raw)
}

// coopPairGEMMPlan is coopPairPlanFor's plan for a GEMM that will run both paths in one
// dispatch (coopBLRGEMMPair, coopBLRGEMMDual), ok false also where the single GEMM would
// split K (coopSplitK > 1; a GEMM with raw sums never splits): at 4B's dt2, K 9216, the split
// measured faster. BLRForward and BLRBackward ask it before they borrow a second t1 or dt2
// buffer for the pair.
func (d *Device) coopPairGEMMPlan(m, k, n int, raw bool) (coopPairPlan, bool) {
	pl, ok := d.coopPairPlanFor(m, k, n)
	if !ok || (!raw && d.coopSplitK(pl.t, pl.grid[0]*pl.grid[1], pl.kp) > 1) {
		return pl, false
	}
	return pl, true
}

// coopPairPlan is one cooperative-matrix GEMM's plan (coopPlan: the tile t, padded sizes mp
// and kp, the grid) for the two paths of a BLR layer at once, with where their packs of A
// lie in the one a16 and one rs buffer they share (coopPairLayout: path 1's part at aOff and
// rsOff, the buffers aTotal and rsTotal bytes).
type coopPairPlan struct {
	t                            coopTile
	mp, kp                       int
	grid                         [3]int
	aOff, rsOff, aTotal, rsTotal uint64
}

// coopPairPlanFor returns the pair plan of an m×n GEMM over k, ok false where the two
// paths' packs cannot share buffers: tensor cores off, pathPairsOff, sizes past coopPlan's
// limits, or the shared buffers past a binding (maxStorageBufferBindingSize), a buffer or
// the index range.
func (d *Device) coopPairPlanFor(m, k, n int) (pl coopPairPlan, ok bool) {
	if pathPairsOff || !d.coopUse() {
		return pl, false
	}
	if pl.t, pl.mp, pl.kp, pl.grid, ok = d.coopPlan(m, k, n); !ok {
		return pl, false
	}
	pl.aOff, pl.rsOff, pl.aTotal, pl.rsTotal = coopPairLayout(d.StorageAlign(), pl.mp, pl.kp)
	lim := d.Info().MaxStorageBindingSize
	ok = pl.aOff%16 == 0 && pl.rsOff%4 == 0 && pl.aTotal <= lim && pl.rsTotal <= lim && pl.aTotal <= d.info.MaxBufferSize &&
		pl.aTotal/4 <= maxU32Elems && pl.aOff/16 <= math.MaxUint32 && pl.rsOff/4 <= math.MaxUint32
	return pl, ok
}

// borrow borrows the shared a16 (U32) and rs (F32) buffers of pl; give gives both back.
func (pl coopPairPlan) borrow(r *Recorder, op string) (a16, rs *Buffer, give func(), err error) {
	a16, g1, err := r.Borrow(op+" a16 (both paths)", U32, int(pl.aTotal/4))
	if err != nil {
		return nil, nil, nil, err
	}
	rs, g2, err := r.Borrow(op+" rs (both paths)", F32, int(pl.rsTotal/4))
	if err != nil {
		g1()
		return nil, nil, nil, err
	}
	return a16, rs, func() { g1(); g2() }, nil
}

// parts returns the two paths' packs in pl's shared buffers a16 and rs: path p's a16 (mp·kp·2
// bytes) and rs (mp·4 bytes) ranges.
func (pl coopPairPlan) parts(a16, rs *Buffer) [2]*coopA {
	aBytes, rsBytes := uint64(pl.mp)*uint64(pl.kp)*2, uint64(pl.mp)*4
	return [2]*coopA{
		{a16: Binding{Buf: a16, Size: aBytes}, rs: Binding{Buf: rs, Size: rsBytes}, mp: pl.mp, kp: pl.kp},
		{a16: Binding{Buf: a16, Offset: pl.aOff, Size: aBytes}, rs: Binding{Buf: rs, Offset: pl.rsOff, Size: rsBytes}, mp: pl.mp, kp: pl.kp},
	}
}

// uniforms are the PAIR and DUAL kernels' parameters {m, n, k, kp, astr, rstr}: path 1's
// offsets in 16-byte vectors of a16 and elements of rs.
func (pl coopPairPlan) uniforms(m, n, k int) []uint32 {
	return []uint32{uint32(m), uint32(n), uint32(k), uint32(pl.kp), uint32(pl.aOff / 16), uint32(pl.rsOff / 4)}
}

// coopBLRGEMMDual is the cooperative-matrix form of the two y GEMMs of a two-path BLR layer's
// forward as ONE dispatch: y[m, n] = Σ_p h_p ⊙ ((t1_p ⊙ ℓ_p)·U_pᵀ), with a[p] = t1_p F32
// [m, k], sa[p] = ℓ_p F32 [k], bits[p] = U_p's sign bits [n, k] (transB), sc[p] = h_p F32
// [n], c = y F32 [m, n] (overwritten), and raw[p], when both are given, receiving c_p =
// (t1_p ⊙ ℓ_p)·U_pᵀ F32 [m, n] (BLRKept's C). The two operands are packed by two single packs
// (coopPackInto) into the two parts of one borrowed a16 and one rs buffer (coopPairLayout);
// coopmat_gemm.comp's DUAL (coopmat_blr_dual.spv, coopmat_blr_dual_raw.spv with raw) then
// runs on the single GEMM's grid [nx, ny, 1] and each workgroup computes its block for path 0
// and writes it (y = h_0 ⊙ c_0, raw[0] = c_0), then for path 1 and adds it (y += h_1 ⊙ c_1,
// raw[1] = c_1): the bits of coopBLRGEMM for path 0 and then, accumulating, path 1, with y
// written once instead of twice and never read back from memory (the y GEMMs have short K —
// the rank — so the f32 epilogue weighs; on an H100 the step did not measurably change).
// Costs: two blrGEMMCost, the first not accumulating, the second accumulating.
// It returns false, recording nothing, where it does not apply (coopBLRDualPlan: tensor cores
// off, pathPairsOff, sizes past the binding limits, a single y GEMM that would split K), a
// nil operand, a[0] = a[1] (one t1 buffer cannot hold both paths' t1), or raw given for one
// path only; BLRForward then runs the two single GEMMs. Buffers are checked by the caller
// (distinct outputs and operands). Errors: those of Borrow and Dispatch (nothing recorded).
func coopBLRGEMMDual(r *Recorder, op string, a, bits, sa, sc, raw [2]*Buffer, c *Buffer, m, k, n int) (bool, error) {
	d := r.d
	for p := range 2 {
		if a[p] == nil || bits[p] == nil || sa[p] == nil || sc[p] == nil {
			return false, nil
		}
	}
	if c == nil || a[0] == a[1] || (raw[0] == nil) != (raw[1] == nil) {
		return false, nil
	}
	withRaw := raw[0] != nil
	pl, ok := d.coopBLRDualPlan(m, k, n, withRaw)
	if !ok {
		return false, nil
	}
	v := coopBLRDual
	if withRaw {
		v = coopBLRDualRaw
	}
	kn, err := d.coopKernel(op, v, pl.t, true, false)
	if err != nil {
		return false, nil // coopKernel switched tensor cores off with the reason
	}
	mark := len(r.ops)
	a16, rs, give, err := pl.borrow(r, op)
	if err != nil {
		return true, err
	}
	defer give()
	for p, pk := range pl.parts(a16, rs) {
		if err := coopPackInto(r, op, Whole(a[p]), sa[p], pk.a16, pk.rs, m, k, pl.mp, pl.kp, false); err != nil {
			r.ops = r.ops[:mark]
			return true, err
		}
	}
	binds := []Binding{{Buf: a16, Size: pl.aTotal}, {Buf: rs, Size: pl.rsTotal}, Whole(bits[0]), Whole(bits[1]),
		Whole(sc[0]), Whole(sc[1]), Whole(c)}
	if withRaw {
		binds = append(binds, Whole(raw[0]), Whole(raw[1]))
	}
	if err := r.Dispatch(kn, pl.grid, pl.uniforms(m, n, k), binds...); err != nil {
		r.ops = r.ops[:mark]
		return true, err
	}
	f0, b0 := blrGEMMCost(m, k, n, false, withRaw)
	f1, b1 := blrGEMMCost(m, k, n, true, withRaw)
	r.Cost(f0+f1, b0+b1)
	coopDispatches.Add(2)
	coopDualGEMMs.Add(1)
	return true, nil
}

// coopPackColsParams are wgsl/coopmat_pack_cols.wgsl's template parameters.
type coopPackColsParams struct {
	Stage  string
	Mask   bool
	WG, RC int
}

// coopPackCols records CoopmatPackCols (wgsl/coopmat_pack_cols.wgsl) for x F32 [rows, n]:
// the per-column scales into scale [np] (2^−e_c·s[c], 0 where live masks c or past n) and x's
// f16 copy, transposed into [np][kp] (transpose, the GEMM's A) or as is [rows][n] (its B).
// Its buffers are borrowed; done gives them back.
func coopPackCols(r *Recorder, op string, x, s, live *Buffer, rows, n, np, kp int, transpose bool) (out16, scale *Buffer, done func(), err error) {
	const wg, rc = 64, 256
	var dones []func()
	done = func() {
		for _, f := range dones {
			f()
		}
	}
	borrow := func(label string, t DType, shape ...int) *Buffer {
		if err != nil {
			return nil
		}
		var b *Buffer
		var f func()
		if b, f, err = r.Borrow(op+" "+label, t, shape...); err == nil {
			dones = append(dones, f)
		}
		return b
	}
	mult := borrow("mult", F32, np)
	scale = borrow("scale", F32, np)
	if transpose {
		out16 = borrow("a16", U32, np*kp/2)
	} else {
		out16 = borrow("b16", U32, rows*n/2)
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	maxbits, err := r.Temp(op+" column max", U32, n) // zeroed
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	uni := []uint32{uint32(rows), uint32(n), uint32(kp), uint32(np)}
	spec := func(stage string, access ...Access) KernelSpec {
		return KernelSpec{Name: op + ".pack", File: "coopmat_pack_cols.wgsl",
			Params:   coopPackColsParams{Stage: stage, Mask: stage == "scale" && live != nil, WG: wg, RC: rc},
			Bindings: access, Uniforms: 4}
	}
	dispatch := func(sp KernelSpec, grid [3]int, binds ...Binding) error {
		kn, err := r.d.Kernel(sp)
		if err != nil {
			return err
		}
		return r.Dispatch(kn, grid, uni, binds...)
	}
	if err = dispatch(spec("colmax", Read, ReadWrite), [3]int{(n + wg - 1) / wg, (rows + rc - 1) / rc, 1}, Whole(x), Whole(maxbits)); err != nil {
		done()
		return nil, nil, nil, err
	}
	scaleBinds := []Binding{Whole(maxbits), Whole(s)}
	scaleAccess := []Access{Read, Read}
	if live != nil {
		scaleBinds = append(scaleBinds, Whole(live))
		scaleAccess = append(scaleAccess, Read)
	}
	scaleBinds = append(scaleBinds, Whole(mult), Whole(scale))
	scaleAccess = append(scaleAccess, ReadWrite, ReadWrite)
	g, err := Grid1D((np + wg - 1) / wg)
	if err == nil {
		err = dispatch(spec("scale", scaleAccess...), g, scaleBinds...)
	}
	if err == nil && transpose {
		err = dispatch(spec("t", Read, Read, ReadWrite), [3]int{np / 32, kp / 32, 1}, Whole(x), Whole(mult), Whole(out16))
	} else if err == nil {
		if g, err = Grid1D((rows*n/2 + wg - 1) / wg); err == nil {
			err = dispatch(spec("plain", Read, Read, ReadWrite), g, Whole(x), Whole(mult), Whole(out16))
		}
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return out16, scale, done, nil
}

// coopSignGrad is the cooperative-matrix form of signGrad (BLRSignGrad's row-reducing GEMM):
// out[i, j] = sa[i]·sb[j]·Σ_row a[row, i]·b[row, j] (exactly 0 where live masks the rank
// index: j when maskCols, else i), a F32 [rows, na], b F32 [rows, nb]. Both operands are f32,
// so each goes to f16 with a power-of-two scale per column (coopPackCols; a transposed, so
// the GEMM's A rows are its columns), and the dense kernel with column scales computes
// diag(sa·2^−e)·(A16·B16)·diag(sb·2^−e'). It returns false, recording nothing, where tensor
// cores are off, nb % 8 ≠ 0, or the sizes pass the limits.
func coopSignGrad(r *Recorder, op string, a, b, sa, sb, out, live *Buffer, rows, na, nb int, maskCols bool) (bool, error) {
	d := r.d
	if !d.coopUse() || nb%8 != 0 {
		return false, nil
	}
	t, _, _, grid, ok := d.coopPlan(na, rows, nb)
	if !ok {
		return false, nil
	}
	// The transposing pack works in 32×32 tiles: mp and kp are multiples of 32 and of BM,
	// BK (a forced block may be 48 deep).
	mp, kp := roundUp(na, lcm(t.BM, 32)), roundUp(rows, lcm(t.BK, 32))
	grid[1] = mp / t.BM
	if mp/32 > 65535 || kp/32 > 65535 || grid[1] > 65535 || uint64(mp)*uint64(kp)*2 > d.Info().MaxStorageBindingSize {
		return false, nil
	}
	kn, err := d.coopKernel(op, coopDenseScale, t, false, false)
	if err != nil {
		return false, nil
	}
	mark := len(r.ops)
	fail := func(err error) (bool, error) {
		r.ops = r.ops[:mark]
		return true, err
	}
	liveA, liveB := live, (*Buffer)(nil)
	if maskCols {
		liveA, liveB = nil, live
	}
	a16, rs, doneA, err := coopPackCols(r, op+".a", a, sa, liveA, rows, na, mp, kp, true)
	if err != nil {
		return fail(err)
	}
	defer doneA()
	b16, cs, doneB, err := coopPackCols(r, op+".b", b, sb, liveB, rows, nb, nb, kp, false)
	if err != nil {
		return fail(err)
	}
	defer doneB()
	if err := r.Dispatch(kn, grid, []uint32{uint32(na), uint32(nb), uint32(rows), uint32(kp)},
		Whole(a16), Whole(rs), Whole(b16), Whole(cs), Whole(out)); err != nil {
		return fail(err)
	}
	r.Cost(signGradCost(rows, na, nb, 1))
	coopDispatches.Add(1)
	return true, nil
}

// pickCoopType returns the shape the kernels use among the device's types: f16 A and B, f32
// C and result, subgroup scope, M, N, K multiples of 8 (16-byte staging vectors), 16×16×16
// preferred (NVIDIA), else the smallest (Mesa lavapipe 26: 8×8×8).
func pickCoopType(types []CoopType) (CoopType, bool) {
	var best CoopType
	found := false
	for _, c := range types {
		if c.A != "f16" || c.B != "f16" || c.C != "f32" || c.Result != "f32" || c.Scope != "subgroup" || c.Saturating ||
			c.M%8 != 0 || c.N%8 != 0 || c.K%8 != 0 || c.M > 32 || c.N > 32 || c.K > 32 {
			continue
		}
		if c.M == 16 && c.N == 16 && c.K == 16 {
			return c, true
		}
		if !found || c.M*c.N*c.K < best.M*best.N*best.K {
			best, found = c, true
		}
	}
	return best, found
}

// initTensorCores decides d.tc after the device is created: lay and layErr are loadLayer's,
// st the layer's state right after this device's vkCreateDevice. It runs the self-test.
func (d *Device) initTensorCores(lay *vkLayer, layErr error, st layerState, stErr error) {
	d.coopChecked = map[string]bool{}
	d.layer = lay
	tc := &d.tc
	switch {
	case layErr != nil:
		tc.Reason = layErr.Error()
		return
	case stErr != nil:
		tc.Reason = stErr.Error()
		return
	case st.Instances == 0:
		tc.Reason = fmt.Sprintf("the Vulkan loader did not load the layer %s (VK_ADD_LAYER_PATH=%s, VK_LAYER_PATH=%s, VK_INSTANCE_LAYERS=%s)",
			layerName, os.Getenv("VK_ADD_LAYER_PATH"), os.Getenv("VK_LAYER_PATH"), os.Getenv("VK_INSTANCE_LAYERS"))
		return
	case st.LastDevice == nil:
		tc.Reason = "the Vulkan layer saw no vkCreateDevice"
		return
	}
	ld := st.LastDevice
	tc.Shapes, tc.SubgroupSize = ld.Shapes, ld.SubgroupSize
	if ld.MemoryModelIn != "" {
		tc.Features = fmt.Sprintf("vulkanMemoryModel in %s, cooperativeMatrix in %s", ld.MemoryModelIn, ld.CoopmatFeatureIn)
	}
	if !ld.Enabled {
		tc.Reason = ld.Reason
		return
	}
	shape, ok := pickCoopType(ld.Shapes)
	if !ok {
		tc.Reason = fmt.Sprintf("%s has no f16×f16→f32 subgroup cooperative matrix of 8, 16 or 32 rows (it lists %v)", ld.Device, ld.Shapes)
		return
	}
	if tc.SubgroupSize < 1 {
		tc.Reason = fmt.Sprintf("%s reports subgroup size %d", ld.Device, tc.SubgroupSize)
		return
	}
	tc.Shape = shape
	if v := strings.TrimSpace(os.Getenv("NVG_COOPMAT_TILE")); v != "" {
		t, err := parseCoopTile(v)
		if err == nil {
			err = t.check(shape, tc.SubgroupSize, d.info)
		}
		if err != nil {
			tc.Reason = err.Error()
			return
		}
		coopTileForce = t
	}
	if v := strings.TrimSpace(os.Getenv("NVG_COOPMAT_DELTA_COLS")); v != "" {
		n, err := parseCoopDeltaCols(v, shape)
		if err == nil { // the tile's structure (the workgroup memory depends on dk: checked per call)
			err = coopDeltaTile{DKP: 4 * shape.M, CS: n, NSG: 4}.check(tc.SubgroupSize, shape.M, Info{})
		}
		if err != nil {
			tc.Reason = err.Error()
			return
		}
		coopDeltaColsForce = n
	}
	if v := strings.TrimSpace(os.Getenv("NVG_COOPMAT_SPLITK")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			tc.Reason = fmt.Sprintf("NVG_COOPMAT_SPLITK=%q: want an integer from 1 to 64", v)
			return
		}
		coopSplitForce = n
	}
	if err := d.initCoopmat2(ld); err != nil {
		tc.Reason = err.Error()
		return
	}
	tc.Available = true
	msg, err := d.coopSelfTest()
	if err != nil {
		d.coopOff("self-test: " + err.Error())
		return
	}
	if tc := d.TensorCores(); tc.Coopmat2 && tc.Coopmat2On { // only where chosen: it costs pipelines at every Open
		msg2, err := d.coop2SelfTest()
		if err != nil {
			d.coop2Off("self-test: " + err.Error())
		}
		d.mu.Lock()
		d.tc.Coopmat2SelfTest = msg2
		d.mu.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tc.Available { // a kernel failed during the self-test (coopOff said why)
		return
	}
	d.tc.SelfTest = msg
	if d.info.CPU && tensorCoresEnv() != "on" {
		d.tc.Reason = fmt.Sprintf("%s is a CPU adapter: its lane-blocked kernels are faster (NVG_TENSOR_CORES=on uses %s)", d.info.Name, shape)
		return
	}
	d.tc.On = true
}

// coopSelfTest runs coopSelfTestTile with every block coopTileFor may choose on d that
// suits the device.
func (d *Device) coopSelfTest() (string, error) {
	restore := SetTensorCores(true)
	defer restore()
	r2 := SetCoopmat2(false) // the KHR kernels (coop2SelfTest: the coopmat2 one)
	defer r2()
	defer func() { d.coopTileTest = coopTile{} }()
	var worst [2]float64
	var tiles []string
	for _, r := range d.coopTileRules() {
		if r.t.check(d.tc.Shape, d.tc.SubgroupSize, d.info) != nil {
			continue
		}
		d.coopTileTest = r.t
		w, err := d.coopSelfTestTile(r.t, false)
		if err != nil {
			return "", err
		}
		worst[0], worst[1] = math.Max(worst[0], w[0]), math.Max(worst[1], w[1])
		tiles = append(tiles, r.t.String())
	}
	if len(tiles) == 0 {
		return "", errors.New("no cooperative-matrix block suits the device")
	}
	return fmt.Sprintf("Linear and BLR against the WGSL twins, blocks %s: worst |err|/bound %.2g, %.2g",
		strings.Join(tiles, ", "), worst[0], worst[1]), nil
}

// coopSelfTestTile runs one dense and one BLR cooperative-matrix GEMM with block t on
// awkward sizes (two row blocks and a partial one, k not a multiple of the block; kAligned:
// k a multiple of it, so that the first column block takes the coopmat2 kernel's FAST loop) against
// the WGSL twins (linear_naive.wgsl, blr_forward_naive.wgsl) on the device, with the
// tolerance of the numerics (DESIGN.md §7): |coop − twin| ≤ (2⁻¹⁰ + 2(k+1)·2⁻²⁴)·Σ|a||b| per
// element. It returns the worst |err|/bound of each.
func (d *Device) coopSelfTestTile(t coopTile, kAligned bool) ([2]float64, error) {
	var worst [2]float64
	m, n, k := t.BM+t.BM/2+3, t.BN+t.BN/4+8, 2*t.BK+8
	if kAligned {
		k = 2 * t.BK
	}
	rng := rand.New(rand.NewPCG(32, 7))
	af := make([]float32, m*k)
	for i := range af {
		// Rows of very different magnitudes, as gradients have: 1e-8 … 1e3.
		af[i] = float32((rng.Float64()*2 - 1) * math.Pow(10, float64(i/k%12)-8))
	}
	wb := make([]uint16, n*k)
	wf := make([]float64, n*k)
	for i := range wb {
		h := float16.Fromfloat32(float32(rng.Float64()*2 - 1))
		wb[i], wf[i] = h.Bits(), float64(h.Float32())
	}
	bitsW := make([]uint32, (n*k+31)/32)
	for i := range bitsW {
		bitsW[i] = rng.Uint32()
	}
	sa := make([]float32, k)
	sc := make([]float32, n)
	for i := range sa {
		sa[i] = float32(0.5 + rng.Float64())
	}
	for i := range sc {
		sc[i] = float32(0.5 + rng.Float64())
	}
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Release()
		}
	}()
	up := func(b *Buffer, err error) *Buffer {
		if b != nil {
			bufs = append(bufs, b)
		}
		return b
	}
	a := up(d.UploadFloat32("self-test A", af, m, k))
	w := up(d.UploadF16("self-test W", wb, n, k))
	bits := up(d.UploadUint32("self-test signs", bitsW, len(bitsW)))
	sab := up(d.UploadFloat32("self-test sa", sa, k))
	scb := up(d.UploadFloat32("self-test sc", sc, n))
	var outs [4]*Buffer
	for i := range outs {
		outs[i] = up(d.NewBuffer("self-test C", F32, m, n))
	}
	for _, b := range append([]*Buffer{a, w, bits, sab, scb}, outs[:]...) {
		if b == nil {
			return worst, errors.New("could not allocate its buffers")
		}
	}
	err := d.Run(func(r *Recorder) error {
		ok, err := coopGEMM(r, "SelfTest.Linear", Whole(a), Whole(w), Whole(outs[0]), true, m, k, n, true)
		if err != nil || !ok {
			return errors.Join(err, errors.New("the dense kernel declined"))
		}
		if err := gemm(r, "SelfTest.LinearNaive", true, Whole(a), Whole(w), Whole(outs[1]), true, m, k, n, true); err != nil {
			return err
		}
		ok, err = coopBLRGEMM(r, "SelfTest.BLR", nil, a, bits, sab, scb, outs[2], nil, m, k, n, true, false)
		if err != nil || !ok {
			return errors.Join(err, errors.New("the BLR kernel declined"))
		}
		return blrGEMM(r, "SelfTest.BLRNaive", true, a, bits, sab, scb, outs[3], nil, m, k, n, true, false)
	})
	if err != nil {
		return worst, err
	}
	var got [4][]float32
	for i, b := range outs {
		if got[i], err = d.ReadFloat32(b); err != nil {
			return worst, err
		}
	}
	tol := math.Pow(2, -10) + 2*float64(k+1)*math.Pow(2, -24)
	for pass := range 2 {
		for i := range m {
			for j := range n {
				var s float64
				for l := range k {
					av := float64(af[i*k+l])
					if pass == 0 {
						s += math.Abs(av * wf[j*k+l])
					} else {
						s += math.Abs(av * float64(sa[l]) * float64(sc[j]))
					}
				}
				c, w := float64(got[2*pass][i*n+j]), float64(got[2*pass+1][i*n+j])
				e := math.Abs(c - w)
				if !(e <= tol*s) {
					name := [2]string{"Linear", "BLR"}[pass]
					return worst, fmt.Errorf("%s %d×%d×%d (tile %s): C[%d, %d] = %g, the WGSL twin's %g, |err| %.3g > %.3g",
						name, m, k, n, t, i, j, c, w, e, tol*s)
				}
				if s > 0 {
					worst[pass] = math.Max(worst[pass], e/(tol*s))
				}
			}
		}
	}
	return worst, nil
}
