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
	// Stage "windows": NW windows per dispatch, each 2 uniform views (a, b) or, with Two,
	// 3 (and c2) of NV4 vec4s; W rows per window but Last in the dispatch's last. The row counts
	// are constants, not kernel parameters: lavapipe 22.3 specializes a shader on the
	// parameters its loops compare with ("uniform inlining"), and with the parameters in
	// a uniform block after others, its pipeline creation wrote out of bounds (valgrind:
	// an invalid write in libvulkan_lvp under vkCreateComputePipelines; a crash every few
	// runs of TestGradColDot).
	NW, NV4, W, Last int
	Two              bool
	// Stage "reduce4": the reductions it adds up, each its binding indices (SegList: the
	// first NSegs; an array, so that the parameters stay comparable, a cheap cache key).
	Segs  [maxColSegs]colSegBinds
	NSegs int
}

// maxColSegs is the most reductions one "reduce4" dispatch adds up (BLRBackward's two paths
// need 6).
const maxColSegs = 8

// SegList is the segments of stage "reduce4" (the template ranges over it).
func (p gradColDotParams) SegList() []colSegBinds { return p.Segs[:p.NSegs] }

// colSegBinds are the binding indices of one segment of stage "reduce4": its partial sums,
// its mask (−1: none) and its output.
type colSegBinds struct{ Part, Mask, Out int }

// colReduce is a pending second stage of a column reduction (stage "reduce4"): the chunks'
// sums part [chunks, n] (a recorder temporary), to be added in chunk order into out (f32
// [n]), masked by mask (U32 [n]) when not nil.
type colReduce struct {
	part, mask, out *Buffer
	n, chunks       int
}

// colReduceBatchOff, set by tests (SetColReduceBatch), makes BLRBackward record each
// column reduction's second stage right after its first (no colReduces).
var colReduceBatchOff bool

// colReduceLimit, set by tests (SetColReduceLimit), caps the storage bindings a
// colReduces.flush dispatch takes (0: the device's limit), so that tests on devices with many
// reach the split into several dispatches.
var colReduceLimit int

// colReduces collects the second stages of column reductions so that several run as one
// dispatch (flush): a launcher of several reductions (BLRBackward: dh, dℓ and dg per path)
// passes it to gradColDotDeferred and flushes it once its last reduction is recorded. The
// outputs are not final until the flush, so nothing recorded in between may read them.
// Each column's sums keep their order: the same bits as one dispatch per reduction.
type colReduces struct{ segs []colReduce }

