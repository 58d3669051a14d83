package gpu

import "fmt"

// ColumnSumSquares records out[j] += Σ_{t<rows} x[t, j]² for j < n: the per-feature sums of
// squares of the first rows rows of the row-major F32 matrix x (rows of n values; it may hold
// more rows, such as a work buffer's padding windows, which are not read), added to out F32
// [n] (zero it first for the sums alone). It is the column reduction of grad_col_dot.wgsl
// with a = b = x (the form gpu picks for the device; deterministic), f32 sums. The
// calibration statistics of a teacher pass (compress.Calibration's sums of squares) are
// these sums. Host reference: the loop above in float64. Errors: non-positive sizes, sizes
// beyond the 2³¹ index range, x not F32 or holding fewer than rows·n values or not whole
// rows of n, out not F32 [n], x and out the same buffer, or any Dispatch error.
func ColumnSumSquares(r *Recorder, x, out *Buffer, rows, n int) error {
	const op = "ColumnSumSquares"
	if err := checkRowsOf(r, op, x, rows, n); err != nil {
		return err
	}
	if err := need(op, "out", out, n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "out": out}); err != nil {
		return err
	}
	return gradColDot(r, op, x, x, nil, nil, nil, out, nil, rows, n, false)
}

// Gram records out = xᵀ·x, out[i, j] = Σ_{t<rows} x[t, i]·x[t, j], over the first rows rows
// of the row-major F32 matrix x (rows of n values; more rows may follow and are not read),
// into out F32 [n, n] (overwritten): the Gram matrix of n features over rows tokens. The rows
// are transposed into a borrowed [n, rows] buffer (Transpose) and multiplied by themselves
// with the f32 GEMM of MatMul (C = A·Aᵀ, depth rows; never tensor cores, which would round
// the operands to f16): each output is one fma chain over the rows in order, and
// x_ti·x_tj = x_tj·x_ti, so out is symmetric bit for bit. Cost 2·n²·rows flops and 8·n·rows
// bytes of scratch. Host reference: the sum above in float64 (compress.Calibration.Add).
// Errors: as ColumnSumSquares, out not F32 [n, n], n·rows beyond the 2³¹ index range, or any
// Dispatch error.
func Gram(r *Recorder, x, out *Buffer, rows, n int) error {
	const op = "Gram"
	if err := checkRowsOf(r, op, x, rows, n); err != nil {
		return err
	}
	if uint64(n)*uint64(n) > maxU32Elems {
		return fmt.Errorf("gpu: %s: n·n = %d·%d exceeds %d", op, n, n, maxU32Elems)
	}
	if err := need(op, "out", out, n*n, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"x": x, "out": out}); err != nil {
		return err
	}
	xt, done, err := r.Borrow("Gram xᵀ", F32, n, rows)
	if err != nil {
		return err
	}
	defer done()
	mark := len(r.ops)
	if err := transpose(r, Binding{Buf: x, Size: uint64(4 * rows * n)}, Whole(xt), rows, n); err != nil {
		return err
	}
	if err := gemm(r, op, false, Whole(xt), Whole(xt), Whole(out), false, n, rows, n, true); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}

// checkRowsOf checks the recorder and that x is an F32 matrix of whole rows of n values
// holding at least rows of them, within the 2³¹ index range.
func checkRowsOf(r *Recorder, op string, x *Buffer, rows, n int) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := positive(op, "rows, n", rows, n); err != nil {
		return err
	}
	if uint64(rows)*uint64(n) > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·n = %d·%d exceeds %d", op, rows, n, maxU32Elems)
	}
	if err := need(op, "x", x, -1, F32); err != nil {
		return err
	}
	if x.numel < rows*n || x.numel%n != 0 {
		return fmt.Errorf("gpu: %s: x %v has %d elements, want whole rows of n = %d and at least rows = %d of them", op, x, x.numel, n, rows)
	}
	return nil
}
