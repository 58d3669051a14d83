package gpu

import (
	"encoding/binary"
	"fmt"
)

// QuantFormat is the code format of an 8-bit weight on the GPU.
type QuantFormat int

const (
	// QuantFP8 codes are float8_e4m3fn (HF's block-wise FP8; cmf.QuantFP8). The NaN codes
	// 0x7F and 0xFF must not be uploaded (cmf.Tensor.QuantCodes refuses them): the kernels
	// would read them as ±480.
	QuantFP8 QuantFormat = iota + 1
	// QuantQ8 codes are int8 (cmf.QuantQ8).
	QuantQ8
)

// String is "fp8" or "q8", the schemes' names in cmf.
func (f QuantFormat) String() string {
	switch f {
	case QuantFP8:
		return "fp8"
	case QuantQ8:
		return "q8"
	}
	return fmt.Sprintf("QuantFormat(%d)", int(f))
}

// QuantWeight is an 8-bit quantized weight W [Out, In] on the GPU, the layout of cmf's
// quantized tensors: Codes, a U32 buffer of ceil(Out·In/4) words holding one byte code per
// weight in W's row-major order (byte e = i·In + j in bits 8·(e%4)… of word e/4:
// UploadQuantCodes), and Scales, F32 or F16 [ceil(Out/Block[0]), ceil(In/Block[1])]
// row-major, W[i, j] = value(code) · Scales[i/Block[0], j/Block[1]] (FP8's weight_scale_inv
// per 128×128 block, q8's scale per row and 128 inputs).
type QuantWeight struct {
	Codes, Scales *Buffer
	Format        QuantFormat
	Out, In       int
	Block         [2]int // [rows, columns] of weights per scale
}

// Bytes is the GPU memory of the weight: its codes and scales.
func (w QuantWeight) Bytes() uint64 {
	var n uint64
	for _, b := range []*Buffer{w.Codes, w.Scales} {
		if b != nil {
			n += b.Bytes()
		}
	}
	return n
}

// Release frees the codes and scales buffers.
func (w QuantWeight) Release() {
	for _, b := range []*Buffer{w.Codes, w.Scales} {
		if b != nil {
			b.Release()
		}
	}
}

// UploadQuantCodes uploads the out·in byte codes of a quantized weight (row-major, as
// cmf.Tensor.QuantCodes gives them) as a U32 buffer of ceil(out·in/4) words, four codes per
// word, little-endian, the last word zero-padded. Errors: len(codes) ≠ out·in, non-positive
// sizes, the allocation's.
func (d *Device) UploadQuantCodes(label string, codes []byte, out, in int) (*Buffer, error) {
	if out <= 0 || in <= 0 || len(codes) != out*in {
		return nil, fmt.Errorf("gpu: UploadQuantCodes %s: %d codes for [%d, %d]", label, len(codes), out, in)
	}
	words := make([]uint32, (len(codes)+3)/4)
	for i := range words {
		var b [4]byte
		copy(b[:], codes[4*i:])
		words[i] = binary.LittleEndian.Uint32(b[:])
	}
	return d.UploadUint32(label, words, len(words))
}

// check validates w for the op: format, sizes, the codes' and scales' dtypes and lengths.
func (w QuantWeight) check(op string) error {
	if w.Format != QuantFP8 && w.Format != QuantQ8 {
		return fmt.Errorf("gpu: %s: unknown weight format %v", op, w.Format)
	}
	if err := positive(op, "out, in, block rows, block columns", w.Out, w.In, w.Block[0], w.Block[1]); err != nil {
		return err
	}
	if w.Out*w.In > maxU32Elems {
		return fmt.Errorf("gpu: %s: weight [%d, %d] exceeds the 2³¹ index range", op, w.Out, w.In)
	}
	if err := need(op, "codes", w.Codes, (w.Out*w.In+3)/4, U32); err != nil {
		return err
	}
	sr, sc := (w.Out+w.Block[0]-1)/w.Block[0], (w.In+w.Block[1]-1)/w.Block[1]
	return need(op, "scales", w.Scales, sr*sc, F32, F16)
}

