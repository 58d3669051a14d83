package gpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// DType is the element type of a Buffer.
type DType int

const (
	// F32 is IEEE binary32, 4 bytes per element; shaders see array<f32>.
	F32 DType = iota
	// F16 is IEEE binary16 given as raw bits, 2 bytes per element, packed two per 32-bit
	// word little-endian (element 2w in the low half of word w); shaders see array<u32>
	// and unpack with unpack2x16float.
	F16
	// U32 is an unsigned 32-bit integer, 4 bytes per element (token ids, indices).
	U32
)

// Size is the element size in bytes.
func (t DType) Size() int {
	if t == F16 {
		return 2
	}
	return 4
}

// String is "f32", "f16" or "u32".
func (t DType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case U32:
		return "u32"
	}
	return fmt.Sprintf("dtype(%d)", int(t))
}

// Buffer is a GPU storage buffer holding one row-major tensor of DType and Shape.
// Its allocation is the tensor's bytes rounded up to a multiple of 4. Release it when done:
// GPU memory is not Go heap and is not reclaimed by the garbage collector in time.
//
// A buffer moved into an arena by Device.Pack is a view: it keeps its label, dtype, shape
// and contents, and every op, upload and readback works on it as before, but its bytes live
// in the arena (which owns the memory) at an aligned offset.
type Buffer struct {
	dev      *Device
	buf      *wgpu.Buffer // nil for a view (the arena's is used)
	label    string
	dtype    DType
	shape    []int
	numel    int
	size     uint64 // allocated bytes
	released bool
	arena    *Buffer // the buffer holding a view's bytes; nil for a buffer that owns them
	off      uint64  // a view's first byte in its arena
	isArena  bool    // made by Pack: views point into it
	pooled   bool    // kept for reuse by Recorder.Temp (a scratch buffer between recorders)
}

// root returns the buffer that owns b's memory and b's byte offset in it.
func (b *Buffer) root() (*Buffer, uint64) {
	if b.arena != nil {
		return b.arena, b.off
	}
	return b, 0
}

// Label is the name given at creation (used in every error about the buffer).
func (b *Buffer) Label() string { return b.label }

// DType is the element type.
func (b *Buffer) DType() DType { return b.dtype }

// Shape returns a copy of the tensor shape (row-major, outermost first).
func (b *Buffer) Shape() []int { return append([]int(nil), b.shape...) }

// Len is the number of elements (the product of the shape).
func (b *Buffer) Len() int { return b.numel }

// Bytes is the allocated size in bytes (element bytes rounded up to a multiple of 4).
func (b *Buffer) Bytes() uint64 { return b.size }

// String is the label, dtype and shape, e.g. `"x" f32[4 3]` (used in error messages).
func (b *Buffer) String() string {
	return fmt.Sprintf("%q %s%v", b.label, b.dtype, b.shape)
}

// Release frees the GPU memory now. Releasing twice is a no-op; a released buffer makes
// any later dispatch, upload or readback that names it fail with an error. Work already
// submitted that uses the buffer completes normally.
func (b *Buffer) Release() {
	if b == nil || b.dev == nil {
		return
	}
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	b.releaseLocked()
}

func (b *Buffer) releaseLocked() {
	if b.released {
		return
	}
	b.released = true
	if b.arena != nil {
		return // a view: the arena owns the memory
	}
	if b.buf != nil {
		b.buf.Release()
		b.buf = nil
		b.dev.freedAhead += b.size
	}
	b.dev.mem.CurrentBytes -= b.size
	b.dev.mem.Buffers--
	delete(b.dev.buffers, b)
}

func (b *Buffer) usable() error {
	if b == nil {
		return fmt.Errorf("gpu: nil buffer")
	}
	if b.released {
		return fmt.Errorf("gpu: buffer %q has been released", b.label)
	}
	if b.arena != nil && b.arena.released {
		return fmt.Errorf("gpu: buffer %q is part of arena %q, which has been released", b.label, b.arena.label)
	}
	return nil
}

// MemStats reports the GPU memory held by nvg's buffers (not pipelines or staging buffers).
type MemStats struct {
	// CurrentBytes is the total allocated size of live buffers, the scratch buffers kept for
	// reuse included (Recorder.Temp, FreeScratch); PeakBytes the highest it has been since
	// Open (or ResetPeak).
	CurrentBytes, PeakBytes uint64
	// Buffers is the number of live buffers.
	Buffers int
}

// ErrOutOfMemory is wrapped by the error of a buffer allocation that does not fit: above
// the device's maxBufferSize, beyond the memory budget (SetMemoryBudget, NVG_GPU_MEMORY), or
// refused by the driver. Such an error is returned, never a panic or an abort; it names the
// buffer's label and the bytes wanted.
var ErrOutOfMemory = errors.New("out of GPU memory")

