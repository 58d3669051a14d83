package gpu

import "fmt"

// PackLayout returns where Pack would place buffers of the given byte sizes in one arena:
// offsets[i] is buffer i's first byte, each a multiple of StorageAlign (so every view can
// be bound on its own), and total the arena's bytes (the last end, rounded up to 4). The
// gaps between buffers are zero in the arena.
func (d *Device) PackLayout(sizes []uint64) (offsets []uint64, total uint64) {
	align := d.StorageAlign()
	offsets = make([]uint64, len(sizes))
	for i, s := range sizes {
		total = (total + align - 1) / align * align
		offsets[i] = total
		total += s
	}
	return offsets, (total + 3) &^ 3
}

// Pack moves bufs (at least one; one dtype; whole buffers of this device, not views, each
// once) into a new buffer, the arena, labelled label, of dtype bufs[0].DType() and shape
// [total bytes / element size], laid out by PackLayout. Each bufs[i] keeps its identity,
// label, dtype, shape and contents but becomes a view of the arena at byte offsets[i]: every
// op, upload and readback works on it as before, and an op over the whole arena (Zero,
// GradScale, GradSumSquares, MultiTensorAdam) covers all of them in one dispatch, the gaps
// being zero. The arena owns the memory: releasing a view only marks it released, releasing
// the arena invalidates every view. WebGPU's usage rules are per buffer, so a dispatch may
// not bind two views of one arena one read-write and one read-only (Dispatch refuses it).
//
// The contents are copied on the GPU (in submission order after earlier work); the
// originals' memory is freed. Errors (nothing is changed): no buffers, a nil, released,
// foreign or repeated buffer, a view, an arena, a recorder's scratch buffer, mixed dtypes,
// an arena above maxBufferSize or maxStorageBufferBindingSize or beyond the memory budget
// (ErrOutOfMemory), or a driver failure.
func (d *Device) Pack(label string, bufs []*Buffer) (arena *Buffer, offsets []uint64, err error) {
	if len(bufs) == 0 {
		return nil, nil, fmt.Errorf("gpu: Pack %q: no buffers", label)
	}
	unlock, err := d.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	seen := make(map[*Buffer]bool, len(bufs))
	sizes := make([]uint64, len(bufs))
	dt := DType(-1)
	for i, b := range bufs {
		if err := d.checkBuffer(b); err != nil {
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %d: %w", label, i, err)
		}
		switch {
		case b.arena != nil:
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %q is already a view of arena %q", label, b.label, b.arena.label)
		case b.isArena:
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %q is an arena that other buffers are views of", label, b.label)
		case b.pooled:
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %q is a recorder's scratch buffer, handed back at its Submit", label, b.label)
		case seen[b]:
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %q given twice", label, b.label)
		case i > 0 && b.dtype != dt:
			return nil, nil, fmt.Errorf("gpu: Pack %q: buffer %q is %s, buffer %q is %s", label, b.label, b.dtype, bufs[0].label, dt)
		}
		seen[b], dt, sizes[i] = true, b.dtype, b.size
	}
	offsets, total := d.PackLayout(sizes)
	if total > d.info.MaxStorageBindingSize {
		return nil, nil, fmt.Errorf("gpu: Pack %q: %d bytes exceed maxStorageBufferBindingSize %d; pack fewer buffers per arena: %w",
			label, total, d.info.MaxStorageBindingSize, ErrOutOfMemory)
	}
	arena, err = d.newBufferLocked(label, dt, []int{int(total) / dt.Size()})
	if err != nil {
		return nil, nil, err
	}
	arena.isArena = true
	enc, err := d.dev.TryCreateCommandEncoder(nil)
	if err != nil {
		arena.releaseLocked()
		return nil, nil, fmt.Errorf("gpu: Pack %q: %w", label, err)
	}
	defer enc.Release()
	for i, b := range bufs {
		if err := enc.TryCopyBufferToBuffer(b.buf, 0, arena.buf, offsets[i], b.size); err != nil {
			arena.releaseLocked()
			return nil, nil, fmt.Errorf("gpu: Pack %q: copy %q: %w", label, b.label, err)
		}
	}
	cmd, err := enc.TryFinish(nil)
	if err != nil {
		arena.releaseLocked()
		return nil, nil, fmt.Errorf("gpu: Pack %q: %w", label, err)
	}
	d.submitCmdLocked(cmd)
	// The originals may go now: wgpu keeps what submitted work uses alive until it is done.
	for i, b := range bufs {
		b.buf.Release()
		b.buf = nil
		d.mem.CurrentBytes -= b.size
		d.mem.Buffers--
		delete(d.buffers, b)
		b.arena, b.off = arena, offsets[i]
	}
	return arena, offsets, nil
}
