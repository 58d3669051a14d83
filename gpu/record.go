package gpu

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// Binding is a byte range of a buffer bound to one storage binding of a kernel.
type Binding struct {
	Buf *Buffer
	// Offset is the first byte; it must be a multiple of the device's
	// minStorageBufferOffsetAlignment (256 on most GPUs, 32 on lavapipe).
	Offset uint64
	// Size is the number of bytes; 0 means from Offset to the end of the buffer.
	Size uint64
}

// Whole binds all of b.
func Whole(b *Buffer) Binding { return Binding{Buf: b} }

// StorageAlign is the alignment in bytes that Binding.Offset must respect on this device.
func (d *Device) StorageAlign() uint64 {
	a := uint64(d.limits.MinStorageBufferOffsetAlignment)
	if a == 0 {
		a = 256
	}
	return a
}

// Recorder batches many dispatches into one command buffer. Every Dispatch is checked in
// Go (sizes, bindings, limits, lifetimes) when it is recorded and again at Submit, so a
// mistake is an error, never a validation failure inside the driver (which would abort the
// process on this binding).
type Recorder struct {
	d      *Device
	ops    []dispatch
	temps  []*Buffer
	clears []*Buffer // reused temporaries to zero at the start of the submit
	// free holds the borrowed buffers their takers are done with, by byte size, for a later
	// Borrow of this recording.
	free map[uint64][]*Buffer
	done bool
}

type dispatch struct {
	k        *Kernel
	binds    []Binding
	uniforms []uint32
	groups   [3]uint32
	flops    float64 // arithmetic of the dispatch (Recorder.Cost), for the profile
	bytes    float64 // global-memory bytes it moves at least (Recorder.Cost)
}

// Begin starts recording. Record with launchers (or Dispatch), then Submit; a recorder that
// is dropped without Submit records nothing on the GPU.
func (d *Device) Begin() *Recorder { return &Recorder{d: d} }

// usable is the first check of every launcher: a nil recorder (or one from a nil device)
// is an error, not a panic.
func (r *Recorder) usable() error {
	if r == nil || r.d == nil {
		return errors.New("gpu: nil recorder")
	}
	return nil
}

// Device is the device the recorder submits to.
func (r *Recorder) Device() *Device { return r.d }

// rollback returns fail, which drops everything recorded after this call and returns its
// argument: a launcher of several dispatches returns fail(err) so that a failed call leaves
// the recorder as it was.
func (r *Recorder) rollback() (fail func(error) error) {
	mark := len(r.ops)
	return func(err error) error {
		r.ops = r.ops[:mark]
		return err
	}
}

// Len is the number of recorded dispatches.
func (r *Recorder) Len() int {
	if r == nil {
		return 0
	}
	return len(r.ops)
}

// Run records with fn and submits; if fn fails nothing is submitted (and the recorder's
// temporaries are handed back).
func (d *Device) Run(fn func(r *Recorder) error) error {
	r := d.Begin()
	if err := fn(r); err != nil {
		r.Discard()
		return err
	}
	return r.Submit()
}

// Grid1D returns a workgroup grid covering n workgroups with at most 65535 per dimension:
// (min(n, 65535), ceil(n/65535), 1). Shaders recover the linear index as
// wid.x + wid.y·nwg.x and must bounds-check it. Errors when n < 1 or n needs more than
// 65535² workgroups.
func Grid1D(n int) ([3]int, error) {
	const m = 65535
	if n < 1 {
		return [3]int{}, fmt.Errorf("gpu: grid of %d workgroups", n)
	}
	if n <= m {
		return [3]int{n, 1, 1}, nil
	}
	y := (n + m - 1) / m
	if y > m {
		return [3]int{}, fmt.Errorf("gpu: grid of %d workgroups exceeds 65535×65535", n)
	}
	return [3]int{m, y, 1}, nil
}