// SetMemoryBudget caps the bytes nvg's buffers may hold at once (0: no cap beyond the
// driver's). An allocation that would go beyond it fails with ErrOutOfMemory before the
// driver is asked, so a run that does not fit stops with an error naming the buffer
// instead of exhausting a GPU shared with others. Open sets it from the environment
// variable NVG_GPU_MEMORY (bytes, or a number with a KiB, MiB, GiB or TiB suffix).
func (d *Device) SetMemoryBudget(bytes uint64) {
	d.mu.Lock()
	d.budget = bytes
	d.mu.Unlock()
}

// MemoryBudget returns the cap set by SetMemoryBudget or NVG_GPU_MEMORY (0: none).
func (d *Device) MemoryBudget() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.budget
}

// ParseBytes reads a byte count: a non-negative integer, optionally followed by KiB, MiB,
// GiB or TiB (powers of 1024; K, M, G, T are the same).
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for i, suf := range []string{"K", "M", "G", "T"} {
		for _, form := range []string{suf + "iB", suf} {
			if strings.HasSuffix(t, form) {
				t, mult = strings.TrimSpace(strings.TrimSuffix(t, form)), 1<<(10*(i+1))
				goto parse
			}
		}
	}
parse:
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || (mult > 1 && n > math.MaxUint64/mult) {
		return 0, fmt.Errorf("gpu: %q is not a byte count (an integer, optionally with KiB, MiB, GiB or TiB)", s)
	}
	return n * mult, nil
}

// MemStats returns the allocator's current and peak bytes.
func (d *Device) MemStats() MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mem
}

// ResetPeak sets PeakBytes to CurrentBytes.
func (d *Device) ResetPeak() {
	d.mu.Lock()
	d.mem.PeakBytes = d.mem.CurrentBytes
	d.mu.Unlock()
}

func shapeNumel(label string, shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, fmt.Errorf("gpu: buffer %q: empty shape", label)
	}
	n := 1
	for _, s := range shape {
		if s <= 0 {
			return 0, fmt.Errorf("gpu: buffer %q: shape %v has a dimension ≤ 0", label, shape)
		}
		if n > math.MaxInt64/s {
			return 0, fmt.Errorf("gpu: buffer %q: shape %v overflows", label, shape)
		}
		n *= s
	}
	return n, nil
}

