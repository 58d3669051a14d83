package gpu

import "fmt"

const (
	// gemmBM, gemmBN: the output block of the small GEMM tile (the 64×64 one; other
	// tiled kernels such as blr_forward.wgsl use the same block).
	gemmBM      = 64
	gemmBN      = 64
	gemmNaiveWG = 64
)

type gemmParams struct {
	TransB, BF16, Fast bool
	BM, BN, BK, N, K   int
}

// gemmVariant is a forced choice of the tiled GEMM's variant (tests and benchmarks): the
// tile when BM > 0, and the general path even where the fast one applies.
type gemmVariant struct {
	BM, BN, BK int
	General    bool
}

// gemmForce, when set, overrides the automatic variant (tests, benchmarks).
var gemmForce gemmVariant

// gemmTileFor picks the tile of an m×n output of depth k. CPU adapters, outputs under
// 128×128 and devices with less than 32 KiB of workgroup memory: 64×64 blocks (4×4 outputs
// per thread), BK 16 (lavapipe, 512×1024×1024: 64×64×16 3.0, 128×128×16 4.7, 128×128×32
// 3.4 GFLOP/s). GPUs: 128×128 blocks (8×8 per thread) when they make at least
// gemmMinGroups workgroups, else 64×128 or 128×64 when they make at least gemmSmallGroups,
// else 64×64 (DESIGN §9: on the H200 the 128×128 tile ran 4096×1024 outputs, 256
// workgroups, at 34–36 TFLOP/s, but a 4096×384 output, 96 workgroups, 2–2.6× slower than
// 64×128). A block whose width divides n is preferred, so that the fast path applies; BK is
// 32, or 16 when that makes k a multiple of BK.
func (d *Device) gemmTileFor(m, n, k int) (bm, bn, bk int) {
	if gemmForce.BM > 0 {
		return gemmForce.BM, gemmForce.BN, gemmForce.BK
	}
	if d.info.CPU || m < 128 || n < 128 || d.info.MaxWorkgroupStorage < 32<<10 {
		return gemmBM, gemmBN, 16
	}
	bk = 32
	if k%32 != 0 && k%16 == 0 {
		bk = 16
	}
	groups := func(bm, bn int) int { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn) }
	tiles := []struct{ bm, bn, min int }{{128, 128, gemmMinGroups}, {64, 128, gemmSmallGroups},
		{128, 64, gemmSmallGroups}, {64, 64, 0}}
	for _, divides := range []bool{true, false} {
		for _, t := range tiles {
			if groups(t.bm, t.bn) >= t.min && (!divides || n%t.bn == 0) {
				return t.bm, t.bn, bk
			}
		}
	}
	return gemmBM, gemmBN, bk
}

const (
	// gemmMinGroups: the least grid for the 128×128 tile. 256 workgroups (about two waves
	// of one 256-thread workgroup per SM on the H200's 132 SMs) measured as fast as large
	// grids; 96 and 192 measured slower than the smaller tiles.
	gemmMinGroups = 240
	// gemmSmallGroups: the least grid for the 64×128 and 128×64 tiles (one workgroup per
	// SM of an H200).
	gemmSmallGroups = 132
)

// gemmFast reports whether the fast path of linear.wgsl / blr_forward.wgsl applies to a
// GEMM of n columns and depth k with block bn×bk: n % bn == 0 and k % bk == 0 (so every
// tile is full along n and k, rows of A and B start on 16-byte boundaries, and vec4 loads
// and stores stay inside their rows), and every binding starts on a 16-byte boundary.
func gemmFast(n, k, bn, bk int, binds ...Binding) bool {
	if gemmForce.General || n%bn != 0 || k%bk != 0 {
		return false
	}
	for _, b := range binds {
		if b.Offset%16 != 0 {
			return false
		}
	}
	return true
}

// linearLanesParams are linear_lanes.wgsl's template parameters.
type linearLanesParams struct {
	TransB, BF16 bool
	lanesParams
}

type gemmNaiveParams struct {
	TransB, BF16 bool
	WG           int
}

