package gpu

import "fmt"

const (
	gemmBM      = 64
	gemmBN      = 64
	gemmNaiveWG = 64
)

type gemmParams struct {
	TransB, BF16 bool
}

type gemmNaiveParams struct {
	TransB, BF16 bool
	WG           int
}

// gemm records C[m, n] = A[m, k]·B (B [n, k] when transB, else [k, n]; f32 or packed f16)
// on bindings already checked by the caller.
func gemm(r *Recorder, op string, naive bool, a, b, c Binding, bf16 bool, m, k, n int, transB bool) error {
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
	kn, err := r.d.Kernel(KernelSpec{Name: op, File: "linear.wgsl",
		Params:   gemmParams{TransB: transB, BF16: bf16},
		Bindings: []Access{Read, Read, ReadWrite}, Uniforms: 3})
	if err != nil {
		return err
	}
	gx, gy := (n+gemmBN-1)/gemmBN, (m+gemmBM-1)/gemmBM
	if gx > 65535 || gy > 65535 {
		return fmt.Errorf("gpu: %s: %d×%d output needs a %d×%d grid (max 65535 per dimension)", op, m, n, gx, gy)
	}
	return r.Dispatch(kn, [3]int{gx, gy, 1}, []uint32{uint32(m), uint32(n), uint32(k)}, a, b, c)
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
// weight layout), y F32 [rows, out], all row-major; products and sums in f32. Tiled GEMM
// (64×64 output blocks, BK 16, workgroup memory). Errors: non-positive sizes, buffers whose
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