// NewBuffer allocates a zero-filled buffer of the given dtype and shape (every dimension
// ≥ 1). Errors name the label and byte count: a bad shape, a size above the device's
// maxBufferSize, or an allocation the driver refused.
func (d *Device) NewBuffer(label string, dtype DType, shape ...int) (*Buffer, error) {
	if d == nil {
		return nil, errNilDevice
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.newBufferLocked(label, dtype, shape)
}

// newBufferLocked allocates a buffer; when it does not fit (ErrOutOfMemory) and scratch
// buffers are kept for reuse, it frees them and tries once more.
func (d *Device) newBufferLocked(label string, dtype DType, shape []int) (*Buffer, error) {
	b, err := d.allocLocked(label, dtype, shape)
	if err != nil && errors.Is(err, ErrOutOfMemory) && d.scratchB > 0 {
		d.freeScratchLocked()
		b, err = d.allocLocked(label, dtype, shape)
	}
	return b, err
}

func (d *Device) allocLocked(label string, dtype DType, shape []int) (*Buffer, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if dtype != F32 && dtype != F16 && dtype != U32 {
		return nil, fmt.Errorf("gpu: buffer %q: unknown dtype %v", label, dtype)
	}
	n, err := shapeNumel(label, shape)
	if err != nil {
		return nil, err
	}
	size := (uint64(n)*uint64(dtype.Size()) + 3) &^ 3
	if size > d.info.MaxBufferSize {
		return nil, fmt.Errorf("gpu: buffer %q %s%v needs %d bytes, above the device's maxBufferSize %d: %w",
			label, dtype, shape, size, d.info.MaxBufferSize, ErrOutOfMemory)
	}
	if d.budget > 0 && d.mem.CurrentBytes+size > d.budget {
		return nil, fmt.Errorf("gpu: buffer %q %s%v needs %d bytes, but %d of the %d-byte memory budget (NVG_GPU_MEMORY) are in use: %w",
			label, dtype, shape, size, d.mem.CurrentBytes, d.budget, ErrOutOfMemory)
	}
	usage := wgpu.BufferUsageStorage | wgpu.BufferUsageCopySrc | wgpu.BufferUsageCopyDst
	if d.UniformViews() {
		usage |= wgpu.BufferUsageUniform
	}
	wb, err := d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{
		Label: label,
		Size:  size,
		Usage: usage,
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: allocate buffer %q (%d bytes, %d in use): %w: %w", label, size, d.mem.CurrentBytes, ErrOutOfMemory, err)
	}
	b := &Buffer{dev: d, buf: wb, label: label, dtype: dtype, shape: append([]int(nil), shape...), numel: n, size: size}
	d.buffers[b] = struct{}{}
	d.mem.CurrentBytes += size
	d.mem.Buffers++
	if d.mem.CurrentBytes > d.mem.PeakBytes {
		d.mem.PeakBytes = d.mem.CurrentBytes
	}
	return b, nil
}

// UniformViews reports whether d's buffers can also be bound as Uniform ranges: on CPU
// adapters (whose uniform loads are the cheap ones, see Uniform), not on GPUs, where the
// uniform usage would buy nothing.
func (d *Device) UniformViews() bool { return d != nil && d.info.CPU }

func (d *Device) upload(label string, dtype DType, shape []int, n int, data []byte) (*Buffer, error) {
	if d == nil {
		return nil, errNilDevice
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	want, err := shapeNumel(label, shape)
	if err != nil {
		return nil, err
	}
	if want != n {
		return nil, fmt.Errorf("gpu: upload %q: %d values for shape %v (%d elements)", label, n, shape, want)
	}
	b, err := d.newBufferLocked(label, dtype, shape)
	if err != nil {
		return nil, err
	}
	if err := d.writeLocked(b, data); err != nil {
		b.releaseLocked()
		return nil, err
	}
	return b, nil
}

// writeLocked copies data (len ≤ b.size) to the start of b, padding to a multiple of 4.
func (d *Device) writeLocked(b *Buffer, data []byte) error {
	if len(data)%4 != 0 {
		padded := make([]byte, (len(data)+3)&^3)
		copy(padded, data)
		data = padded
	}
	root, off := b.root()
	if err := d.queue.TryWriteBuffer(root.buf, off, data); err != nil {
		return fmt.Errorf("gpu: write buffer %q (%d bytes): %w", b.label, len(data), err)
	}
	return nil
}

// UploadFloat32 creates an F32 buffer of the given shape holding data (row-major;
// len(data) must equal the shape's element count).
func (d *Device) UploadFloat32(label string, data []float32, shape ...int) (*Buffer, error) {
	return d.upload(label, F32, shape, len(data), bytesOf(data))
}

// UploadUint32 creates a U32 buffer of the given shape holding data (row-major).
func (d *Device) UploadUint32(label string, data []uint32, shape ...int) (*Buffer, error) {
	return d.upload(label, U32, shape, len(data), bytesOf(data))
}

// UploadF16 creates an F16 buffer of the given shape from raw IEEE binary16 bits
// (row-major; e.g. float16.Float16(x).Bits()).
func (d *Device) UploadF16(label string, bits []uint16, shape ...int) (*Buffer, error) {
	return d.upload(label, F16, shape, len(bits), bytesOf(bits))
}

// WriteFloat32 overwrites the whole of an F32 buffer with data (len(data) == b.Len()).
func (d *Device) WriteFloat32(b *Buffer, data []float32) error {
	return d.write(b, F32, len(data), bytesOf(data))
}

// WriteUint32 overwrites the whole of a U32 buffer with data (len(data) == b.Len()).
func (d *Device) WriteUint32(b *Buffer, data []uint32) error {
	return d.write(b, U32, len(data), bytesOf(data))
}

// WriteF16 overwrites the whole of an F16 buffer with raw binary16 bits (len == b.Len()).
func (d *Device) WriteF16(b *Buffer, bits []uint16) error {
	return d.write(b, F16, len(bits), bytesOf(bits))
}

func (d *Device) write(b *Buffer, dtype DType, n int, data []byte) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := d.checkBuffer(b); err != nil {
		return err
	}
	if b.dtype != dtype {
		return fmt.Errorf("gpu: write %s data into buffer %s", dtype, b)
	}
	if n != b.numel {
		return fmt.Errorf("gpu: write %d values into buffer %s of %d elements", n, b, b.numel)
	}
	return d.writeLocked(b, data)
}

func (d *Device) checkBuffer(b *Buffer) error {
	if err := b.usable(); err != nil {
		return err
	}
	if b.dev != d {
		return fmt.Errorf("gpu: buffer %q belongs to another device", b.label)
	}
	return nil
}

func bytesOf[E any](s []E) []byte {
	if len(s) == 0 {
		return nil
	}
	var e E
	out := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(e)))
	return out
}