// gemm records C[m, n] = A[m, k]·B (B [n, k] when transB, else [k, n]; f32 or packed f16)
// on bindings already checked by the caller.
func gemm(r *Recorder, op string, naive bool, a, b, c Binding, bf16 bool, m, k, n int, transB bool) error {
	if err := r.usable(); err != nil {
		return err
	}
	// A CPU adapter takes the simple twin for k < 4, where the lanes form cannot run (its A
	// loads are vec4s along k) and the tiled one spends its time on the tile loads and stores
	// (the GatedDeltaNet a and b projections' input gradients, k = value heads
	// at 256 × 256 on lavapipe: 2.7 → 1.3 ms).
	// The one seam of the implementation choice: tensor cores (coopmat.go) when they are on
	// and the shapes fit, else the WGSL kernels below.
	if !naive {
		if ok, err := coopGEMM(r, op, a, b, c, bf16, m, k, n, transB); ok || err != nil {
			return err
		}
	}
	if naive || (r.d.info.CPU && k < 4 && gemmForce == (gemmVariant{})) {
		kn, err := r.d.Kernel(KernelSpec{Name: op, File: "linear_naive.wgsl",
			Params:   gemmNaiveParams{TransB: transB, BF16: bf16, WG: gemmNaiveWG},
			Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3})
		if err != nil {
			return err
		}
		g, err := Grid1D((m*n + gemmNaiveWG - 1) / gemmNaiveWG)
		if err != nil {
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		if err := r.Dispatch(kn, g, []uint32{uint32(m), uint32(n), uint32(k)}, a, b, c); err != nil {
			return err
		}
		r.Cost(gemmCost(m, k, n, bf16))
		return nil
	}
	if lp, ok := r.d.gemmLanes(m, n, k, bf16 && !transB, a, b, c); ok {
		kn, err := r.d.Kernel(KernelSpec{Name: op, File: "linear_lanes.wgsl",
			Params:   linearLanesParams{TransB: transB, BF16: bf16, lanesParams: lp},
			Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3})
		if err != nil {
			return err
		}
		if err := r.dispatchLanes(kn, lp, m, n, []uint32{uint32(m), uint32(n), uint32(k)}, a, b, c); err != nil {
			return err
		}
		r.Cost(gemmCost(m, k, n, bf16))
		return nil
	}
	bm, bn, bk := r.d.gemmTileFor(m, n, k)
	pr := gemmParams{TransB: transB, BF16: bf16, BM: bm, BN: bn, BK: bk}
	if gemmFast(n, k, bn, bk, a, b, c) {
		pr.Fast, pr.N, pr.K = true, n, k
	}
	kn, err := r.d.Kernel(KernelSpec{Name: op, File: "linear.wgsl",
		Params:   pr,
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3})
	if err != nil {
		return err
	}
	gx, gy := (n+bn-1)/bn, (m+bm-1)/bm
	if gx > 65535 || gy > 65535 {
		return fmt.Errorf("gpu: %s: %d×%d output needs a %d×%d grid (max 65535 per dimension)", op, m, n, gx, gy)
	}
	if err := r.Dispatch(kn, [3]int{gx, gy, 1}, []uint32{uint32(m), uint32(n), uint32(k)}, a, b, c); err != nil {
		return err
	}
	r.Cost(gemmCost(m, k, n, bf16))
	return nil
}

// gemmCost is the arithmetic (2·m·k·n) and the least global traffic (A and C in f32, B in
// f16 or f32, each once) of an m×k by k×n GEMM.
func gemmCost(m, k, n int, bf16 bool) (flops, bytes float64) {
	bsize := 4.0
	if bf16 {
		bsize = 2
	}
	return 2 * float64(m) * float64(k) * float64(n), 4*float64(m)*float64(k) + bsize*float64(k)*float64(n) + 4*float64(m)*float64(n)
}

func checkGEMM(op string, a, b, c *Buffer, m, k, n int, bTypes ...DType) error {
	return checkGEMMWeight(op, a, b, c, m, k, n, k*n, bTypes...)
}

// checkGEMMWeight is checkGEMM for a B of bn elements (LinearRows binds a block of a larger W).
func checkGEMMWeight(op string, a, b, c *Buffer, m, k, n, bn int, bTypes ...DType) error {
	if err := positive(op, "sizes m, k, n", m, k, n); err != nil {
		return err
	}
	if m*k > maxU32Elems || bn > maxU32Elems || m*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes %d, %d, %d exceed the 2³¹ index range", op, m, k, n)
	}
	if err := need(op, "input", a, m*k, F32); err != nil {
		return err
	}
	if err := need(op, "weight", b, bn, bTypes...); err != nil {
		return err
	}
	if err := need(op, "output", c, m*n, F32); err != nil {
		return err
	}
	return distinct(op, map[string]*Buffer{"input": a, "weight": b, "output": c})
}