// dispatch1D records one dispatch of the kernel of spec over n workgroups (Grid1D): the
// pipeline from the device's cache, the grid, then Dispatch. Errors: those of Kernel, of
// Grid1D (prefixed with spec.Name) and of Dispatch.
func (r *Recorder) dispatch1D(spec KernelSpec, n int, uniforms []uint32, binds ...Binding) error {
	k, err := r.d.Kernel(spec)
	if err != nil {
		return err
	}
	g, err := Grid1D(n)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", spec.Name, err)
	}
	return r.Dispatch(k, g, uniforms, binds...)
}

// Dispatch records one dispatch of k over groups (workgroups per dimension, each 1..65535)
// with the storage bindings binds (in the kernel's binding order) and the u32 uniforms the
// kernel declares. Errors (nothing is recorded): a wrong number of bindings or uniforms, a
// nil/released/foreign buffer, a range outside its buffer, a misaligned offset, a binding
// larger than maxStorageBufferBindingSize, a buffer bound both read-only and read-write, or
// a grid dimension outside 1..65535.
func (r *Recorder) Dispatch(k *Kernel, groups [3]int, uniforms []uint32, binds ...Binding) error {
	if err := r.usable(); err != nil {
		return err
	}
	if r.done {
		return errors.New("gpu: dispatch on a submitted recorder")
	}
	if k == nil {
		return errors.New("gpu: dispatch of a nil kernel")
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if k.dev != d {
		return fmt.Errorf("gpu: %s: kernel belongs to another device", k.spec.Name)
	}
	if len(binds) != len(k.spec.Bindings) {
		return fmt.Errorf("gpu: %s: %d bindings given, kernel declares %d", k.spec.Name, len(binds), len(k.spec.Bindings))
	}
	if len(uniforms) != k.spec.Uniforms {
		return fmt.Errorf("gpu: %s: %d uniforms given, kernel declares %d", k.spec.Name, len(uniforms), k.spec.Uniforms)
	}
	var g [3]uint32
	for i, n := range groups {
		if n < 1 || uint32(n) > d.info.MaxGroupsPerDim || n > 65535 {
			return fmt.Errorf("gpu: %s: workgroups %v: dimension %d must be in 1..%d", k.spec.Name, groups, i, d.info.MaxGroupsPerDim)
		}
		g[i] = uint32(n)
	}
	bs := make([]Binding, len(binds))
	for i, b := range binds {
		if err := d.checkBinding(k, i, &b); err != nil {
			return err
		}
		bs[i] = b
	}
	// WebGPU's usage rule is per buffer, not per range: two views of one arena (Pack) count
	// as one buffer.
	for i := range bs {
		ri, _ := bs[i].Buf.root()
		for j := range bs {
			rj, _ := bs[j].Buf.root()
			if i != j && ri == rj && k.spec.Bindings[i] == ReadWrite && k.spec.Bindings[j] != ReadWrite {
				if bs[i].Buf == bs[j].Buf {
					return fmt.Errorf("gpu: %s: buffer %q bound read-write (binding %d) and read-only (binding %d) in one dispatch",
						k.spec.Name, bs[i].Buf.label, i, j)
				}
				return fmt.Errorf("gpu: %s: buffers %q (binding %d, read-write) and %q (binding %d, read-only) share arena %q, which one dispatch cannot bind both ways",
					k.spec.Name, bs[i].Buf.label, i, bs[j].Buf.label, j, ri.label)
			}
		}
	}
	r.ops = append(r.ops, dispatch{k: k, binds: bs, uniforms: append([]uint32(nil), uniforms...), groups: g})
	return nil
}

// Cost annotates the most recently recorded dispatch with its arithmetic (flops: floating
// point operations, an FMA counting 2) and the global-memory bytes it must move at least
// (each input read once, each output written once). The profiler sums them per kernel to
// report achieved TFLOP/s and GB/s (Profile). A recorder with no dispatch ignores it, so a
// launcher calls it right after its Dispatch succeeded.
func (r *Recorder) Cost(flops, bytes float64) {
	if len(r.ops) == 0 {
		return
	}
	op := &r.ops[len(r.ops)-1]
	op.flops, op.bytes = flops, bytes
}

func (d *Device) checkBinding(k *Kernel, i int, b *Binding) error {
	if err := d.checkBuffer(b.Buf); err != nil {
		return fmt.Errorf("gpu: %s: binding %d: %w", k.spec.Name, i, err)
	}
	buf := b.Buf
	if b.Offset%d.StorageAlign() != 0 {
		return fmt.Errorf("gpu: %s: binding %d (%q): offset %d not a multiple of %d", k.spec.Name, i, buf.label, b.Offset, d.StorageAlign())
	}
	if b.Offset >= buf.size {
		return fmt.Errorf("gpu: %s: binding %d (%q): offset %d beyond its %d bytes", k.spec.Name, i, buf.label, b.Offset, buf.size)
	}
	if b.Size == 0 {
		b.Size = buf.size - b.Offset
	}
	if b.Size%4 != 0 || b.Offset+b.Size > buf.size {
		return fmt.Errorf("gpu: %s: binding %d (%q): range [%d, +%d) outside its %d bytes or not a multiple of 4",
			k.spec.Name, i, buf.label, b.Offset, b.Size, buf.size)
	}
	if k.spec.Bindings[i] == Uniform {
		root, off := buf.root()
		ualign := uint64(d.limits.MinUniformBufferOffsetAlignment)
		switch {
		case !d.UniformViews():
			return fmt.Errorf("gpu: %s: binding %d (%q): uniform views of buffers need a CPU adapter", k.spec.Name, i, buf.label)
		case ualign == 0 || (off+b.Offset)%ualign != 0:
			return fmt.Errorf("gpu: %s: binding %d (%q): uniform view at byte %d of %q, not a multiple of minUniformBufferOffsetAlignment %d",
				k.spec.Name, i, buf.label, off+b.Offset, root.label, ualign)
		case b.Size > uint64(d.limits.MaxUniformBufferBindingSize):
			return fmt.Errorf("gpu: %s: binding %d (%q): uniform view of %d bytes exceeds maxUniformBufferBindingSize %d",
				k.spec.Name, i, buf.label, b.Size, d.limits.MaxUniformBufferBindingSize)
		}
	}
	if b.Size > d.info.MaxStorageBindingSize {
		return fmt.Errorf("gpu: %s: binding %d (%q): %d bytes exceed maxStorageBufferBindingSize %d; bind it in slices",
			k.spec.Name, i, buf.label, b.Size, d.info.MaxStorageBindingSize)
	}
	return nil
}

// Scratch reuse: a Recorder's temporaries go back to the device after Submit (or Discard)
// and the next Temp of the same byte size takes one instead of allocating (creating and
// freeing buffers cost about as much host time as the dispatches of a small step, and
// 0.2 s of a 1.06-s 0.8B step on the H200). Reused buffers are cleared on the GPU at the
// start of the submit that uses them. Only buffers up to scratchMaxBuffer are kept,
// DefaultScratchLimit bytes in all (SetScratchLimit); kept buffers count in MemStats and can
// raise a step's peak (0.8B: 6.67 → 7.09 GiB), but an allocation that would run out of
// memory (the driver's, or the NVG_GPU_MEMORY budget) frees them first (Device.FreeScratch),
// so they never make a run fail that would fit without them. The cap was 64 MiB until
// 2026-12-07: the 4B's recompute borrows c = [4096, 9728] f32 (160 MB) per path for gate
// and up, so every layer allocated and freed those — the likely cause of its step's 1.11 s
// of wall time for 0.995 s of GPU time on an H100, where the 0.8B, whose temporaries above
// 64 MiB are fewer and smaller (the delta rule's states, the KL's logits slices, the conv's
// gradients), shows no such gap. 512 MiB keeps them, within the same total — which can now
// be reached by large buffers, raising a step's reported peak by up to DefaultScratchLimit;
// with it the 4B step's gap was ~0.03 s (1,063 ms of GPU time, 1.097 s wall; H100,
// 2026-12-07, docs/bench/targets.md).
const scratchMaxBuffer = 512 << 20

// freedAheadLimit bounds the memory of buffers released while the work using them may still
// run: wgpu gives such a buffer's memory back only once that work completes, and the host
// records and submits layer after layer without waiting, so the released temporaries of
// every layer ahead of the GPU would hold memory nvg no longer counts (a 27B student step
// with sign training ran the H200 out of memory at 42 GiB counted). After a recorder's
// submit that brings the bytes released since the last wait above it, the host waits for
// the submission before that one (boundFreedAheadLocked), so the GPU still has the latest
// submit queued: waiting for all work left it idle while the host recorded the next layer
// (about 3 times per 0.8B step, each wait followed by fresh allocations).
// Tests: SetFreedAheadLimit.
var freedAheadLimit uint64 = 8 << 30

// DefaultScratchLimit is how many bytes of scratch buffers a device keeps for reuse unless
// SetScratchLimit says otherwise: 1 GiB.
const DefaultScratchLimit = 1 << 30

// SetScratchLimit caps the bytes of scratch buffers kept for reuse by Recorder.Temp (buffers
// of at most 512 MiB each; default DefaultScratchLimit) and frees what is kept now. 0 turns
// reuse off, for exact per-phase memory measurements.
func (d *Device) SetScratchLimit(bytes uint64) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scratchLimit = bytes
	d.freeScratchLocked()
}

