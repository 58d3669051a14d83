package gpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// instanceBackendPrimary is WGPUInstanceBackend_Primary (Vulkan | Metal | DX12 |
// BrowserWebGPU) from wgpu.h; the binding only exports InstanceBackendAll, which would also
// list the OpenGL adapters (no f16, no subgroups) that nvg never wants.
const instanceBackendPrimary wgpu.InstanceBackend = 1<<0 | 1<<2 | 1<<3 | 1<<5

// Device is an open WebGPU device with nvg's allocator, pipeline cache and profiler.
//
// A Device is meant to be driven by one goroutine at a time (record, submit, read back);
// MemStats and Profile may be called from any goroutine. Close releases the device; using
// it afterwards returns errors.
type Device struct {
	mu       sync.Mutex
	instance *wgpu.Instance
	adapter  *wgpu.Adapter
	dev      *wgpu.Device
	queue    *wgpu.Queue
	info     Info
	limits   wgpu.Limits
	closed   bool

	mem          MemStats
	budget       uint64 // SetMemoryBudget; 0: none
	buffers      map[*Buffer]struct{}
	scratch      map[uint64][]*Buffer // Recorder temporaries kept for reuse, by byte size
	scratchB     uint64               // their bytes
	scratchLimit uint64               // SetScratchLimit
	// gpuSubgroup is a GPU's subgroup size, probed at Open like a CPU adapter's (0 where
	// the probe disagrees or subgroups are missing). Only LogitsTopK's lane-blocked merge
	// uses it, and only when forced (SetLogitsTopKLanes: benchmarks); Info.SubgroupSize
	// stays 0 on GPUs, so no other kernel takes its lane-blocked form there.
	gpuSubgroup int
	freedAhead  uint64               // bytes released since the last wait for the GPU (freedAheadLimit)
	freedMark   freedMark            // freedAhead after the last recorder's submit (boundFreedAheadLocked)
	lastSub     wgpu.SubmissionIndex // the latest queue submission (submitCmdLocked)
	kernels     map[kernelKey]*Kernel
	staging     map[uint64][]*wgpu.Buffer // readback buffers kept for reuse, by size
	stagingB    uint64                    // their bytes
	stagers     map[*Stager]struct{}      // NewStager's, released by Close
	profiler    profiler

	tc          TensorCores     // cooperative matrices (coopmat.go): status
	layer       *vkLayer        // the Vulkan layer, nil when not loaded
	coopChecked map[string]bool // "op/entry" of cooperative-matrix pipelines whose swap was checked

	coopTileTest  coopTile  // the block the tensor-core self-test forces while it runs (coopmat.go)
	coop2TileTest coop2Tile // … and the coopmat2 self-test (coopmat2.go)
}

// SetMaxStorageBindingSize lowers the storage-binding limit nvg plans and checks with
// (Info().MaxStorageBindingSize: vocabulary and table slices, scratch sizes, the binding
// checks of Recorder.Dispatch) to maxBytes, as if the adapter allowed no more; 0 restores the
// device's own limit. It makes the sliced paths of a small GPU (lavapipe's 128 MiB, or a
// 27B head on the H200's 2 GiB) testable with a tiny model. Call it between submits.
// Errors: maxBytes above the device's limit or not a multiple of the storage-offset
// alignment (StorageAlign).
func (d *Device) SetMaxStorageBindingSize(maxBytes uint64) error {
	lim := d.limits.MaxStorageBufferBindingSize
	if maxBytes == 0 {
		maxBytes = lim
	}
	if maxBytes > lim || maxBytes%d.StorageAlign() != 0 {
		return fmt.Errorf("gpu: SetMaxStorageBindingSize(%d): want a multiple of %d up to the device's limit %d (0 restores it)",
			maxBytes, d.StorageAlign(), lim)
	}
	d.mu.Lock()
	d.info.MaxStorageBindingSize = maxBytes
	d.mu.Unlock()
	return nil
}