// linearQuantParams are linear_quant.wgsl's template parameters (the fields of the form in
// use; the others zero).
type linearQuantParams struct {
	Form          string // "naive", "tiled" or "lanes"
	FP8, ScaleF16 bool
	BR, BC        int
	WG            int // naive
	TransB, Fast  bool
	BM, BN, BK    int
	N, K          int
	lanesParams
}

// LinearQuant records y = x·Wᵀ with W an 8-bit quantized weight, dequantized inside the
// GEMM's tile loads (no dense copy of W): x F32 [rows, w.In], y F32 [rows, w.Out],
// row-major; each weight is value(code) · scale rounded to f32 once (exact for q8), each
// output one fused multiply-add chain in K order. Forms (linear_quant.wgsl), all
// bit-identical: on GPUs the tiled GEMM of Linear (gemm_tile.wgsl's body: the tile by
// gemmTileFor, the fast path with vector loads — one u32 of 4 codes and one scale per row
// and 4 inputs — where out and in are multiples of the tile and w.Block[1] of 4); on CPU
// adapters the lane-blocked form (in and w.Block[1] multiples of 4). Where tensor cores are
// on (Device.TensorCores, SetTensorCores) and w.In and w.Block[1] are multiples of 8, the
// cooperative-matrix form runs instead (coopQuantGEMM: x and the dequantized weights in f16,
// f32 accumulation; not bit-identical, DESIGN.md §9 "GEMMs on 8-bit weights"). Errors:
// non-positive sizes, an unknown format, buffers whose dtype or length disagree with the
// sizes (codes U32 ceil(out·in/4) words, scales F32 or F16
// ceil(out/Block[0])·ceil(in/Block[1])), y aliasing an input.
func LinearQuant(r *Recorder, x *Buffer, w QuantWeight, y *Buffer, rows int) error {
	return linearQuant(r, "LinearQuant", false, x, w, y, rows)
}

// LinearQuantNaive is the simple twin of LinearQuant (one invocation per output, no
// workgroup memory), its test reference. Same arguments, result and errors.
func LinearQuantNaive(r *Recorder, x *Buffer, w QuantWeight, y *Buffer, rows int) error {
	return linearQuant(r, "LinearQuantNaive", true, x, w, y, rows)
}

func linearQuant(r *Recorder, op string, naive bool, x *Buffer, w QuantWeight, y *Buffer, rows int) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := w.check(op); err != nil {
		return err
	}
	m, k, n := rows, w.In, w.Out
	if err := positive(op, "rows", rows); err != nil {
		return err
	}
	if m*k > maxU32Elems || m*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes %d, %d, %d exceed the 2³¹ index range", op, m, k, n)
	}
	if err := need(op, "input", x, m*k, F32); err != nil {
		return err
	}
	if err := need(op, "output", y, m*n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"input": x, "codes": w.Codes, "scales": w.Scales, "output": y}); err != nil {
		return err
	}
	// The one seam of the implementation choice: tensor cores when they are on and w fits.
	if !naive {
		if ok, err := coopQuantGEMM(r, op+"."+w.Format.String(), x, w, y, m); ok || err != nil {
			return err
		}
	}
	pr := linearQuantParams{FP8: w.Format == QuantFP8, ScaleF16: w.Scales.DType() == F16, BR: w.Block[0], BC: w.Block[1]}
	binds := []Binding{Whole(x), Whole(w.Codes), Whole(w.Scales), Whole(y)}
	uniforms := []uint32{uint32(m), uint32(n), uint32(k)}
	// The profile's row: the op and the format (LinearQuant.fp8, LinearQuant.q8).
	spec := KernelSpec{Name: op + "." + w.Format.String(), File: "linear_quant.wgsl", Bindings: []Access{Read, Read, Read, ReadWrite}, Uniforms: 3}
	vec4 := w.Block[1]%4 == 0 // a 4-input step never straddles a scale
	var err error
	switch lp, lanes := r.d.gemmLanes(m, n, k, false, binds[0], binds[3]); {
	case naive:
		pr.Form, pr.WG = "naive", gemmNaiveWG
		spec.Params = pr
		err = r.dispatch1D(spec, (m*n+gemmNaiveWG-1)/gemmNaiveWG, uniforms, binds...)
	case lanes && vec4:
		pr.Form, pr.TransB, pr.lanesParams = "lanes", true, lp
		spec.Params = pr
		var kn *Kernel
		if kn, err = r.d.Kernel(spec); err == nil {
			err = r.dispatchLanes(kn, lp, m, n, uniforms, binds...)
		}
	default:
		bm, bn, bk := r.d.gemmTileFor(m, n, k)
		pr.Form, pr.TransB, pr.BM, pr.BN, pr.BK = "tiled", true, bm, bn, bk
		if vec4 && gemmFast(n, k, bn, bk, binds...) {
			pr.Fast, pr.N, pr.K = true, n, k
		}
		spec.Params = pr
		gx, gy := (n+bn-1)/bn, (m+bm-1)/bm
		if gx > 65535 || gy > 65535 {
			return fmt.Errorf("gpu: %s: %d×%d output needs a %d×%d grid (max 65535 per dimension)", op, m, n, gx, gy)
		}
		var kn *Kernel
		if kn, err = r.d.Kernel(spec); err == nil {
			err = r.Dispatch(kn, [3]int{gx, gy, 1}, uniforms, binds...)
		}
	}
	if err != nil {
		return err
	}
	r.Cost(linearQuantCost(m, k, n, w))
	return nil
}

