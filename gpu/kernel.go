package gpu

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/nvg-project/nvg/wgsl"
	"github.com/oliverbestmann/webgpu/wgpu"
)

// Access says how a kernel uses one of its buffer bindings.
type Access int

const (
	// Read is a read-only storage binding (var<storage, read>).
	Read Access = iota
	// ReadWrite is a read-write storage binding (var<storage, read_write>).
	ReadWrite
	// Uniform is a uniform binding (var<uniform>) of a buffer range: read-only, at most
	// maxUniformBufferBindingSize bytes (64 KiB on lavapipe), at an offset that is a multiple
	// of minUniformBufferOffsetAlignment. Only CPU adapters give buffers the uniform usage
	// (Device.UniformViews), for the loads there: lavapipe loads a storage element with a
	// loop over the lanes (about 20 cycles per lane) and a uniform one with a gather
	// (about 5). Not the kernel-parameter uniform (KernelSpec.Uniforms).
	Uniform
)

// KernelSpec describes a compute kernel: which template file to render with which
// parameters, and the bindings it declares.
type KernelSpec struct {
	// Name is the op name (e.g. "ResidualAdd"): the profiler's row and the prefix of errors.
	Name string
	// File is the template in package wgsl (e.g. "residual_add.wgsl").
	File string
	// Entry is the entry point; "" means "main".
	Entry string
	// Params are the template parameters (a struct of literal sizes). Together with Name,
	// File and Entry they are the pipeline cache key (compared with ==, or formatted with
	// %#v when the type is not comparable), so they must hold only values, no pointers.
	Params any
	// Bindings lists the buffer bindings 0..len-1 in the shader's order.
	Bindings []Access
	// Uniforms is the number of u32 runtime parameters the shader reads from a uniform
	// struct at binding len(Bindings); 0 means the shader has no uniform binding.
	Uniforms int
}

// kernelKey identifies a cached pipeline: Params itself when its type is comparable (a
// struct of values: the usual case, and a map lookup without formatting), else its %#v text.
type kernelKey struct {
	name, file, entry string
	params            any
}

// Kernel is a compiled, cached compute pipeline.
type Kernel struct {
	spec     KernelSpec
	dev      *Device
	pipeline *wgpu.ComputePipeline
	layout   *wgpu.BindGroupLayout
}

// Name is the op name given in the spec.
func (k *Kernel) Name() string { return k.spec.Name }

func (k *Kernel) release() {
	if k.layout != nil {
		k.layout.Release()
	}
	if k.pipeline != nil {
		k.pipeline.Release()
	}
}

// Kernel returns the pipeline for spec, compiling the rendered shader on first use and
// caching it by (Name, File, Entry, Params). Errors: template failures, WGSL compilation errors
// (with the shader's message), or pipeline creation failures (e.g. too much workgroup
// memory), each naming the kernel.
func (d *Device) Kernel(spec KernelSpec) (*Kernel, error) {
	if d == nil {
		return nil, errNilDevice
	}
	if spec.Entry == "" {
		spec.Entry = "main"
	}
	// The op name is part of the key so that ops sharing a shader (Linear, LinearT,
	// MatMul) keep separate profiler rows.
	key := kernelKey{spec.Name, spec.File, spec.Entry, spec.Params}
	if t := reflect.TypeOf(spec.Params); t != nil && !t.Comparable() {
		key.params = fmt.Sprintf("%#v", spec.Params)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if k, ok := d.kernels[key]; ok {
		return k, nil
	}
	src, err := wgsl.Render(spec.File, spec.Params)
	if err != nil {
		return nil, fmt.Errorf("gpu: kernel %s: %w", spec.Name, err)
	}
	mod, err := d.dev.TryCreateShaderModule(&wgpu.ShaderModuleDescriptor{
		Label:      spec.File,
		WGSLSource: &wgpu.ShaderSourceWGSL{Code: src},
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: kernel %s: compile %s (%+v): %w\n%s", spec.Name, spec.File, spec.Params, err, numbered(src))
	}
	defer mod.Release()
	pl, err := d.dev.TryCreateComputePipeline(&wgpu.ComputePipelineDescriptor{
		Label:   spec.Name,
		Compute: wgpu.ProgrammableStageDescriptor{Module: mod, EntryPoint: spec.Entry},
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: kernel %s: pipeline %s (%+v): %w", spec.Name, spec.File, spec.Params, err)
	}
	k := &Kernel{spec: spec, dev: d, pipeline: pl, layout: pl.GetBindGroupLayout(0)}
	d.kernels[key] = k
	return k, nil
}

func numbered(src string) string {
	lines := strings.Split(src, "\n")
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