// Info describes the adapter behind a Device and which optional features nvg got.
type Info struct {
	// Index is the adapter's position in the enumeration NVG_ADAPTER indexes into.
	Index int
	// Name is the adapter's device name (e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)").
	Name string
	// Vendor, Description: the driver's strings.
	Vendor, Description string
	// Type is "discrete-gpu", "integrated-gpu", "cpu", ….
	Type string
	// Backend is "vulkan", "metal", ….
	Backend string
	// CPU is true for a software adapter such as Mesa lavapipe.
	CPU bool
	// ShaderF16, Subgroups, Timestamps report whether the device was created with the
	// shader-f16 feature, the native subgroup feature, and timestamp queries usable between
	// passes (timestamp-query plus timestamp-query-inside-encoders).
	ShaderF16, Subgroups, Timestamps bool
	// Missing names the requested optional features the adapter lacks (empty when all are there).
	Missing []string
	// MaxBufferSize and MaxStorageBindingSize are the device limits in bytes: the largest
	// buffer, and the largest range of a buffer one storage binding may cover.
	MaxBufferSize, MaxStorageBindingSize uint64
	// SubgroupSize is the subgroup size of a CPU adapter with subgroups, probed at Open, where
	// a workgroup of that many invocations is one subgroup (the lane-blocked GEMMs of
	// gemm_lanes.go use it); 0 on GPUs and where the probe disagrees.
	SubgroupSize int
	// MaxWorkgroupStorage is the workgroup memory per workgroup in bytes;
	// MaxInvocations the invocations per workgroup; MaxGroupsPerDim the workgroups per
	// dispatch dimension.
	MaxWorkgroupStorage, MaxInvocations, MaxGroupsPerDim uint32
}

// String is a one-line summary of the adapter and its features.
func (i Info) String() string {
	s := fmt.Sprintf("adapter %d: %s (%s, %s); f16=%v subgroups=%v timestamps=%v; max binding %d MiB, max buffer %d MiB",
		i.Index, i.Name, i.Type, i.Backend, i.ShaderF16, i.Subgroups, i.Timestamps,
		i.MaxStorageBindingSize>>20, i.MaxBufferSize>>20)
	if len(i.Missing) > 0 {
		s += "; missing: " + strings.Join(i.Missing, ", ")
	}
	return s
}

func adapterTypeName(t wgpu.AdapterType) string {
	switch t {
	case wgpu.AdapterTypeDiscreteGPU:
		return "discrete-gpu"
	case wgpu.AdapterTypeIntegratedGPU:
		return "integrated-gpu"
	case wgpu.AdapterTypeCPU:
		return "cpu"
	}
	return "unknown"
}

func adapterRank(t wgpu.AdapterType) int {
	switch t {
	case wgpu.AdapterTypeDiscreteGPU:
		return 0
	case wgpu.AdapterTypeIntegratedGPU:
		return 1
	case wgpu.AdapterTypeCPU:
		return 3
	}
	return 2
}

func init() {
	// wgpu-native logs every missing Vulkan extension as a warning; keep errors only unless
	// the user asks for more with WGPU_LOG_LEVEL (OFF, ERROR, WARN, INFO, DEBUG, TRACE).
	lvl := wgpu.LogLevelError
	switch strings.ToUpper(os.Getenv("WGPU_LOG_LEVEL")) {
	case "OFF":
		lvl = wgpu.LogLevelOff
	case "WARN":
		lvl = wgpu.LogLevelWarn
	case "INFO":
		lvl = wgpu.LogLevelInfo
	case "DEBUG":
		lvl = wgpu.LogLevelDebug
	case "TRACE":
		lvl = wgpu.LogLevelTrace
	}
	wgpu.SetLogLevel(lvl)
}

// ErrNoAdapter is returned (wrapped) by Open when no WebGPU adapter exists at all.
var ErrNoAdapter = errors.New("gpu: no WebGPU adapter (install a Vulkan driver, or Mesa lavapipe: mesa-vulkan-drivers libvulkan1)")