// readBytes copies the first n bytes of b to the host, waiting for all submitted work.
func (d *Device) readBytes(b *Buffer, dtype DType) ([]byte, error) {
	unlock, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.checkBuffer(b); err != nil {
		return nil, err
	}
	if b.dtype != dtype {
		return nil, fmt.Errorf("gpu: read buffer %s as %s", b, dtype)
	}
	staging, err := d.stagingLocked(b.size, b.label)
	if err != nil {
		return nil, err
	}
	reuse := false
	defer func() {
		if reuse {
			d.keepStagingLocked(staging, b.size)
		} else {
			staging.Release()
		}
	}()
	enc, err := d.dev.TryCreateCommandEncoder(nil)
	if err != nil {
		return nil, fmt.Errorf("gpu: readback %q: %w", b.label, err)
	}
	defer enc.Release()
	root, off := b.root()
	if err := enc.TryCopyBufferToBuffer(root.buf, off, staging, 0, b.size); err != nil {
		return nil, fmt.Errorf("gpu: readback copy %q: %w", b.label, err)
	}
	cmd, err := enc.TryFinish(nil)
	if err != nil {
		return nil, fmt.Errorf("gpu: readback %q: %w", b.label, err)
	}
	d.submitCmdLocked(cmd)
	out, err := d.mapRead(staging, b.size, b.label)
	runtime.KeepAlive(root.buf)
	reuse = err == nil // unmapped again: ready for the next readback of this size
	return out, err
}

// Readback staging buffers (MapRead) are kept for reuse by size: creating one costs the
// NVIDIA driver about a millisecond, more than a small readback itself. At most
// stagingMaxTotal bytes are kept, only buffers up to stagingMaxBuffer each.
const (
	stagingMaxBuffer = 16 << 20
	stagingMaxTotal  = 64 << 20
)

// stagingLocked returns a MapRead buffer of size bytes: a kept one or a new one.
func (d *Device) stagingLocked(size uint64, label string) (*wgpu.Buffer, error) {
	if list := d.staging[size]; len(list) > 0 {
		s := list[len(list)-1]
		d.staging[size] = list[:len(list)-1]
		d.stagingB -= size
		return s, nil
	}
	s, err := d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{
		Label: "nvg readback",
		Size:  size,
		Usage: wgpu.BufferUsageMapRead | wgpu.BufferUsageCopyDst,
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: readback staging for %q (%d bytes): %w", label, size, err)
	}
	return s, nil
}

// keepStagingLocked keeps an unmapped staging buffer for reuse, or releases it when it
// would not fit the limits.
func (d *Device) keepStagingLocked(s *wgpu.Buffer, size uint64) {
	if size > stagingMaxBuffer || d.stagingB+size > stagingMaxTotal {
		s.Release()
		return
	}
	if d.staging == nil {
		d.staging = map[uint64][]*wgpu.Buffer{}
	}
	d.staging[size] = append(d.staging[size], s)
	d.stagingB += size
}

// mapRead maps a MapRead buffer after the queue is idle and copies size bytes out.
func (d *Device) mapRead(staging *wgpu.Buffer, size uint64, label string) ([]byte, error) {
	done := false
	status := wgpu.MapAsyncStatus(0)
	if err := staging.TryMapAsync(wgpu.MapModeRead, 0, size, func(s wgpu.MapAsyncStatus) {
		status = s
		done = true
	}); err != nil {
		return nil, fmt.Errorf("gpu: map readback of %q: %w", label, err)
	}
	for i := 0; !done; i++ {
		d.poll(true)
		if i > 1000 {
			return nil, fmt.Errorf("gpu: readback of %q never completed", label)
		}
	}
	if status != wgpu.MapAsyncStatusSuccess {
		return nil, fmt.Errorf("gpu: map readback of %q failed: %v", label, status)
	}
	out := make([]byte, size)
	copy(out, staging.GetMappedRange(0, uint(size)))
	if err := staging.TryUnmap(); err != nil {
		return nil, fmt.Errorf("gpu: unmap readback of %q: %w", label, err)
	}
	runtime.KeepAlive(staging)
	return out, nil
}

// ReadFloat32 waits for submitted work and returns the contents of an F32 buffer
// (b.Len() values, row-major). Errors: wrong dtype, released buffer, closed device.
func (d *Device) ReadFloat32(b *Buffer) ([]float32, error) {
	raw, err := d.readBytes(b, F32)
	if err != nil {
		return nil, err
	}
	out := make([]float32, b.numel)
	copy(bytesOf(out), raw)
	return out, nil
}

// ReadUint32 waits for submitted work and returns the contents of a U32 buffer.
func (d *Device) ReadUint32(b *Buffer) ([]uint32, error) {
	raw, err := d.readBytes(b, U32)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, b.numel)
	copy(bytesOf(out), raw)
	return out, nil
}

// ReadF16 waits for submitted work and returns the raw binary16 bits of an F16 buffer.
func (d *Device) ReadF16(b *Buffer) ([]uint16, error) {
	raw, err := d.readBytes(b, F16)
	if err != nil {
		return nil, err
	}
	out := make([]uint16, b.numel)
	copy(bytesOf(out), raw)
	return out, nil
}
