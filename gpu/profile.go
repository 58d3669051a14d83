package gpu

/*
#include <stdint.h>
// Declared here rather than by including wgpu.h (which lives in the binding's module
// directory): the symbol comes from the wgpu-native library the binding links. The binding
// wraps it only in an unexported cgo helper, so nvg calls it directly (DESIGN §7).
typedef struct WGPUCommandEncoderImpl* WGPUCommandEncoder;
typedef struct WGPUQuerySetImpl* WGPUQuerySet;
void wgpuCommandEncoderWriteTimestamp(WGPUCommandEncoder commandEncoder, WGPUQuerySet querySet, uint32_t queryIndex);
*/
import "C"

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// maxQueries is wgpu's limit on the size of one query set.
const maxQueries = 4096

// TickPeriod is the duration of one GPU timestamp tick. WebGPU specifies timestamps in
// nanoseconds, but wgpu (native) resolves the backend's raw ticks unless the instance flag
// AUTOMATIC_TIMESTAMP_NORMALIZATION is set (off by default; gfx-rs/wgpu#7343). wgpu-native 29
// (binding v1.34.1) has that flag (WGPUInstanceFlag_AutomaticTimestampNormalization) and
// wgpuQueueGetTimestampPeriod, but the Go binding exposes neither (its InstanceDescriptor has
// no flags field, its Queue no period call), and nvg creates its instance without a
// descriptor (DESIGN §7). So the ticks are Vulkan's and the period is
// VkPhysicalDeviceLimits.timestampPeriod: 1 ns on lavapipe and on the H200 (measured), but not
// on every GPU (Intel's are 52 or 83 ns). TestTickPeriodWallClock checks it against the host
// clock on the adapter the tests run on; reading it on other adapters needs a cgo call to
// wgpuQueueGetTimestampPeriod (declared in wgpu-native 29's wgpu.h) or a binding that wraps it.
const TickPeriod = time.Nanosecond

// KernelTime is one row of the profile: a kernel name, how many dispatches ran, their
// total GPU time, and the floating-point operations and global-memory bytes those
// dispatches declared through Recorder.Cost (0 for kernels that declare none).
type KernelTime struct {
	Name  string
	Calls int
	Total time.Duration
	Flops float64 // sum over the dispatches, an FMA counting 2
	Bytes float64 // sum over the dispatches: bytes read and written at least once
}

// TFLOPs is the achieved arithmetic rate in 10¹² floating-point operations per second
// (0 when no cost was declared or no time was measured).
func (k KernelTime) TFLOPs() float64 {
	if k.Total <= 0 {
		return 0
	}
	return k.Flops / k.Total.Seconds() / 1e12
}

// GBps is the achieved global-memory rate in 10⁹ bytes per second (0 when no cost was
// declared or no time was measured).
func (k KernelTime) GBps() float64 {
	if k.Total <= 0 {
		return 0
	}
	return k.Bytes / k.Total.Seconds() / 1e9
}

// Profile is the per-kernel GPU time since profiling was enabled (or reset), sorted by
// total time, largest first.
type Profile []KernelTime

// Total is the sum of all kernels' time.
func (p Profile) Total() time.Duration {
	var t time.Duration
	for _, k := range p {
		t += k.Total
	}
	return t
}