// linearQuantCost is the arithmetic (2·m·k·n) and the least global traffic of LinearQuant:
// x and y in f32, one byte per weight, the scales.
func linearQuantCost(m, k, n int, w QuantWeight) (flops, bytes float64) {
	return 2 * float64(m) * float64(k) * float64(n), 4*float64(m)*float64(k) + float64(n)*float64(k) + float64(w.Scales.Bytes()) + 4*float64(m)*float64(n)
}

// coopQuantFile is the SPIR-V of LinearQuant on tensor cores: coopmat_gemm.comp's QUANT
// variant (generate.sh).
const coopQuantFile = "coopmat_quant.spv"

// The QUANT variant's SpecIds, after coopmat_gemm.comp's specSG … specAccum.
const (
	specQFP8 = specAccum + 1 + iota // codes float8_e4m3fn (else int8)
	specQF16                        // scales f16 (else f32)
	specQBR                         // rows of W per scale
	specQBC                         // inputs per scale
)

// quantCoopFits reports whether the cooperative-matrix form of LinearQuant takes w's shape:
// a 16-byte B vector of the kernel is 8 consecutive inputs of a row of W, so w.In must be a
// multiple of 8 (each row's codes start on an 8-byte boundary and no vector straddles two
// rows) and so must w.Block[1] (the 8 codes share one scale). Every Qwen3.5 projection and
// both schemes' blocks (128×128, 1×128) fit. The rows (w.Out, w.Block[0]) may be anything.
func quantCoopFits(w QuantWeight) bool { return w.In%8 == 0 && w.Block[1]%8 == 0 }

// coopQuantBlock is the 8-bit GEMM's block on GPUs where it makes at least
// coopQuantBlockGroups workgroups (else the dense GEMM's, coopTileFor): 256 rows of x a block,
// so each weight decoded to f16 serves twice the rows of the dense 128×128×64; it fits 48 KiB
// since the epilogue's tiles reuse the A tile (44 KiB with the row powers of two). Measured on
// H100s: at 9B's gate shape (4096 × 12288 × 4096: 1,536 blocks) q8 2,024 → 1,747 µs, FP8
// 1,988 → 1,778 (2026-12-07; the f16 GEMM 1,641); with BK 32 at 4B's gate (1,152 blocks) q8
// 953 → 899 µs but at 0.8B's gate (448 blocks) 220 → 238 µs (2026-12-06), hence the bound.
var coopQuantBlock = coopTile{256, 128, 48, 4, 2}

// coopQuantBlockGroups is the least grid for coopQuantBlock (a variable for tests:
// SetCoopQuantBlockGroups).
var coopQuantBlockGroups = 1024