// Open opens a WebGPU device.
//
// Adapter choice: the environment variable NVG_ADAPTER, when set, picks an adapter by its
// index in the enumeration (Vulkan/Metal/DX12 adapters, as Info.Index reports) or by a
// case-insensitive substring of its name, vendor or description; an unmatched value is an
// error listing the adapters. Otherwise the first discrete GPU wins, then integrated, then
// virtual, then CPU — and when NVG_LOCAL_RANK is set (a rank of a data-parallel run), local
// rank r takes the (r mod n)-th of the n adapters of that type; on a CPU-only machine
// (Mesa lavapipe) Open prints a one-line notice on stderr. The device is created with the
// adapter's own limits (so bindings up to maxStorageBufferBindingSize work) and with
// shader-f16, subgroups and timestamp queries when the adapter has them; Info().Missing
// lists those it lacks. NVG_GPU_MEMORY, when set,
// is the memory budget (Device.SetMemoryBudget).
//
// Errors: ErrNoAdapter (wrapped) when no adapter exists, or the reason device creation failed.
func Open() (*Device, error) {
	quietMesaRuntimeDir()
	// Tensor cores: the Vulkan layer must be in the loader's environment before the instance.
	lay, layErr := loadLayer()
	// No InstanceDescriptor: the binding mallocs WGPUInstanceExtras without zeroing the
	// fields it does not set, so a second instance with a descriptor can crash inside
	// wgpuCreateInstance. Filter the backends at enumeration instead.
	inst := newInstance(lay)
	adapters := inst.EnumerateAdapters(&wgpu.InstanceEnumerateAdapterOptons{Backends: instanceBackendPrimary})
	if len(adapters) == 0 {
		inst.Release()
		return nil, ErrNoAdapter
	}
	infos := make([]wgpu.AdapterInfo, len(adapters))
	for i, a := range adapters {
		infos[i] = a.GetInfo()
	}
	pick := -1
	if sel := strings.TrimSpace(os.Getenv("NVG_ADAPTER")); sel != "" {
		if n, err := strconv.Atoi(sel); err == nil {
			if n >= 0 && n < len(adapters) {
				pick = n
			}
		} else {
			low := strings.ToLower(sel)
			for i, in := range infos {
				if strings.Contains(strings.ToLower(in.Device+" "+in.Vendor+" "+in.Description), low) {
					pick = i
					break
				}
			}
		}
		if pick < 0 {
			var list []string
			for i, in := range infos {
				list = append(list, fmt.Sprintf("%d: %s (%s)", i, in.Device, adapterTypeName(in.AdapterType)))
			}
			for _, a := range adapters {
				a.Release()
			}
			inst.Release()
			return nil, fmt.Errorf("gpu: NVG_ADAPTER=%q matches no adapter; adapters: %s", sel, strings.Join(list, "; "))
		}
	} else {
		for i, in := range infos {
			if pick < 0 || adapterRank(in.AdapterType) < adapterRank(infos[pick].AdapterType) {
				pick = i
			}
		}
		pick = rankAdapter(infos, pick) // NVG_LOCAL_RANK: one GPU per rank (adapter_rank.go)
	}
	for i, a := range adapters {
		if i != pick {
			a.Release()
		}
	}
	ad := adapters[pick]
	ai := infos[pick]

	info := Info{
		Index: pick, Name: ai.Device, Vendor: ai.Vendor, Description: ai.Description,
		Type: adapterTypeName(ai.AdapterType), Backend: ai.BackendType.String(),
		CPU: ai.AdapterType == wgpu.AdapterTypeCPU,
	}
	var feats []wgpu.FeatureName
	want := func(f wgpu.FeatureName, name string) bool {
		if ad.HasFeature(f) {
			feats = append(feats, f)
			return true
		}
		info.Missing = append(info.Missing, name)
		return false
	}
	info.ShaderF16 = want(wgpu.FeatureNameShaderF16, "shader-f16")
	info.Subgroups = want(wgpu.NativeFeatureSubgroup, "subgroups")
	ts := want(wgpu.FeatureNameTimestampQuery, "timestamp-query")
	tsEnc := want(wgpu.NativeFeatureTimestampQueryInsideEncoders, "timestamp-query-inside-encoders")
	info.Timestamps = ts && tsEnc

	// DESIGN §7: the native extras of Adapter.GetLimits were garbage on wgpu-native 27; reset
	// them to the values wgpu-native uses by default (no immediates, the successor of push
	// constants: kernel parameters are uniform buffers; binding arrays unused).
	// The true maxNonSamplerBindings is unknown, so try wgpu's default first and fall back
	// to smaller values (nvg's bind groups have fewer than 16 bindings).
	lim := ad.GetLimits()
	lim.MaxImmediateSize = 0
	var dev *wgpu.Device
	var err error
	var layState layerState
	var layStateErr error
	layerDeviceMu.Lock() // the layer's state describes the latest vkCreateDevice
	for _, nsb := range []uint32{1_000_000, 65_535, 256} {
		lim.MaxNonSamplerBindings = nsb
		dev, err = ad.RequestDevice(&wgpu.DeviceDescriptor{
			Label:            "nvg",
			RequiredFeatures: feats,
			RequiredLimits:   &lim,
			// No DeviceLostCallback: the binding's callback panics on a cgo pointer (DESIGN §7).
		})
		if err == nil {
			break
		}
	}
	if err == nil && lay != nil {
		layState, layStateErr = lay.state()
	}
	layerDeviceMu.Unlock()
	if err != nil {
		ad.Release()
		inst.Release()
		return nil, fmt.Errorf("gpu: create device on %s: %w", ai.Device, err)
	}
	// Device.GetLimits must never be called (double free in the binding): the limits we
	// asked for are the device's limits.
	info.MaxBufferSize = lim.MaxBufferSize
	info.MaxStorageBindingSize = lim.MaxStorageBufferBindingSize
	info.MaxWorkgroupStorage = lim.MaxComputeWorkgroupStorageSize
	info.MaxInvocations = lim.MaxComputeInvocationsPerWorkgroup
	info.MaxGroupsPerDim = lim.MaxComputeWorkgroupsPerDimension
	if info.MaxGroupsPerDim == 0 || info.MaxGroupsPerDim > 65535 {
		info.MaxGroupsPerDim = 65535
	}
	if info.CPU {
		fmt.Fprintf(os.Stderr, "nvg/gpu: no GPU adapter; using the CPU adapter %s (%s) — slow, for tests\n", ai.Device, ai.Description)
	}
	d := &Device{
		instance: inst, adapter: ad, dev: dev, queue: dev.GetQueue(),
		info: info, limits: lim,
		buffers:      map[*Buffer]struct{}{},
		kernels:      map[kernelKey]*Kernel{},
		scratchLimit: DefaultScratchLimit,
	}
	if v := os.Getenv("NVG_GPU_MEMORY"); v != "" {
		b, err := ParseBytes(v)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("NVG_GPU_MEMORY: %w", err)
		}
		d.budget = b
	}
	if info.Subgroups {
		s, err := d.probeSubgroup()
		switch {
		case err != nil && info.CPU:
			d.Close()
			return nil, fmt.Errorf("gpu: subgroup probe on %s: %w", ai.Device, err)
		case info.CPU:
			d.info.SubgroupSize = s
		case err == nil:
			d.gpuSubgroup = s
		default:
			// Only a forced benchmark form needs it on a GPU: no reason to refuse the device.
			fmt.Fprintf(os.Stderr, "nvg/gpu: subgroup probe on %s failed (the lane-blocked top-k merge cannot be forced): %v\n", ai.Device, err)
		}
	}
	d.initTensorCores(lay, layErr, layState, layStateErr)
	if !d.tc.On && !info.CPU && tensorCoresEnv() != "off" {
		fmt.Fprintf(os.Stderr, "nvg/gpu: tensor cores off: %s\n", d.tc.Reason)
	}
	return d, nil
}