// String formats the profile as a table: kernel, calls, total ms, mean µs, share %, and
// the achieved TFLOP/s and GB/s where the kernel declares its cost ("-" where not).
func (p Profile) String() string {
	var b strings.Builder
	tot := p.Total()
	fmt.Fprintf(&b, "%-28s %8s %12s %12s %7s %9s %9s\n", "kernel", "calls", "total ms", "mean µs", "share", "TFLOP/s", "GB/s")
	rate := func(v float64, declared bool) string {
		if !declared {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	for _, k := range p {
		share := 0.0
		if tot > 0 {
			share = 100 * float64(k.Total) / float64(tot)
		}
		fmt.Fprintf(&b, "%-28s %8d %12.3f %12.1f %6.1f%% %9s %9s\n", k.Name, k.Calls,
			float64(k.Total)/1e6, float64(k.Total)/1e3/float64(max(k.Calls, 1)), share,
			rate(k.TFLOPs(), k.Flops > 0), rate(k.GBps(), k.Bytes > 0))
	}
	fmt.Fprintf(&b, "%-28s %8s %12.3f\n", "total", "", float64(tot)/1e6)
	return b.String()
}

type profiler struct {
	enabled bool
	stats   map[string]*KernelTime
}

func (p *profiler) add(name string, ticks uint64, flops, bytes float64) {
	if p.stats == nil {
		p.stats = map[string]*KernelTime{}
	}
	s := p.stats[name]
	if s == nil {
		s = &KernelTime{Name: name}
		p.stats[name] = s
	}
	s.Calls++
	s.Total += time.Duration(ticks) * TickPeriod
	s.Flops += flops
	s.Bytes += bytes
}

func (p *profiler) release() {}

// SetProfiling turns the profiler on or off. While on, every Submit runs one compute pass
// per dispatch with GPU timestamps between passes, waits for the GPU, and adds each
// dispatch's time to its kernel's row (this serialises the GPU and the host: profile,
// don't train, with it). Error when the device lacks timestamp queries (see Info).
func (d *Device) SetProfiling(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if on && !d.info.Timestamps {
		return errors.New("gpu: profiling needs timestamp-query and timestamp-query-inside-encoders, which this adapter lacks")
	}
	d.profiler.enabled = on
	return nil
}

// Profile returns the per-kernel totals gathered while profiling was on.
func (d *Device) Profile() Profile {
	d.mu.Lock()
	defer d.mu.Unlock()
	var p Profile
	for _, s := range d.profiler.stats {
		p = append(p, *s)
	}
	sort.Slice(p, func(i, j int) bool {
		if p[i].Total != p[j].Total {
			return p[i].Total > p[j].Total
		}
		return p[i].Name < p[j].Name
	})
	return p
}

// ResetProfile clears the per-kernel totals.
func (d *Device) ResetProfile() {
	d.mu.Lock()
	d.profiler.stats = nil
	d.mu.Unlock()
}

// timestampRun is the query set and buffers of one profiled submit.
type timestampRun struct {
	n          int
	qs         *wgpu.QuerySet
	resolveBuf *wgpu.Buffer
	staging    *wgpu.Buffer
}

func (p *profiler) begin(d *Device, n int) (*timestampRun, error) {
	if n > maxQueries {
		return nil, fmt.Errorf("gpu: profiler: %d timestamps in one submit (max %d)", n, maxQueries)
	}
	t := &timestampRun{n: n}
	var err error
	t.qs, err = d.dev.TryCreateQuerySet(&wgpu.QuerySetDescriptor{Label: "nvg timestamps", Type: wgpu.QueryTypeTimestamp, Count: uint32(n)})
	if err != nil {
		return nil, fmt.Errorf("gpu: profiler: query set: %w", err)
	}
	size := uint64(n) * 8
	t.resolveBuf, err = d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{Label: "nvg timestamps", Size: size,
		Usage: wgpu.BufferUsageQueryResolve | wgpu.BufferUsageCopySrc})
	if err != nil {
		t.release()
		return nil, fmt.Errorf("gpu: profiler: resolve buffer: %w", err)
	}
	t.staging, err = d.dev.TryCreateBuffer(&wgpu.BufferDescriptor{Label: "nvg timestamps readback", Size: size,
		Usage: wgpu.BufferUsageMapRead | wgpu.BufferUsageCopyDst})
	if err != nil {
		t.release()
		return nil, fmt.Errorf("gpu: profiler: staging buffer: %w", err)
	}
	return t, nil
}

// handleOf returns the C handle inside a binding object. The binding keeps it unexported
// as the first field ("ref") of CommandEncoder and QuerySet (webgpu v1.0.0 and v1.34.1; the
// binding is pinned in go.mod, so check this layout, gen_types.go, before each upgrade).
func handleOf[T any](p *T) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(p))
}

func (t *timestampRun) write(enc *wgpu.CommandEncoder, i int) error {
	if i < 0 || i >= t.n {
		return fmt.Errorf("gpu: profiler: timestamp %d of %d", i, t.n)
	}
	e, q := handleOf(enc), handleOf(t.qs)
	if e == nil || q == nil {
		return errors.New("gpu: profiler: released encoder or query set")
	}
	C.wgpuCommandEncoderWriteTimestamp(C.WGPUCommandEncoder(e), C.WGPUQuerySet(q), C.uint32_t(i))
	return nil
}

func (t *timestampRun) resolve(enc *wgpu.CommandEncoder) error {
	if err := enc.TryResolveQuerySet(t.qs, 0, uint32(t.n), t.resolveBuf, 0); err != nil {
		return fmt.Errorf("gpu: profiler: resolve: %w", err)
	}
	if err := enc.TryCopyBufferToBuffer(t.resolveBuf, 0, t.staging, 0, uint64(t.n)*8); err != nil {
		return fmt.Errorf("gpu: profiler: copy: %w", err)
	}
	return nil
}

// read waits for the submit and returns the raw ticks.
func (t *timestampRun) read(d *Device) ([]uint64, error) {
	raw, err := d.mapRead(t.staging, uint64(t.n)*8, "timestamps")
	if err != nil {
		return nil, err
	}
	ticks := make([]uint64, t.n)
	copy(bytesOf(ticks), raw)
	// Guard against non-monotonic values (a driver that does not order timestamps).
	for i := 1; i < t.n; i++ {
		if ticks[i] < ticks[i-1] {
			ticks[i] = ticks[i-1]
		}
	}
	return ticks, nil
}

func (t *timestampRun) release() {
	if t.qs != nil {
		t.qs.Release()
	}
	if t.resolveBuf != nil {
		t.resolveBuf.Release()
	}
	if t.staging != nil {
		t.staging.Release()
	}
}