// Temp returns a zero-filled scratch buffer owned by the recorder: it is handed back after
// Submit (or Discard), for a later Temp to reuse. Launchers use it for intermediate results
// and uploaded arguments. Errors: those of NewBuffer.
func (r *Recorder) Temp(label string, dtype DType, shape ...int) (*Buffer, error) {
	b, reused, err := r.temp("Temp", label, dtype, shape)
	if err != nil {
		return nil, err
	}
	if reused {
		r.clears = append(r.clears, b)
	}
	return b, nil
}

// Borrow returns a buffer of the shape that only the dispatches recorded until done is
// called may use. Its contents are stale (write it before reading it), and after done a later
// Borrow of the same byte size in this recording may hand it out again: dispatches run in
// recording order, and WebGPU orders each dispatch's accesses after the previous one's, so the
// next taker's writes follow this taker's reads. Like Temp's, the buffer goes back to the
// device at Submit or Discard; a buffer whose done is never called is a Temp without the zero
// fill. Launchers use it for intermediates that die within the call (BLRBackward's c, dt2,
// dxg and t1, BLRForward's t1), so that a submit of many such calls holds one set of them,
// not one per call. done may be called more than once. Errors: those of Temp.
func (r *Recorder) Borrow(label string, dtype DType, shape ...int) (b *Buffer, done func(), err error) {
	n, size, err := r.tempSpec("Borrow", label, dtype, shape)
	if err != nil {
		return nil, nil, err
	}
	if list := r.free[size]; len(list) > 0 {
		b = list[len(list)-1]
		r.free[size] = list[:len(list)-1]
		r.d.mu.Lock()
		b.label, b.dtype, b.shape, b.numel = label, dtype, append(b.shape[:0], shape...), n
		r.d.mu.Unlock()
	} else if b, _, err = r.temp("Borrow", label, dtype, shape); err != nil {
		return nil, nil, err
	}
	given := false
	return b, func() {
		if given || r.done {
			return
		}
		given = true
		if r.free == nil {
			r.free = map[uint64][]*Buffer{}
		}
		r.free[b.size] = append(r.free[b.size], b)
	}, nil
}