// flush records the pending second stages, as few dispatches as the device's storage
// bindings per stage allow (each segment binds two or three buffers), named op, and
// empties the list. Errors: those of Kernel and Dispatch (nothing left recorded).
func (p *colReduces) flush(r *Recorder, op string) error {
	mark := len(r.ops)
	limit := int(r.d.limits.MaxStorageBuffersPerShaderStage)
	if colReduceLimit > 0 {
		limit = colReduceLimit
	}
	for first := 0; first < len(p.segs); {
		var bl bindList
		pr := gradColDotParams{Stage: "reduce4", RS: -1, Mask: -1, S: -1, Out: -1, SO: -1, C2: -1, S2: -1, Out2: -1}
		var uni []uint32
		blocks := 0
		last := first
		for ; last < len(p.segs) && pr.NSegs < maxColSegs; last++ {
			g := p.segs[last]
			need := 2
			if g.mask != nil {
				need = 3
			}
			if pr.NSegs > 0 && len(bl.binds)+need > limit {
				break
			}
			sb := &pr.Segs[pr.NSegs]
			sb.Part = bl.add(g.part, Read)
			sb.Mask = bl.add(g.mask, Read)
			sb.Out = bl.add(g.out, ReadWrite)
			pr.NSegs++
			uni = append(uni, uint32(g.n/4), uint32(g.chunks), uint32(blocks), 0)
			blocks += (g.n + 63) / 64
		}
		pr.Uni = len(bl.binds)
		k, err := r.d.Kernel(KernelSpec{Name: op, File: "grad_col_dot.wgsl", Params: pr, Bindings: bl.access, Uniforms: len(uni)})
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		g, err := Grid1D(blocks)
		if err != nil {
			r.ops = r.ops[:mark]
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		if err := r.Dispatch(k, g, uni, bl.binds...); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		var flops, bytes float64 // Cost sets the dispatch's totals: one call for all segments
		for _, s := range p.segs[first:last] {
			flops += float64(s.chunks * s.n)
			bytes += 4*float64(s.chunks*s.n) + 8*float64(s.n)
		}
		r.Cost(flops, bytes)
		first = last
	}
	p.segs = p.segs[:0]
	return nil
}

// gradColDot records out[j] += Σ_rows a[row, j]·b[row, j]·rs[row] (rs nil: 1) for j < n,
// out[j] = 0 where mask[j] == 0 (mask nil: no mask), and, when so is not nil,
// so[row, j] = a[row, j]·s[j] (+= when sideAccum). a, b, so F32 [rows, n]; rs F32 [rows];
// s, out F32 [n]; mask U32 [n]. Buffers are checked by the caller. Rows beyond one chunk
// are reduced per chunk into a scratch buffer and added in a second dispatch (stage
// "reduce4" on GPUs, which gradColDotDeferred can leave to a colReduces batch).
func gradColDot(r *Recorder, op string, a, b, rs, mask, s, out, so *Buffer, rows, n int, sideAccum bool) error {
	return gradColDotDeferred(r, op, nil, a, b, rs, mask, s, out, so, rows, n, sideAccum)
}

// gradColDotDeferred is gradColDot leaving its second stage, where it takes stage "reduce4",
// in pend (colReduces) instead of recording it: out holds its sums only after pend.flush.
// With pend nil it is gradColDot.
func gradColDotDeferred(r *Recorder, op string, pend *colReduces, a, b, rs, mask, s, out, so *Buffer, rows, n int, sideAccum bool) error {
	if (s == nil) != (so == nil) {
		return fmt.Errorf("gpu: %s: side output needs both s and so", op)
	}
	return colDot(r, op, colDotArgs{a: a, b: b, rs: rs, mask: mask, s: s, out: out, so: so, sideAccum: sideAccum, pend: pend}, rows, n)
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
	pend                       *colReduces // stage "reduce4" deferred to it (gradColDotDeferred)
}

// colDotForced, set by tests (SetColDotForm), makes colDot take one form where it applies:
// "windows", "dot4" or "dot" ("dot" always applies); "" lets colDot choose.
var colDotForced string

// colDot4Dispatches counts the stage "dot4" dispatches recorded (tests check that a forced
// form ran).
var colDot4Dispatches int

// colDot records the window form where colDotWindows plans one (CPU adapters), else, on GPUs,
// stage "dot4" where n is a multiple of 4 and one path is reduced, else stage "dot"; "dot4"
// and "dot" add, for rows beyond one chunk, the chunks' sums in a second stage per output
// ("reduce4"'s recorded at once, or left in x.pend).
// CPU adapters keep "dot" where the window form does not apply, so that gradColDot2 (always
// "dot" there) gives two gradColDot calls' bits.
func colDot(r *Recorder, op string, x colDotArgs, rows, n int) error {
	f := colDotForced
	if f == "" || f == "windows" {
		if w, ok := r.d.colDotWindows(rows, n, x); ok {
			return colDotWin(r, op, x, w, rows, n)
		}
	}
	if (f == "dot4" || f == "" && !r.d.info.CPU) && n%4 == 0 && x.c2 == nil {
		colDot4Dispatches++
		return colDotStages(r, op, x, rows, n, "dot4", 128, colDot4Chunk(rows, n), "reduce4")
	}
	return colDotStages(r, op, x, rows, n, "dot", 64, gradColDotChunk, "reduce")
}

// colDot4Chunk is stage "dot4"'s chunk for rows × n operands: the most rows, from 256 down
// to 32, that still give the grid 1,024 workgroups (8 of 256 threads on each of an H100's
// 132 SMs), so that enough loads are in flight to reach the memory's bandwidth.
func colDot4Chunk(rows, n int) int {
	blocks := (n + 127) / 128
	c := 256
	for c > 32 && blocks*((rows+c-1)/c) < 1024 {
		c /= 2
	}
	return c
}

// colDotStages records a column-reduction stage (stage "dot": colWidth 64 columns a
// workgroup; "dot4": 128) over chunks of chunk rows and, where there is more than one chunk,
// the stage second ("reduce" or "reduce4": 64 columns a workgroup) per output; a "reduce4"
// goes to x.pend when it is set (flushed by the caller).
func colDotStages(r *Recorder, op string, x colDotArgs, rows, n int, stage string, colWidth, chunk int, second string) error {
	colBlocks := (n + colWidth - 1) / colWidth
	chunks := (rows + chunk - 1) / chunk
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
	bl := bindList{binds: []Binding{Whole(x.a), Whole(x.b)}, access: []Access{Read, Read}}
	idx := bl.add
	pr := gradColDotParams{Stage: stage, Chunk: chunk, Partial: partial, SideAccum: x.sideAccum && x.so != nil, SharedA: x.sharedA}
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
	pr.Uni = len(bl.binds)
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "grad_col_dot.wgsl", Params: pr, Bindings: bl.access, Uniforms: 3})
	if err != nil {
		return err
	}
	uni := []uint32{uint32(rows), uint32(n), uint32(chunks)}
	mark := len(r.ops)
	if err := r.Dispatch(k, [3]int{colBlocks, chunks, 1}, uni, bl.binds...); err != nil {
		return err
	}
	elems := float64(rows) * float64(n)
	outs, flops := 1.0, 2*elems
	bytes := 8 * elems // a, b
	if x.c2 != nil {
		bytes += 4 * elems
		outs, flops = 2, 4*elems
	}
	if x.so != nil {
		bytes += 4 * elems
		if pr.SideAccum {
			bytes += 4 * elems
		}
	}
	if partial {
		bytes += outs * 4 * float64(chunks*n)
	} else {
		bytes += outs * 8 * float64(n)
	}
	r.Cost(flops, bytes)
	if !partial {
		return nil
	}
	if second == "reduce4" { // x.out2 is nil: stage "dot4" reduces one path
		seg := colReduce{part: out, mask: x.mask, out: x.out, n: n, chunks: chunks}
		if x.pend != nil {
			x.pend.segs = append(x.pend.segs, seg)
			return nil
		}
		one := colReduces{segs: []colReduce{seg}}
		if err := one.flush(r, op+".reduce"); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		return nil
	}
	for _, red := range []struct{ part, out *Buffer }{{out, x.out}, {out2, x.out2}} {
		if red.out == nil {
			continue
		}
		bl = bindList{binds: []Binding{Whole(red.part)}, access: []Access{Read}}
		rp := gradColDotParams{Stage: second, Chunk: chunk, RS: -1, S: -1, SO: -1, C2: -1, S2: -1, Out2: -1}
		rp.Mask = bl.add(x.mask, Read)
		rp.Out = bl.add(red.out, ReadWrite)
		rp.Uni = len(bl.binds)
		kr, err := r.d.Kernel(KernelSpec{Name: op + ".reduce", File: "grad_col_dot.wgsl", Params: rp, Bindings: bl.access, Uniforms: 3})
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		g, err := Grid1D((n + 63) / 64)
		if err != nil {
			r.ops = r.ops[:mark]
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		if err := r.Dispatch(kr, g, uni, bl.binds...); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		r.Cost(float64(chunks*n), 4*float64(chunks*n)+8*float64(n))
	}
	return nil
}

