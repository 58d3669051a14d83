package train

import (
	"fmt"
	"strings"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/version"
)

// Provenance records what produced a run (Report.Provenance, and nvg distill's distill.json):
// the nvg build, the GPU adapter, whether its GEMMs ran on tensor cores, and the precision of
// the compression's products.
type Provenance struct {
	// NVGVersion is the module version ("(devel)" in a checkout); Commit the git commit of the
	// build ("" when unknown), Modified whether that checkout had uncommitted changes, and
	// CommitSource where the commit came from: "ldflags", "buildinfo" (go build's VCS stamp)
	// or "git" (git rev-parse HEAD at run time in the compiled-in source directory, for
	// -buildvcs=false builds).
	NVGVersion   string `json:"nvg_version"`
	Commit       string `json:"commit"`
	Modified     bool   `json:"modified"`
	CommitSource string `json:"commit_source"`
	// GoVersion is the toolchain that built nvg.
	GoVersion string `json:"go_version"`
	// Adapter is the GPU adapter's name (gpu.Info.Name), AdapterType "discrete-gpu", "cpu", …,
	// Backend "vulkan", "metal", …, and Driver the driver's vendor and description strings
	// (for lavapipe "Mesa 22.3.6 (LLVM 15.0.6)"); all "" when no device was used.
	Adapter     string `json:"adapter,omitempty"`
	AdapterType string `json:"adapter_type,omitempty"`
	Backend     string `json:"backend,omitempty"`
	Driver      string `json:"driver,omitempty"`
	// TensorCores is the device's tensor-core status as gpu.TensorCores.String gives it:
	// "on (16×16×16 f16→f32, subgroup 32)" when the GEMMs ran on cooperative matrices (f16
	// operands, f32 accumulation), else "off: reason"; "" when no device was used. It is the
	// choice Open made (NVG_TENSOR_CORES and the device); gpu.SetTensorCores, which tests and
	// benchmarks use to force a path, does not change it.
	TensorCores string `json:"tensor_cores,omitempty"`
	// CompressProducts is where and in what precision the compressor's large products ran
	// (ProductsName of compress.Options.Products: "cpu-f64", the default, "cpu-f32" or
	// "gpu-f32"); "" when the run did not compress.
	CompressProducts string `json:"compress_products,omitempty"`
}

// NewProvenance returns the running build's provenance with dev's adapter (dev may be nil:
// no adapter fields) and the compression's products p (ProductsName).
func NewProvenance(dev *gpu.Device, p compress.Products) Provenance {
	v := version.Get()
	pr := Provenance{NVGVersion: v.Version, Commit: v.Commit, Modified: v.Modified, CommitSource: v.CommitSource,
		GoVersion: v.GoVersion, CompressProducts: ProductsName(p)}
	pr.SetDevice(dev)
	return pr
}

// SetDevice fills in the adapter fields and TensorCores from dev (nothing when dev is nil).
func (p *Provenance) SetDevice(dev *gpu.Device) {
	if dev == nil {
		return
	}
	in := dev.Info()
	p.Adapter, p.AdapterType, p.Backend = in.Name, in.Type, in.Backend
	p.Driver = strings.TrimSpace(strings.Join(strings.Fields(in.Vendor+" "+in.Description), " "))
	p.TensorCores = dev.TensorCores().String()
}

// ProductsName names compression products by place and precision: nil (the default,
// compress.CPUProducts{}) and compress.CPUProducts{} "cpu-f64", compress.CPUProducts{Float32: true}
// "cpu-f32", *GPUProducts "gpu-f32"; another implementation its Go type.
func ProductsName(p compress.Products) string {
	switch p := p.(type) {
	case nil:
		return "cpu-f64"
	case compress.CPUProducts:
		if p.Float32 {
			return "cpu-f32"
		}
		return "cpu-f64"
	case *compress.CPUProducts:
		return ProductsName(*p)
	case *compress.GPUProducts:
		return "gpu-f32"
	}
	return fmt.Sprintf("%T", p)
}