// TempUint32 is Temp holding data (row-major, len(data) = product of shape).
func (r *Recorder) TempUint32(label string, data []uint32, shape ...int) (*Buffer, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	n, err := shapeNumel(label, shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("gpu: upload %q: %d values for shape %v (%d elements)", label, len(data), shape, n)
	}
	b, _, err := r.temp("TempUint32", label, U32, shape)
	if err != nil {
		return nil, err
	}
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return b, r.d.writeLocked(b, bytesOf(data))
}

// tempSpec checks a temporary's request for op (a usable recorder not yet submitted, a known
// dtype, a valid shape) and returns its element count and byte size (rounded up to 4).
func (r *Recorder) tempSpec(op, label string, dtype DType, shape []int) (n int, size uint64, err error) {
	if err := r.usable(); err != nil {
		return 0, 0, err
	}
	if r.done {
		return 0, 0, fmt.Errorf("gpu: %s on a submitted recorder", op)
	}
	if dtype != F32 && dtype != F16 && dtype != U32 {
		return 0, 0, fmt.Errorf("gpu: buffer %q: unknown dtype %v", label, dtype)
	}
	if n, err = shapeNumel(label, shape); err != nil {
		return 0, 0, err
	}
	return n, (uint64(n)*uint64(dtype.Size()) + 3) &^ 3, nil
}