// bindList collects a kernel's bindings and their access kinds in binding order.
type bindList struct {
	binds  []Binding
	access []Access
}

// add appends the whole of buf with access acc and returns its binding index; a nil buf is
// absent: −1, nothing appended.
func (l *bindList) add(buf *Buffer, acc Access) int {
	if buf == nil {
		return -1
	}
	l.binds = append(l.binds, Whole(buf))
	l.access = append(l.access, acc)
	return len(l.binds) - 1
}

// colDotWindowPlan is the plan of colDot's window form: W rows per window, views of V bytes, NW
// windows per dispatch.
type colDotWindowPlan struct{ W, V, NW int }

// view returns where window i of a rows × n operand is bound: the byte offset of its view (a
// multiple of ualign, the view within the operand's 4·rows·n bytes) and the vec4 index of the
// window's first element within the view.
func (w colDotWindowPlan) view(i, rows, n int, ualign uint64) (off, base uint64) {
	start, l := uint64(4*i*w.W*n), uint64(4*rows*n)
	off = min(start, l-uint64(w.V)) &^ (ualign - 1)
	return off, (start - off) / 16
}

// colDotWindows plans colDot's window form (stage "windows" of grad_col_dot.wgsl), or ok
// false where it does not apply: not a CPU adapter (Device.UniformViews), n not a multiple of
// 4, a row of more than 16,376 columns, an operand not at an offset the uniform views allow,
// or fewer than 3 uniform bindings per stage beyond the kernel parameters.
//
// Why: on lavapipe a storage load costs a loop over the lanes, one scalar load with its
// bounds and mask tests and a store-forwarded insert per lane (~20 cycles a lane), and the
// column reductions do nothing but load: three loads per multiply-add. A uniform view of at
// most 64 KiB is loaded with a gather instead, ~3.6× cheaper per element (measured on the
// tiny step's [256, 768] paired dh: 2.3–3.5 → 0.93 ms). So the rows go in windows of W rows,
// each bound as uniform views of a, b (and c2), up to NW = 4 windows per dispatch; a dispatch
// adds its windows' column sums, in order, to out: no scratch, no second stage. The sums are
// deterministic but grouped otherwise than stage "dot" (other bits than GPUs').
func (d *Device) colDotWindows(rows, n int, x colDotArgs) (colDotWindowPlan, bool) {
	if !d.UniformViews() || n%4 != 0 || rows < 1 {
		return colDotWindowPlan{}, false
	}
	ualign := int(d.limits.MinUniformBufferOffsetAlignment)
	maxV := int(d.limits.MaxUniformBufferBindingSize) &^ 15
	k := 2
	if x.c2 != nil {
		k = 3
	}
	nw := (int(d.limits.MaxUniformBuffersPerShaderStage) - 1) / k
	if ualign < 16 || ualign > 256 || maxV < 4*n+ualign || nw < 1 {
		return colDotWindowPlan{}, false
	}
	for _, b := range []*Buffer{x.a, x.b, x.c2} {
		if b == nil {
			continue
		}
		if _, off := b.root(); off%uint64(ualign) != 0 {
			return colDotWindowPlan{}, false
		}
	}
	l := 4 * rows * n
	if l <= maxV {
		return colDotWindowPlan{W: rows, V: l, NW: 1}, true
	}
	// The last window's view ends at byte l, so l − V must be on the alignment: V is maxV
	// less what brings l − maxV up to the next multiple of it.
	v := maxV - (ualign-(l-maxV)%ualign)%ualign
	w := (v - ualign) / (4 * n)
	if w < 1 {
		return colDotWindowPlan{}, false
	}
	nwin := (rows + w - 1) / w
	return colDotWindowPlan{W: w, V: v, NW: min(nw, nwin, 4)}, true
}

