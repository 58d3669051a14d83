package host

import (
	"fmt"
	"math"
)

// MatMulAbs is the float64 product C = A·B, A [m, k] row-major and B [n, k] when transB,
// else [k, n], each element summed in k order, with per element the magnitude
// Σ_l |a_il·b_lj| that bounds an f32 GEMM's error: k fused multiply-adds in f32 give
// |err| ≤ (k+1)·u·Σ|a b| (recursive summation, operands exact in f32 or f16). It is the
// reference of the GPU GEMM tests where no model op is (LinearOp is the transB case).
// Errors: non-positive sizes or slices of the wrong length.
func MatMulAbs(a []float64, m, k int, b []float64, n int, transB bool) (c, abs []float64, err error) {
	if m <= 0 || k <= 0 || n <= 0 {
		return nil, nil, fmt.Errorf("host.MatMulAbs: sizes m = %d, k = %d, n = %d must be positive", m, k, n)
	}
	if err := checkLen("MatMulAbs", "a", a, m*k, "m·k"); err != nil {
		return nil, nil, err
	}
	if err := checkLen("MatMulAbs", "b", b, k*n, "k·n"); err != nil {
		return nil, nil, err
	}
	c = make([]float64, m*n)
	abs = make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, sa float64
			for l := 0; l < k; l++ {
				bv := b[l*n+j]
				if transB {
					bv = b[j*k+l]
				}
				s += a[i*k+l] * bv
				sa += math.Abs(a[i*k+l] * bv)
			}
			c[i*n+j], abs[i*n+j] = s, sa
		}
	}
	return c, abs, nil
}