// Info returns the adapter, its features (and the missing ones) and the device limits.
func (d *Device) Info() Info {
	in := d.info
	in.Missing = append([]string(nil), d.info.Missing...)
	return in
}

// Close releases every live buffer, the cached pipelines and the device. Closing twice is a
// no-op; every later call on the device or its buffers returns an error.
func (d *Device) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.poll(true)
	d.scratch, d.scratchB = nil, 0 // in d.buffers too: released below
	for b := range d.buffers {
		b.releaseLocked()
	}
	for _, k := range d.kernels {
		k.release()
	}
	d.kernels = nil
	for _, list := range d.staging {
		for _, b := range list {
			b.Release()
		}
	}
	d.staging, d.stagingB = nil, 0
	for s := range d.stagers {
		s.releaseLocked()
	}
	d.profiler.release()
	d.queue.Release()
	d.dev.Release()
	d.adapter.Release()
	d.instance.Release()
	d.closed = true
	return nil
}

var errNilDevice = errors.New("gpu: nil device")

// lock takes d's lock for a call that needs an open device and returns the unlock; a nil or
// closed device is an error, and nothing stays locked.
func (d *Device) lock() (unlock func(), err error) {
	if d == nil {
		return nil, errNilDevice
	}
	d.mu.Lock()
	if err := d.checkOpen(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	return d.mu.Unlock, nil
}

func (d *Device) checkOpen() error {
	if d == nil {
		return errNilDevice
	}
	if d.closed {
		return errors.New("gpu: device is closed")
	}
	return nil
}

// poll waits (wait=true) or checks for completed GPU work and runs pending callbacks.
func (d *Device) poll(wait bool) {
	d.dev.Poll(wait, nil)
}

// Sync waits until all submitted work has finished on the GPU.
func (d *Device) Sync() error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	d.poll(true)
	d.freedAhead, d.freedMark = 0, freedMark{}
	return nil
}

// IsNoAdapter reports whether err means that no WebGPU adapter exists on this machine.
func IsNoAdapter(err error) bool { return errors.Is(err, ErrNoAdapter) }

// quietMesaRuntimeDir gives the process an XDG_RUNTIME_DIR (a private directory under the
// temp dir) when it has none, as on CI machines and in containers: Mesa's Vulkan drivers
// print "XDG_RUNTIME_DIR is invalid" on stderr for every instance otherwise. Nothing is
// written there by nvg; a failure to create the directory leaves the environment as it was.
// The session directory (nvgkit/session/internal/sdir.MesaRuntimeDir) ignores this path, so
// keep the two in step.
func quietMesaRuntimeDir() {
	if os.Getenv("XDG_RUNTIME_DIR") != "" {
		return
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("nvg-runtime-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	os.Setenv("XDG_RUNTIME_DIR", dir)
}