// temp takes a scratch buffer of the shape's byte size from the device's reuse list
// (reused = true: its contents are stale) or allocates a zeroed one, and records it.
func (r *Recorder) temp(op, label string, dtype DType, shape []int) (b *Buffer, reused bool, err error) {
	n, size, err := r.tempSpec(op, label, dtype, shape)
	if err != nil {
		return nil, false, err
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, false, err
	}
	for list := d.scratch[size]; len(list) > 0 && b == nil; list = d.scratch[size] {
		c := list[len(list)-1]
		d.scratch[size] = list[:len(list)-1]
		d.scratchB -= size
		c.pooled = false
		if c.released { // released by a caller that kept it past its Submit
			continue
		}
		c.label, c.dtype, c.shape, c.numel = label, dtype, append(c.shape[:0], shape...), n
		b, reused = c, true
	}
	if b == nil {
		if b, err = d.newBufferLocked(label, dtype, shape); err != nil {
			return nil, false, err
		}
	}
	r.temps = append(r.temps, b)
	return b, reused, nil
}

// FreeScratch releases the scratch buffers kept for reuse by Recorder.Temp (they count in
// MemStats while kept: up to SetScratchLimit's bytes, buffers of at most 512 MiB). An allocation that runs out
// of GPU memory calls it before failing, so kept scratch never causes ErrOutOfMemory.
func (d *Device) FreeScratch() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.freeScratchLocked()
}

func (d *Device) freeScratchLocked() {
	for _, list := range d.scratch {
		for _, b := range list {
			b.pooled = false
			b.releaseLocked()
		}
	}
	d.scratch, d.scratchB = nil, 0
}

// Discard drops everything recorded and releases the recorder's temporary buffers.
func (r *Recorder) Discard() {
	if r == nil {
		return
	}
	r.done = true
	r.ops = nil
	r.releaseTemps()
}

