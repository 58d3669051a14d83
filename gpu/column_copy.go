package gpu

import "fmt"

const columnCopyWG = 256

// ColumnCopy records dst[row, dstOff+j] = src[row, srcOff+j] for every row < rows and
// j < n: a block of n columns copied between two row-major F32 matrices src [rows, srcCols]
// and dst [rows, dstCols]; the other columns of dst are not written. It splits a matrix into
// column blocks (the q, k and v channels of a GatedDeltaNet's in_proj_qkv output) and, called
// once per block, assembles one (their gradients, the backward). A pure copy (exact).
// Host reference: the loop above (a copy has no arithmetic to compare).
// Errors: non-positive rows, srcCols, dstCols or n; negative offsets; a block beyond either
// matrix's columns (srcOff+n > srcCols or dstOff+n > dstCols); dtype or length mismatches;
// src and dst the same buffer; sizes beyond the 2³¹ index range; or any Dispatch error.
func ColumnCopy(r *Recorder, src, dst *Buffer, rows, srcCols, srcOff, dstCols, dstOff, n int) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "ColumnCopy"
	if err := positive(op, "rows, srcCols, dstCols, n", rows, srcCols, dstCols, n); err != nil {
		return err
	}
	if srcOff < 0 || dstOff < 0 {
		return fmt.Errorf("gpu: %s: offsets srcOff = %d, dstOff = %d must be ≥ 0", op, srcOff, dstOff)
	}
	if srcOff+n > srcCols {
		return fmt.Errorf("gpu: %s: columns [%d, %d) are beyond src's %d columns", op, srcOff, srcOff+n, srcCols)
	}
	if dstOff+n > dstCols {
		return fmt.Errorf("gpu: %s: columns [%d, %d) are beyond dst's %d columns", op, dstOff, dstOff+n, dstCols)
	}
	if uint64(rows)*uint64(max(srcCols, dstCols)) > maxU32Elems {
		return fmt.Errorf("gpu: %s: rows·cols = %d·%d exceeds %d", op, rows, max(srcCols, dstCols), maxU32Elems)
	}
	if err := need(op, "src", src, rows*srcCols, F32); err != nil {
		return err
	}
	if err := need(op, "dst", dst, rows*dstCols, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"src": src, "dst": dst}); err != nil {
		return err
	}
	k, err := r.d.Kernel(KernelSpec{
		Name: op, File: "column_copy.wgsl", Params: struct{ WG int }{columnCopyWG},
		Bindings: []Access{Read, ReadWrite}, Uniforms: 6,
	})
	if err != nil {
		return err
	}
	total := rows * n
	g, err := Grid1D((total + columnCopyWG - 1) / columnCopyWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	return r.Dispatch(k, g, []uint32{uint32(total), uint32(n), uint32(srcCols), uint32(srcOff), uint32(dstCols), uint32(dstOff)},
		Whole(src), Whole(dst))
}

// ColumnBlock is one of the consecutive column blocks of a row-major F32 matrix [rows, C]
// held in separate buffers: Buf is F32 [rows, Cols] and holds the matrix's columns
// [c, c+Cols), c the sum of the earlier blocks' Cols (the GatedDeltaNet's q, k and v channels
// of its conv, each in its own buffer: CausalConv1dSiLUSplit, CausalConv1dSiLUBackwardSplit).
type ColumnBlock struct {
	Buf  *Buffer
	Cols int
}

// columnBlocksCols is the number of columns of the matrix the blocks hold (Σ Cols).
func columnBlocksCols(blocks []ColumnBlock) int {
	c := 0
	for _, b := range blocks {
		c += b.Cols
	}
	return c
}

// checkColumnBlocks checks 1 to 3 blocks of positive Cols, each buffer F32 [rows, Cols],
// adds them to all (named name, or name[i] where there are several) for the caller's
// aliasing check, and returns the first two blocks' column counts (c1 0 with one block) and
// the blocks' bindings in order.
func checkColumnBlocks(op, name string, blocks []ColumnBlock, rows int, all map[string]*Buffer) (c0, c1 int, binds []Binding, err error) {
	if len(blocks) < 1 || len(blocks) > 3 {
		return 0, 0, nil, fmt.Errorf("gpu: %s: %s in %d column blocks, want 1 to 3", op, name, len(blocks))
	}
	for i, b := range blocks {
		label := name
		if len(blocks) > 1 {
			label = fmt.Sprintf("%s[%d]", name, i)
		}
		if b.Cols < 1 {
			return 0, 0, nil, fmt.Errorf("gpu: %s: %s has %d columns, want ≥ 1", op, label, b.Cols)
		}
		if err := need(op, label, b.Buf, rows*b.Cols, F32); err != nil {
			return 0, 0, nil, err
		}
		all[label] = b.Buf
		binds = append(binds, Whole(b.Buf))
	}
	c0 = blocks[0].Cols
	if len(blocks) > 1 {
		c1 = blocks[1].Cols
	}
	return c0, c1, binds, nil
}
