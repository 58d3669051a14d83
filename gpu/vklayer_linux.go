//go:build linux

package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// Calls through the function pointers dlsym returns for gpu/vklayer/nvg_layer.c's C API.
typedef void (*nvg_arm_fn)(int);
typedef int (*nvg_register_fn)(const char *, const uint32_t *, size_t, unsigned);
typedef unsigned (*nvg_swaps_fn)(const char *);
typedef size_t (*nvg_state_fn)(char *, size_t);
static void nvg_call_arm(void *f, int on) { ((nvg_arm_fn)f)(on); }
static int nvg_call_register(void *f, const char *name, const uint32_t *w, size_t n, unsigned flags) { return ((nvg_register_fn)f)(name, w, n, flags); }
static unsigned nvg_call_swaps(void *f, const char *name) { return ((nvg_swaps_fn)f)(name); }
static size_t nvg_call_state(void *f, char *buf, size_t cap) { return ((nvg_state_fn)f)(buf, cap); }
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// vkLayer is the loaded layer library: the symbols of its C API (gpu/vklayer/nvg_layer.c).
type vkLayer struct {
	path                          string
	arm, register, swaps, stateFn unsafe.Pointer
}

// openLayer dlopens the layer library and resolves its C API.
func openLayer(path string) (*vkLayer, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("dlopen %s: %s", path, C.GoString(C.dlerror()))
	}
	lib := &vkLayer{path: path}
	for _, s := range []struct {
		name string
		dst  *unsafe.Pointer
	}{{"nvg_layer_arm", &lib.arm}, {"nvg_layer_register", &lib.register}, {"nvg_layer_swaps", &lib.swaps}, {"nvg_layer_state", &lib.stateFn}} {
		cs := C.CString(s.name)
		*s.dst = C.dlsym(h, cs)
		C.free(unsafe.Pointer(cs))
		if *s.dst == nil {
			return nil, fmt.Errorf("the Vulkan layer %s lacks %s", path, s.name)
		}
	}
	return lib, nil
}

// registerSPIRV makes the layer create shader modules whose entry point is name from words;
// noRobust: their pipelines are created with robust buffer access off, where the device took
// VK_EXT_pipeline_robustness (kernels that bound every access themselves).
func (l *vkLayer) registerSPIRV(name string, words []uint32, noRobust bool) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	flags := C.unsigned(0)
	if noRobust {
		flags = 1 // NVG_NO_ROBUSTNESS
	}
	if C.nvg_call_register(l.register, cs, (*C.uint32_t)(unsafe.Pointer(&words[0])), C.size_t(len(words)), flags) != 0 {
		return fmt.Errorf("the Vulkan layer refused the replacement %q", name)
	}
	return nil
}

// swapCount is how many shader modules the layer created from name's registered words.
func (l *vkLayer) swapCount(name string) int {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return int(C.nvg_call_swaps(l.swaps, cs))
}

// setArmed arms (or disarms) the layer for devices created afterwards.
func (l *vkLayer) setArmed(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.nvg_call_arm(l.arm, v)
}

// state reads the layer's state.
func (l *vkLayer) state() (layerState, error) {
	var st layerState
	n := C.nvg_call_state(l.stateFn, nil, 0)
	buf := make([]byte, int(n)+1)
	C.nvg_call_state(l.stateFn, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		return st, fmt.Errorf("the Vulkan layer's state %q: %w", buf[:n], err)
	}
	return st, nil
}
