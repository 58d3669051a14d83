package gpu

import "fmt"

// gradColDotParams are grad_col_dot.wgsl's template parameters: binding indices (−1 when
// the buffer is absent) and the side-output mode.
type gradColDotParams struct {
	RS, Mask, S, Out, SO, Uni int
	SideAccum                 bool
}

// gradColDot records out[j] += Σ_rows a[row, j]·b[row, j]·rs[row] (rs nil: 1) for j < n,
// out[j] = 0 where mask[j] == 0 (mask nil: no mask), and, when so is not nil,
// so[row, j] = a[row, j]·s[j] (+= when sideAccum). a, b, so F32 [rows, n]; rs F32 [rows];
// s, out F32 [n]; mask U32 [n]. Buffers are checked by the caller.
func gradColDot(r *Recorder, op string, a, b, rs, mask, s, out, so *Buffer, rows, n int, sideAccum bool) error {
	binds := []Binding{Whole(a), Whole(b)}
	access := []Access{Read, Read}
	idx := func(buf *Buffer, acc Access) int {
		if buf == nil {
			return -1
		}
		binds = append(binds, Whole(buf))
		access = append(access, acc)
		return len(binds) - 1
	}
	if (s == nil) != (so == nil) {
		return fmt.Errorf("gpu: %s: side output needs both s and so", op)
	}
	var pr gradColDotParams
	pr.RS = idx(rs, Read)
	pr.Mask = idx(mask, Read)
	pr.S = idx(s, Read)
	pr.Out = idx(out, ReadWrite)
	pr.SO = idx(so, ReadWrite)
	pr.Uni = len(binds)
	pr.SideAccum = sideAccum && so != nil
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "grad_col_dot.wgsl", Params: pr, Bindings: access, Uniforms: 2})
	if err != nil {
		return err
	}
	g, err := Grid1D((n + 63) / 64)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	return r.Dispatch(k, g, []uint32{uint32(rows), uint32(n)}, binds...)
}
