package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// Stager uploads host data through a ring of persistent, mapped staging buffers (MapWrite,
// host memory), for weights streamed to the GPU pass after pass (a teacher larger than GPU
// memory; DESIGN §9 "Streamed weights and released memory").
//
// Why not Queue.WriteBuffer (Device.UploadF16): wgpu allocates, maps and frees a new staging
// buffer for every write, so each streamed layer paid the driver's allocation and first-touch
// page faults of hundreds of MiB of host memory on the host thread, and the GPU waited for
// it. A Stager's slots are allocated once; each Upload waits only for the copy that last read
// its slot (as many uploads ago as there are slots), copies the data in with several
// goroutines and submits the copies in a command buffer of their own, so the host's copy
// overlaps the GPU's work on what was submitted before.
//
// Ordering is the queue's: work submitted after Upload sees the data; work submitted before it
// that still reads a destination buffer is not affected only if the destinations are new or
// no longer read (nvgkit uploads each streamed layer into fresh buffers). A Stager is used by
// one goroutine at a time, like its Device, and lives until Release or Device.Close.
type Stager struct {
	d     *Device
	size  uint64 // bytes per slot
	slots []stagerSlot
	next  int
}

type stagerSlot struct {
	buf    *wgpu.Buffer
	mapped bool                 // mapped for writing (at creation, or after the last copy out of it)
	sub    wgpu.SubmissionIndex // the submission of the last copy out of it (while not mapped)
}

// StagerUpload is one destination of Stager.Upload: the whole of Dst is written from F32 (an
// F32 buffer), F16 (an F16 buffer, raw binary16 bits) or U32 (a U32 buffer, e.g. an 8-bit
// weight's codes, four per word: UploadQuantCodes' layout), row-major, Dst.Len() values.
type StagerUpload struct {
	Dst *Buffer
	F32 []float32
	F16 []uint16
	U32 []uint32
}

// data checks u and returns its bytes.
func (u StagerUpload) data() ([]byte, error) {
	switch n := u.Dst.numel; {
	case u.Dst.dtype == F32 && u.F16 == nil && u.U32 == nil && len(u.F32) == n:
		return bytesOf(u.F32), nil
	case u.Dst.dtype == F16 && u.F32 == nil && u.U32 == nil && len(u.F16) == n:
		return bytesOf(u.F16), nil
	case u.Dst.dtype == U32 && u.F32 == nil && u.F16 == nil && len(u.U32) == n:
		return bytesOf(u.U32), nil
	}
	return nil, fmt.Errorf("%d f32, %d f16 and %d u32 values for buffer %s (want %d values of its dtype only)", len(u.F32), len(u.F16), len(u.U32), u.Dst, u.Dst.numel)
}

// NewStager allocates slots staging buffers of slotBytes each (rounded up to a multiple of 4)
// in host-visible memory (which a driver may take from device memory on a GPU whose memory
// the host can map whole); they do not count in MemStats. One Upload moves at most
// slotBytes. Two slots let the host fill one while the GPU copies out of the other.
// Errors: slots < 1, slotBytes 0 or above the device's maxBufferSize, allocation failure.
func (d *Device) NewStager(slotBytes uint64, slots int) (*Stager, error) {
	if d == nil {
		return nil, errNilDevice
	}
	if slots < 1 {
		return nil, fmt.Errorf("gpu: stager: %d slots, need at least 1", slots)
	}
	size := (slotBytes + 3) &^ 3
	if size == 0 || size > d.info.MaxBufferSize {
		return nil, fmt.Errorf("gpu: stager: slot of %d bytes, need 1..%d (maxBufferSize)", slotBytes, d.info.MaxBufferSize)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	s := &Stager{d: d, size: size}
	for i := 0; i < slots; i++ {
		b, err := d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{
			Label:            fmt.Sprintf("nvg stager %d", i),
			Size:             size,
			Usage:            wgpu.BufferUsageMapWrite | wgpu.BufferUsageCopySrc,
			MappedAtCreation: true,
		})
		if err != nil {
			s.releaseLocked()
			return nil, fmt.Errorf("gpu: stager: allocate slot %d of %d bytes: %w: %w", i, size, ErrOutOfMemory, err)
		}
		s.slots = append(s.slots, stagerSlot{buf: b, mapped: true})
	}
	if d.stagers == nil {
		d.stagers = map[*Stager]struct{}{}
	}
	d.stagers[s] = struct{}{}
	return s, nil
}

// SlotBytes is the most one Upload can move.
func (s *Stager) SlotBytes() uint64 { return s.size }

