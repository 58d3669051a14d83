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
	TransB, BF16 bool
	BM, BN, BK   int
}

// gemmTile, when BM > 0, forces the tile of the tiled GEMM (tests).
var gemmTile gemmParams

// gemmTileFor picks the tile: 128×128 blocks (8×8 outputs per thread, the DESIGN §9
// shape) for outputs of at least 128×128, else 64×64 (4×4 per thread) so that small GEMMs
// still spread over many workgroups. BK is 32 on GPUs whose workgroup memory allows 32 KiB
// (the H200 configuration of DESIGN §9, not yet measured with this kernel) and 16 on CPU
// adapters, where it measured faster (lavapipe, 512×1024×1024: 64×64×16 3.0, 128×128×16
// 4.7, 128×128×32 3.4 GFLOP/s).
func (d *Device) gemmTileFor(m, n int) (bm, bn, bk int) {
	if gemmTile.BM > 0 {
		return gemmTile.BM, gemmTile.BN, gemmTile.BK
	}
	if m < 128 || n < 128 {
		return gemmBM, gemmBN, 16
	}
	if !d.info.CPU && d.info.MaxWorkgroupStorage >= 32<<10 {
		return 128, 128, 32
	}
	return 128, 128, 16
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
	if naive {
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
		return r.Dispatch(kn, g, []uint32{uint32(m), uint32(n), uint32(k)}, a, b, c)
	}
	bm, bn, bk := r.d.gemmTileFor(m, n)
	kn, err := r.d.Kernel(KernelSpec{Name: op, File: "linear.wgsl",
		Params:   gemmParams{TransB: transB, BF16: bf16, BM: bm, BN: bn, BK: bk},
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
	if err := positive(op, "sizes m, k, n", m, k, n); err != nil {
		return err
	}
	if m*k > maxU32Elems || k*n > maxU32Elems || m*n > maxU32Elems {
		return fmt.Errorf("gpu: %s: sizes %d, %d, %d exceed the 2³¹ index range", op, m, k, n)
	}
	if err := need(op, "input", a, m*k, F32); err != nil {
		return err
	}
	if err := need(op, "weight", b, k*n, bTypes...); err != nil {
		return err
	}
	if err := need(op, "output", c, m*n, F32); err != nil {
		return err
	}
	return distinct(op, map[string]*Buffer{"input": a, "weight": b, "output": c})
}

// Linear records y = x·Wᵀ: x F32 [rows, in], W F16 (or F32) [out, in] (the PyTorch
// weight layout), y F32 [rows, out], all row-major; products and sums in f32 (one fused
// multiply-add per term, in K order). Tiled GEMM: 64×64 or 128×128 output blocks per
// workgroup, operands staged in workgroup memory. Errors: non-positive sizes, buffers whose
// dtype or element count disagree with the sizes, or y aliasing an input.
func Linear(r *Recorder, x, w, y *Buffer, rows, in, out int) error {
	if err := checkGEMM("Linear", x, w, y, rows, in, out, F16, F32); err != nil {
		return err
	}
	return gemm(r, "Linear", false, Whole(x), Whole(w), Whole(y), w.dtype == F16, rows, in, out, true)
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