// releaseTemps hands the recorder's temporaries back to the device for reuse (or frees
// those that would not fit the reuse limits).
func (r *Recorder) releaseTemps() {
	if len(r.temps) == 0 {
		return
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range r.temps {
		if b.released || b.arena != nil || b.isArena {
			continue // released, or packed by the caller: no longer a scratch buffer
		}
		if d.closed || b.size > scratchMaxBuffer || d.scratchB+b.size > d.scratchLimit {
			b.releaseLocked()
			continue
		}
		b.pooled = true
		if d.scratch == nil {
			d.scratch = map[uint64][]*Buffer{}
		}
		d.scratch[b.size] = append(d.scratch[b.size], b)
		d.scratchB += b.size
	}
	r.temps, r.clears, r.free = nil, nil, nil
	d.boundFreedAheadLocked()
}

// freedMark is the bytes released ahead (Device.freedAhead) right after submission sub: every
// buffer they count was used, if at all, by sub or an earlier submission.
type freedMark struct {
	sub   wgpu.SubmissionIndex
	freed uint64
}

// submitCmdLocked submits cmd, releases it and returns (and records) its submission index.
func (d *Device) submitCmdLocked(cmd *wgpu.CommandBuffer) wgpu.SubmissionIndex {
	d.lastSub = d.queue.Submit(cmd)
	cmd.Release()
	return d.lastSub
}

// boundFreedAheadLocked runs after a recorder's submit and the release of its temporaries:
// past freedAheadLimit it waits for the submission marked after the previous recorder's
// submit (all it counted is free then) and keeps counting what was released since; then it
// marks the latest submission.
func (d *Device) boundFreedAheadLocked() {
	if d.closed {
		return
	}
	if d.freedAhead > freedAheadLimit {
		if m := d.freedMark; m.sub != 0 && m.freed <= d.freedAhead {
			idx := uint64(m.sub)
			d.dev.Poll(true, &idx)
			d.freedAhead -= m.freed
		} else {
			d.poll(true)
			d.freedAhead = 0
		}
	}
	d.freedMark = freedMark{sub: d.lastSub, freed: d.freedAhead}
}

// Submit encodes every recorded dispatch into one command buffer and submits it (without
// waiting; ReadFloat32 and friends wait). While profiling is enabled each dispatch gets its
// own compute pass with timestamps around it, and Submit waits for the GPU to read them.
// A recorder can be submitted once. Errors: a buffer released since it was recorded, or a
// failure creating the encoder, bind groups or uniforms (nothing is submitted then).
func (r *Recorder) Submit() error {
	if err := r.usable(); err != nil {
		return err
	}
	if r.done {
		return errors.New("gpu: recorder submitted twice")
	}
	r.done = true
	// Temporaries may be released right after the queue submit: wgpu keeps resources that
	// submitted work uses alive until it completes.
	defer r.releaseTemps()
	if len(r.ops) == 0 {
		return nil
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	for _, op := range r.ops {
		for i, b := range op.binds {
			if err := d.checkBuffer(b.Buf); err != nil {
				return fmt.Errorf("gpu: submit: %s binding %d: %w", op.k.spec.Name, i, err)
			}
		}
	}
	if d.profiler.enabled {
		const chunk = maxQueries - 1
		clears := r.clears
		for s := 0; s < len(r.ops); s += chunk {
			e := min(s+chunk, len(r.ops))
			if err := d.submitLocked(r.ops[s:e], clears, true); err != nil {
				return err
			}
			clears = nil
		}
		return nil
	}
	return d.submitLocked(r.ops, r.clears, false)
}

// submitLocked encodes ops into one command buffer, after clearing the buffers clears (reused
// temporaries), and submits it.
func (d *Device) submitLocked(ops []dispatch, clears []*Buffer, profile bool) error {
	// Uniform arena: each dispatch's u32s at an offset aligned for uniform bindings.
	ualign := uint64(d.limits.MinUniformBufferOffsetAlignment)
	if ualign < 16 {
		ualign = 256
	}
	offs := make([]uint64, len(ops))
	var total uint64
	for i, op := range ops {
		if len(op.uniforms) == 0 {
			continue
		}
		total = (total + ualign - 1) / ualign * ualign
		offs[i] = total
		total += uint64(len(op.uniforms)*4+15) &^ 15
	}
	var ubuf *wgpu.Buffer
	if total > 0 {
		arena := make([]uint32, total/4)
		for i, op := range ops {
			copy(arena[offs[i]/4:], op.uniforms)
		}
		var err error
		ubuf, err = d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{
			Label: "nvg uniforms", Size: total,
			Usage: wgpu.BufferUsageUniform | wgpu.BufferUsageCopyDst,
		})
		if err != nil {
			return fmt.Errorf("gpu: submit: uniform buffer (%d bytes): %w", total, err)
		}
		defer ubuf.Release()
		if err := d.queue.TryWriteBuffer(ubuf, 0, bytesOf(arena)); err != nil {
			return fmt.Errorf("gpu: submit: write uniforms: %w", err)
		}
	}
	groups := make([]*wgpu.BindGroup, len(ops))
	defer func() {
		for _, g := range groups {
			if g != nil {
				g.Release()
			}
		}
	}()
	for i, op := range ops {
		entries := make([]wgpu.BindGroupEntry, 0, len(op.binds)+1)
		for j, b := range op.binds {
			root, off := b.Buf.root()
			entries = append(entries, wgpu.BindGroupEntry{Binding: uint32(j), Buffer: root.buf, Offset: off + b.Offset, Size: b.Size})
		}
		if len(op.uniforms) > 0 {
			entries = append(entries, wgpu.BindGroupEntry{Binding: uint32(len(op.binds)), Buffer: ubuf,
				Offset: offs[i], Size: uint64(len(op.uniforms)*4+15) &^ 15})
		}
		g, err := d.dev.TryCreateBindGroup(&wgpu.BindGroupDescriptor{Label: op.k.spec.Name, Layout: op.k.layout, Entries: entries})
		if err != nil {
			return fmt.Errorf("gpu: submit: bind group for %s: %w", op.k.spec.Name, err)
		}
		groups[i] = g
	}
	enc, err := d.dev.TryCreateCommandEncoder(nil)
	if err != nil {
		return fmt.Errorf("gpu: submit: command encoder: %w", err)
	}
	defer enc.Release()
	for _, b := range clears {
		root, off := b.root() // a view if the caller packed it while recording
		if err := enc.TryClearBuffer(root.buf, off, b.size); err != nil {
			return fmt.Errorf("gpu: submit: clear scratch %q: %w", b.label, err)
		}
	}
	var ts *timestampRun
	if profile {
		ts, err = d.profiler.begin(d, len(ops)+1)
		if err != nil {
			return err
		}
		defer ts.release()
		if err := ts.write(enc, 0); err != nil {
			return err
		}
	}
	if !profile {
		pass := enc.BeginComputePass(nil)
		for i, op := range ops {
			pass.SetPipeline(op.k.pipeline)
			pass.SetBindGroup(0, groups[i], nil)
			pass.DispatchWorkgroups(op.groups[0], op.groups[1], op.groups[2])
		}
		err := pass.TryEnd()
		pass.Release() // before Finish/Submit (wgpu-native issue 412)
		if err != nil {
			return fmt.Errorf("gpu: submit: end pass: %w", err)
		}
	} else {
		for i, op := range ops {
			pass := enc.BeginComputePass(&wgpu.ComputePassDescriptor{Label: op.k.spec.Name})
			pass.SetPipeline(op.k.pipeline)
			pass.SetBindGroup(0, groups[i], nil)
			pass.DispatchWorkgroups(op.groups[0], op.groups[1], op.groups[2])
			err := pass.TryEnd()
			pass.Release()
			if err != nil {
				return fmt.Errorf("gpu: submit: end pass of %s: %w", op.k.spec.Name, err)
			}
			if err := ts.write(enc, i+1); err != nil {
				return err
			}
		}
		if err := ts.resolve(enc); err != nil {
			return err
		}
	}
	cmd, err := enc.TryFinish(nil)
	if err != nil {
		return fmt.Errorf("gpu: submit: finish: %w", err)
	}
	d.submitCmdLocked(cmd)
	for _, op := range ops {
		for _, b := range op.binds {
			root, _ := b.Buf.root()
			runtime.KeepAlive(root.buf)
		}
	}
	if profile {
		ticks, err := ts.read(d)
		if err != nil {
			return err
		}
		for i, op := range ops {
			d.profiler.add(op.k.spec.Name, ticks[i+1]-ticks[i], op.flops, op.bytes)
		}
	}
	return nil
}