// colDotWin records colDot in the window form planned by colDotWindows.
func colDotWin(r *Recorder, op string, x colDotArgs, w colDotWindowPlan, rows, n int) error {
	nwin := (rows + w.W - 1) / w.W
	if (n/4+7)/8 > 65535 {
		return fmt.Errorf("gpu: %s: %d columns exceed the grid", op, n)
	}
	ualign := uint64(r.d.limits.MinUniformBufferOffsetAlignment)
	mark := len(r.ops)
	for first := 0; first < nwin; first += w.NW {
		nw := min(w.NW, nwin-first)
		pr := gradColDotParams{Stage: "windows", SideAccum: x.sideAccum && x.so != nil, SharedA: x.sharedA,
			NW: nw, NV4: w.V / 16, W: w.W, Last: min(w.W, rows-(first+nw-1)*w.W), Two: x.c2 != nil, C2: -1}
		var bl bindList
		uni := []uint32{uint32(n / 4)}
		for i := first; i < first+nw; i++ {
			off, base := w.view(i, rows, n, ualign)
			for _, b := range []*Buffer{x.a, x.b, x.c2} {
				if b != nil {
					bl.binds = append(bl.binds, Binding{Buf: b, Offset: off, Size: uint64(w.V)})
					bl.access = append(bl.access, Uniform)
				}
			}
			uni = append(uni, uint32(base), uint32(i*w.W))
		}
		idx := bl.add
		pr.RS = idx(x.rs, Read)
		pr.S = idx(x.s, Read)
		pr.S2 = idx(x.s2, Read)
		pr.Mask = idx(x.mask, Read)
		pr.Out = idx(x.out, ReadWrite)
		pr.Out2 = idx(x.out2, ReadWrite)
		pr.SO = idx(x.so, ReadWrite)
		pr.Uni = len(bl.binds)
		k, err := r.d.Kernel(KernelSpec{Name: op, File: "grad_col_dot.wgsl", Params: pr, Bindings: bl.access, Uniforms: len(uni)})
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		if err := r.Dispatch(k, [3]int{(n/4 + 7) / 8, 1, 1}, uni, bl.binds...); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	return nil
}
