package gpu

import "fmt"

// gradColDotChunk is the number of rows one "dot" workgroup reduces; more rows are split
// into chunks reduced in parallel and then added in order (stage "reduce").
const gradColDotChunk = 256

// gradColDotParams are grad_col_dot.wgsl's template parameters: the stage, the chunk size,
// binding indices (−1 when the buffer is absent) and the modes.
type gradColDotParams struct {
	Stage                     string
	Chunk                     int
	Partial, SideAccum        bool
	RS, Mask, S, Out, SO, Uni int
}

// gradColDot records out[j] += Σ_rows a[row, j]·b[row, j]·rs[row] (rs nil: 1) for j < n,
// out[j] = 0 where mask[j] == 0 (mask nil: no mask), and, when so is not nil,
// so[row, j] = a[row, j]·s[j] (+= when sideAccum). a, b, so F32 [rows, n]; rs F32 [rows];
// s, out F32 [n]; mask U32 [n]. Buffers are checked by the caller. Rows beyond one chunk
// are reduced per chunk into a scratch buffer and added in a second dispatch.
func gradColDot(r *Recorder, op string, a, b, rs, mask, s, out, so *Buffer, rows, n int, sideAccum bool) error {
	if (s == nil) != (so == nil) {
		return fmt.Errorf("gpu: %s: side output needs both s and so", op)
	}
	colBlocks := (n + 63) / 64
	chunks := (rows + gradColDotChunk - 1) / gradColDotChunk
	if colBlocks > 65535 || chunks > 65535 {
		return fmt.Errorf("gpu: %s: %d rows × %d columns exceed the 65535×65535 grid", op, rows, n)
	}
	partial := chunks > 1
	var scratch *Buffer
	if partial {
		var err error
		if scratch, err = r.Temp(op+" partial sums", F32, chunks, n); err != nil {
			return err
		}
	}
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
	pr := gradColDotParams{Stage: "dot", Chunk: gradColDotChunk, Partial: partial, SideAccum: sideAccum && so != nil}
	pr.RS = idx(rs, Read)
	pr.Mask = -1
	if !partial {
		pr.Mask = idx(mask, Read)
	}
	pr.S = idx(s, Read)
	if partial {
		pr.Out = idx(scratch, ReadWrite)
	} else {
		pr.Out = idx(out, ReadWrite)
	}
	pr.SO = idx(so, ReadWrite)
	pr.Uni = len(binds)
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "grad_col_dot.wgsl", Params: pr, Bindings: access, Uniforms: 3})
	if err != nil {
		return err
	}
	uni := []uint32{uint32(rows), uint32(n), uint32(chunks)}
	mark := len(r.ops)
	if err := r.Dispatch(k, [3]int{colBlocks, chunks, 1}, uni, binds...); err != nil {
		return err
	}
	if !partial {
		return nil
	}
	binds, access = []Binding{Whole(scratch)}, []Access{Read}
	rp := gradColDotParams{Stage: "reduce", Chunk: gradColDotChunk, RS: -1, S: -1, SO: -1}
	rp.Mask = idx(mask, Read)
	rp.Out = idx(out, ReadWrite)
	rp.Uni = len(binds)
	kr, err := r.d.Kernel(KernelSpec{Name: op + ".reduce", File: "grad_col_dot.wgsl", Params: rp, Bindings: access, Uniforms: 3})
	if err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	g, err := Grid1D(colBlocks)
	if err != nil {
		r.ops = r.ops[:mark]
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	if err := r.Dispatch(kr, g, uni, binds...); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
