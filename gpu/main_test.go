package gpu_test

import (
	"os"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

// TestMain runs the package's tests on the WGSL kernels unless NVG_TENSOR_CORES=on: their
// bounds are those of f32 arithmetic, and each parity suite's "coopmat" line forces the
// cooperative-matrix kernels itself (SetTensorCores) with the bound of their f16 operands
// (coopRel). NVG_TENSOR_CORES=on leaves the device's automatic choice to every test.
func TestMain(m *testing.M) {
	if os.Getenv("NVG_TENSOR_CORES") != "on" {
		gpu.SetTensorCores(false)
	}
	os.Exit(m.Run())
}
