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
	SharedA                   bool
	RS, Mask, S, Out, SO, Uni int
	C2, S2, Out2              int
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
	return colDot(r, op, colDotArgs{a: a, b: b, rs: rs, mask: mask, s: s, out: out, so: so, sideAccum: sideAccum}, rows, n)
}

// gradColDot2 records gradColDot for the two paths of a BLR layer in one pass, loading each
// element of their shared operand once: out0[j] += Σ_rows a·b0 and out1[j] += Σ_rows a·b1
// when sharedA (dh: a = dy, b_p = c_p), else out0 += Σ a0·b and out1 += Σ a1·b (dg: a_p =
// dxg_p, b = x), the latter with, when so is not nil, so[row, j] = a0·s0[j] + a1·s1[j] (dx
// of both paths). Each column's sums are added in the order of two gradColDot calls (the
// second with sideAccum), so the results are the same bits. Buffers are checked by the
// caller.
func gradColDot2(r *Recorder, op string, sharedA bool, a, b, c2, s0, s1, out0, out1, so *Buffer, rows, n int) error {
	if (s0 == nil) != (so == nil) || (s1 == nil) != (so == nil) || (so != nil && sharedA) {
		return fmt.Errorf("gpu: %s: a side output needs s0, s1 and so, and paths that share b", op)
	}
	return colDot(r, op, colDotArgs{a: a, b: b, c2: c2, s: s0, s2: s1, out: out0, out2: out1, so: so, sharedA: sharedA}, rows, n)
}

// colDotArgs are the buffers and modes of one grad_col_dot.wgsl pass (gradColDot,
// gradColDot2); nil buffers are absent.
type colDotArgs struct {
	a, b, rs, mask, s, out, so *Buffer
	c2, s2, out2               *Buffer
	sideAccum, sharedA         bool
}

// colDot records the "dot" stage and, for rows beyond one chunk, the "reduce" stage of each
// output.
func colDot(r *Recorder, op string, x colDotArgs, rows, n int) error {
	colBlocks := (n + 63) / 64
	chunks := (rows + gradColDotChunk - 1) / gradColDotChunk
	if colBlocks > 65535 || chunks > 65535 {
		return fmt.Errorf("gpu: %s: %d rows × %d columns exceed the 65535×65535 grid", op, rows, n)
	}
	partial := chunks > 1
	out, out2 := x.out, x.out2
	if partial {
		var err error
		if out, err = r.Temp(op+" partial sums", F32, chunks, n); err != nil {
			return err
		}
		if x.out2 != nil {
			if out2, err = r.Temp(op+" partial sums, path 1", F32, chunks, n); err != nil {
				return err
			}
		}
	}
	binds := []Binding{Whole(x.a), Whole(x.b)}
	access := []Access{Read, Read}
	idx := func(buf *Buffer, acc Access) int {
		if buf == nil {
			return -1
		}
		binds = append(binds, Whole(buf))
		access = append(access, acc)
		return len(binds) - 1
	}
	pr := gradColDotParams{Stage: "dot", Chunk: gradColDotChunk, Partial: partial, SideAccum: x.sideAccum && x.so != nil, SharedA: x.sharedA}
	pr.RS = idx(x.rs, Read)
	pr.Mask = -1
	if !partial {
		pr.Mask = idx(x.mask, Read)
	}
	pr.S = idx(x.s, Read)
	pr.Out = idx(out, ReadWrite)
	pr.SO = idx(x.so, ReadWrite)
	pr.C2 = idx(x.c2, Read)
	pr.S2 = idx(x.s2, Read)
	pr.Out2 = idx(out2, ReadWrite)
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
	for _, red := range []struct{ part, out *Buffer }{{out, x.out}, {out2, x.out2}} {
		if red.out == nil {
			continue
		}
		binds, access = []Binding{Whole(red.part)}, []Access{Read}
		rp := gradColDotParams{Stage: "reduce", Chunk: gradColDotChunk, RS: -1, S: -1, SO: -1, C2: -1, S2: -1, Out2: -1}
		rp.Mask = idx(x.mask, Read)
		rp.Out = idx(red.out, ReadWrite)
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
	}
	return nil
}
