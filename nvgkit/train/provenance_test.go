package train_test

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func TestProductsName(t *testing.T) {
	for p, want := range map[compress.Products]string{nil: "cpu-f64", compress.CPUProducts{}: "cpu-f64", compress.CPUProducts{Float32: true}: "cpu-f32",
		&compress.CPUProducts{Float32: true}: "cpu-f32", &compress.GPUProducts{}: "gpu-f32"} {
		if got := train.ProductsName(p); got != want {
			t.Errorf("ProductsName(%#v) = %q, want %q", p, got, want)
		}
	}
}

// Without a device: the build's fields (this checkout's HEAD), no adapter fields.
func TestNewProvenanceNoDevice(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	p := train.NewProvenance(nil, nil)
	if p.Commit != strings.TrimSpace(string(out)) || p.CommitSource == "" || p.GoVersion != runtime.Version() || p.NVGVersion == "" ||
		p.Adapter != "" || p.Backend != "" || p.Driver != "" || p.CompressProducts != "cpu-f64" {
		t.Errorf("provenance %+v", p)
	}
}