// Upload copies every item's Data into the next slot and submits one command buffer that
// copies them on to their Dst buffers. Items are checked before anything is written.
// Errors: a released stager or destination, values not matching the destination's dtype and
// length, the items' total (each rounded up to 4 bytes) above SlotBytes, a failed map or submit.
func (s *Stager) Upload(items []StagerUpload) error {
	if s == nil || s.d == nil {
		return errors.New("gpu: stager released")
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if s.slots == nil {
		return errors.New("gpu: stager released")
	}
	offs := make([]uint64, len(items))
	data := make([][]byte, len(items))
	var total uint64
	for i, it := range items {
		if err := d.checkBuffer(it.Dst); err != nil {
			return fmt.Errorf("gpu: stager upload %d: %w", i, err)
		}
		b, err := it.data()
		if err != nil {
			return fmt.Errorf("gpu: stager upload %d: %w", i, err)
		}
		data[i], offs[i] = b, total
		total += (uint64(len(b)) + 3) &^ 3
	}
	if total > s.size {
		return fmt.Errorf("gpu: stager upload of %d bytes, above the slot's %d", total, s.size)
	}
	if total == 0 {
		return nil
	}
	slot := &s.slots[s.next]
	if err := s.mapLocked(slot); err != nil {
		return err
	}
	dst := slot.buf.GetMappedRange(0, uint(total))
	parallelCopy(dst, data, offs)
	if err := slot.buf.TryUnmap(); err != nil {
		return fmt.Errorf("gpu: stager: unmap: %w", err)
	}
	slot.mapped = false
	enc, err := d.dev.TryCreateCommandEncoder(nil)
	if err != nil {
		return fmt.Errorf("gpu: stager: command encoder: %w", err)
	}
	defer enc.Release()
	for i, it := range items {
		n := (uint64(len(data[i])) + 3) &^ 3
		if n == 0 {
			continue
		}
		root, off := it.Dst.root()
		if err := enc.TryCopyBufferToBuffer(slot.buf, offs[i], root.buf, off, n); err != nil {
			return fmt.Errorf("gpu: stager: copy into %s: %w", it.Dst, err)
		}
	}
	cmd, err := enc.TryFinish(nil)
	if err != nil {
		return fmt.Errorf("gpu: stager: finish: %w", err)
	}
	slot.sub = d.submitCmdLocked(cmd)
	s.next = (s.next + 1) % len(s.slots)
	runtime.KeepAlive(items)
	return nil
}

// mapLocked maps slot for writing, waiting for the submission that last copied out of it.
func (s *Stager) mapLocked(slot *stagerSlot) error {
	if slot.mapped {
		return nil
	}
	done := false
	status := wgpu.MapAsyncStatus(0)
	if err := slot.buf.TryMapAsync(wgpu.MapModeWrite, 0, s.size, func(st wgpu.MapAsyncStatus) {
		status, done = st, true
	}); err != nil {
		return fmt.Errorf("gpu: stager: map: %w", err)
	}
	for i := 0; !done; i++ {
		idx := uint64(slot.sub)
		s.d.dev.Poll(true, &idx)
		if i > 1000 {
			return errors.New("gpu: stager: mapping never completed")
		}
	}
	if status != wgpu.MapAsyncStatusSuccess {
		return fmt.Errorf("gpu: stager: map failed: %v", status)
	}
	slot.mapped = true
	return nil
}

// parallelCopy copies data[i] to dst[offs[i]:] in chunks spread over the CPUs: one
// goroutine's memmove into write-combined host memory runs well below the memory bus.
func parallelCopy(dst []byte, data [][]byte, offs []uint64) {
	const chunk = 8 << 20
	type piece struct{ to, from []byte }
	var pieces []piece
	for i, src := range data {
		for a := 0; a < len(src); a += chunk {
			b := min(a+chunk, len(src))
			o := int(offs[i]) + a
			pieces = append(pieces, piece{dst[o : o+b-a], src[a:b]})
		}
	}
	workers := min(runtime.GOMAXPROCS(0), 8, len(pieces))
	if workers <= 1 {
		for _, p := range pieces {
			copy(p.to, p.from)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan piece)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				copy(p.to, p.from)
			}
		}()
	}
	for _, p := range pieces {
		next <- p
	}
	close(next)
	wg.Wait()
}

// Release frees the staging buffers (after the copies submitted from them complete).
// Releasing twice is a no-op.
func (s *Stager) Release() {
	if s == nil || s.d == nil {
		return
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.releaseLocked()
}

func (s *Stager) releaseLocked() {
	for _, sl := range s.slots {
		sl.buf.Release()
	}
	s.slots = nil
	delete(s.d.stagers, s)
}