// Linear records y = x·Wᵀ: x F32 [rows, in], W F16 (or F32) [out, in] (the PyTorch
// weight layout), y F32 [rows, out], all row-major; products and sums in f32 (one fused
// multiply-add per term, in K order). Tiled GEMM (linear.wgsl): 128×128, 64×128, 128×64
// or 64×64 output blocks per workgroup by grid size (gemmTileFor), operands staged in
// workgroup memory; a fast path with vector loads and N and K compiled in where out and in
// are multiples of the block (gemmFast), else bounds-checked loads. Errors: non-positive
// sizes, buffers whose dtype or element count disagree with the sizes, or y aliasing an
// input.
func Linear(r *Recorder, x, w, y *Buffer, rows, in, out int) error {
	if err := checkGEMM("Linear", x, w, y, rows, in, out, F16, F32); err != nil {
		return err
	}
	return gemm(r, "Linear", false, Whole(x), Whole(w), Whole(y), w.dtype == F16, rows, in, out, true)
}

// LinearRows records y = x·W[o0 : o0+n]ᵀ, the output features o0 … o0+n−1 of Linear:
// x F32 [rows, in], W F16 (or F32) [out, in], y F32 [rows, n]. Only that row block of W is
// bound, so a head larger than one storage binding can be applied a block at a time (the
// result is Linear's columns, bit for bit: the same kernel sums every output in K order).
// Errors: as Linear, plus a block outside [0, out) or whose byte offset o0·in·size(W) is not
// a multiple of the storage alignment (StorageAlign; o0 a multiple of 128 always is, for
// in ≥ 1 and 256-byte alignment), or a block above maxStorageBufferBindingSize.
func LinearRows(r *Recorder, x, w, y *Buffer, rows, in, out, o0, n int) error {
	const op = "LinearRows"
	if err := positive(op, "rows, in, out, n", rows, in, out, n); err != nil {
		return err
	}
	if o0 < 0 || o0+n > out {
		return fmt.Errorf("gpu: %s: rows [%d, %d) of W are outside its %d rows", op, o0, o0+n, out)
	}
	if err := checkGEMMWeight(op, x, w, y, rows, in, n, out*in, F16, F32); err != nil {
		return err
	}
	esz := uint64(w.dtype.Size())
	off := uint64(o0) * uint64(in) * esz
	if off%r.d.StorageAlign() != 0 {
		return fmt.Errorf("gpu: %s: W row %d starts at byte %d, not a multiple of the storage alignment %d", op, o0, off, r.d.StorageAlign())
	}
	wb := Binding{Buf: w, Offset: off, Size: (uint64(n)*uint64(in)*esz + 3) &^ 3}
	return gemm(r, op, false, Whole(x), wb, Whole(y), w.dtype == F16, rows, in, n, true)
}

// LinearT records dx = dy·W, the input gradient of Linear: dy F32 [rows, out], W F16 (or
// F32) [out, in], dx F32 [rows, in] (overwritten). Errors as Linear.
func LinearT(r *Recorder, dy, w, dx *Buffer, rows, in, out int) error {
	if err := checkGEMM("LinearT", dy, w, dx, rows, out, in, F16, F32); err != nil {
		return err
	}
	return gemm(r, "LinearT", false, Whole(dy), Whole(w), Whole(dx), w.dtype == F16, rows, out, in, false)
}

// MatMul records the dense f32 product C = A·B (B F32 [k, n]) or, when transB, C = A·Bᵀ
// (B F32 [n, k]); A F32 [m, k], C F32 [m, n], row-major. Errors as Linear.
func MatMul(r *Recorder, a, b, c *Buffer, m, k, n int, transB bool) error {
	if err := checkGEMM("MatMul", a, b, c, m, k, n, F32); err != nil {
		return err
	}
	return gemm(r, "MatMul", false, Whole(a), Whole(b), Whole(c), false, m, k, n, transB)
}

// LinearNaive is the simple twin of Linear, LinearT and MatMul (one invocation per output,
// no workgroup memory), kept as the reference of the tiled kernel: C[m, n] = A[m, k]·B with
// B F16 or F32, [n, k] when transB (Linear) or [k, n] (LinearT, MatMul).
func LinearNaive(r *Recorder, a, b, c *Buffer, m, k, n int, transB bool) error {
	if err := checkGEMM("LinearNaive", a, b, c, m, k, n, F16, F32); err != nil {
		return err
	}
	return gemm(r, "LinearNaive", true, Whole(a), Whole(b), Whole(c), b.dtype == F16, m, k, n, transB)
}