// coopQuantPlan is coopPlan for the 8-bit GEMM of an m×n output over k: coopQuantBlock where
// it makes ≥ coopQuantBlockGroups workgroups on a GPU and no block is forced, else
// coopTileFor's choice among the blocks that fit the workgroup memory with the row powers of
// two (8·BN bytes more); ok false where that block does not fit either.
func (d *Device) coopQuantPlan(m, k, n int) (t coopTile, mp, kp int, grid [3]int, ok bool) {
	if coopTileForce == (coopTile{}) && d.coopTileTest == (coopTile{}) && !d.info.CPU {
		if t, mp, kp, grid, ok = d.coopPlanTile(coopQuantBlock, m, k, n); ok && grid[0]*grid[1] >= coopQuantBlockGroups && t.fits(d, 8) {
			return t, mp, kp, grid, true
		}
	}
	t, mp, kp, grid, ok = d.coopPlanTile(d.coopTileFor(m, n, 8), m, k, n)
	return t, mp, kp, grid, ok && t.fits(d, 8)
}

// coopQuantGEMM is the cooperative-matrix form of LinearQuant (coopmat_gemm.comp -DQUANT):
// x [m, w.In] is packed to f16 with a power-of-two scale per row (CoopmatPack, as for
// Linear), and the kernel stages the 8-bit weights into workgroup memory as f16, decoded in
// f16 arithmetic — each value(code) times f16(scale · 2^E) rounded to f16 once (the scale's
// rounding is exact for f16 scales, one more ≤ 2⁻¹¹ for f32 ones), 2^E a power of two per
// row of W that the epilogue divides out exactly. E comes from the
// exponent of the row's largest scale (coopmat_gemm.comp's qexp): every weight of the row
// times 2^E is below 2¹⁵ and the largest the row can hold (448 or 127 times that scale) at
// least 2¹³, so no dequantized weight can overflow f16 (max 65504) whatever the scales, and
// only a weight below 2⁻²⁷ of that largest can be an f16 subnormal: nothing to check in Go.
// Error per output: each f16 rounding ≤ 2⁻¹¹ relative (2⁻¹⁰ allowed) above those floors,
// f32 accumulation (gpu/linear_quant_test.go quantCoopBound). It returns false, recording
// nothing, where tensor cores are off, w's shape does not fit (quantCoopFits), or the sizes
// pass the grid, binding or workgroup-memory limits; the WGSL forms then run.
func coopQuantGEMM(r *Recorder, op string, x *Buffer, w QuantWeight, y *Buffer, m int) (bool, error) {
	d := r.d
	k, n := w.In, w.Out
	if !d.coopUse() || !quantCoopFits(w) {
		return false, nil
	}
	sg := d.tc.SubgroupSize
	t, mp, kp, grid, ok := d.coopQuantPlan(m, k, n)
	if !ok {
		return false, nil
	}
	// B transposed (W is [n, k]), C overwritten; then specQFP8 … specQBC.
	values := append(d.coopGEMMSpec(t, true, false), b2u(w.Format == QuantFP8), b2u(w.Scales.DType() == F16),
		uint32(w.Block[0]), uint32(w.Block[1]))
	kn, err := d.coopProgram(op, coopProgramSpec{File: coopQuantFile, WG: sg * t.WM * t.WN,
		Access: []Access{Read, Read, Read, Read, ReadWrite}, Uniforms: 4, Values: values})
	if err != nil {
		return false, nil // coopProgram switched tensor cores off with the reason
	}
	mark := len(r.ops)
	a16, rs, done, err := coopPack(r, op, Whole(x), nil, m, k, mp, kp, true) // the staged codes' order
	if err != nil {
		return true, err
	}
	defer done()
	err = r.Dispatch(kn, grid, []uint32{uint32(m), uint32(n), uint32(k), uint32(kp)},
		Whole(a16), Whole(rs), Whole(w.Codes), Whole(w.Scales), Whole(y))
	if err != nil {
		r.ops = r.ops[:mark]
		return true, err
	}
	r.Cost(linearQuantCost(m, k, n, w))
	coopDispatches.Add(1)
	return true, nil
}
