// Package gputest opens the shared WebGPU device for tests of packages that use gpu.
//
// Open skips the test only when no adapter can be opened at all, and fails it instead when
// the environment sets NVG_REQUIRE_GPU=1 (CI does), so a machine without lavapipe can never
// pass the GPU tests silently.
package gputest

import (
	"os"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

var (
	once sync.Once
	dev  *gpu.Device
	err  error
)

// Open returns a device shared by all tests of the test binary (opened once, never closed:
// the process exit frees it). It skips t when no adapter exists, or fails t when
// NVG_REQUIRE_GPU=1 or when the adapter exists but the device cannot be created.
func Open(t testing.TB) *gpu.Device {
	t.Helper()
	once.Do(func() { dev, err = gpu.Open() })
	if err != nil {
		if os.Getenv("NVG_REQUIRE_GPU") == "1" {
			t.Fatalf("NVG_REQUIRE_GPU=1 but no GPU device: %v", err)
		}
		if gpu.IsNoAdapter(err) {
			t.Skipf("no WebGPU adapter (set NVG_REQUIRE_GPU=1 to make this a failure): %v", err)
		}
		t.Fatalf("open GPU device: %v", err)
	}
	return dev
}
