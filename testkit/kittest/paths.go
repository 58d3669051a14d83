package kittest

import (
	"math"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

// F16Unit is f16's unit roundoff, 2⁻¹¹: the relative error of rounding an f32 value to f16 to
// nearest. The cooperative-matrix GEMMs (tensor cores) round their A operand (activations,
// gradients) to f16 with a power-of-two scale per row, so without range loss; their B operand
// (f16 weights, ±1 signs) is exact, products are exact in f32 and the accumulation is f32
// (DESIGN.md §7, "Tensor cores through a Vulkan layer").
const F16Unit = 0x1p-11

// Path is the GEMM path a test line runs on: the WGSL kernels in f32 arithmetic, or the
// cooperative-matrix kernels (f16 operands, f32 accumulation).
type Path struct {
	// Coopmat is true on the cooperative-matrix path.
	Coopmat bool
}

// String is "f32" or "coopmat", the subtest's name.
func (p Path) String() string {
	if p.Coopmat {
		return "coopmat"
	}
	return "f32"
}

// Tol is a check's tolerance on path p: tol, the f32 path's, on the f32 path; on the
// cooperative-matrix path tol + √stages·F16Unit·scale, where stages is the number of
// f16-rounded GEMMs in series between the inputs and the checked value (the forward of a
// decoder layer with dense projections has 4: two per sub-layer, input and output
// projections; with BLR projections 8: each is two GEMMs, x·Vᵀ then t₁·Uᵀ; the head 1; a
// gradient adds the backward's, as many again) and scale the checked quantity's reference
// magnitude (1 for a relative error). Each rounding perturbs its GEMM by at most F16Unit
// relative; the perturbations of independent roundings add in quadrature, hence √stages (a
// first-order model: DESIGN.md §8 lists what it gives against what Mesa 26 measured).
func (p Path) Tol(tol float64, stages int, scale float64) float64 {
	if !p.Coopmat {
		return tol
	}
	return tol + math.Sqrt(float64(stages))*F16Unit*scale
}

// ForwardStages is the number of f16-rounded GEMMs in series in the forward of layers decoder
// layers and the head: 4 per layer with dense projections, 8 with BLR ones (blr true), and 1.
func ForwardStages(layers int, blr bool) int {
	per := 4
	if blr {
		per = 8
	}
	return per*layers + 1
}

// Paths runs body once per GEMM path as subtests of t: "f32" with the WGSL kernels forced
// (gpu.SetTensorCores(false)) and "coopmat" with the cooperative-matrix kernels forced
// (gpu.SetTensorCores(true)), the latter skipped, loudly, where d has no tensor cores
// (TensorCores().Available false: the reason is in the skip). The process-wide choice is
// restored after each line, so a test that compares against a reference with a tolerance
// checks both paths whatever NVG_TENSOR_CORES and the device would choose.
func Paths(t *testing.T, d *gpu.Device, body func(t *testing.T, p Path)) {
	t.Helper()
	for _, p := range []Path{{}, {Coopmat: true}} {
		t.Run(p.String(), func(t *testing.T) {
			if p.Coopmat {
				if tc := d.TensorCores(); !tc.Available {
					t.Skipf("no tensor cores on %s (the cooperative-matrix path is not tested here): %s", d.Info().Name, tc.Reason)
				}
			}
			restore := gpu.SetTensorCores(p.Coopmat)
			defer restore()
			body(t, p)
		})
	}
}

// F32 forces the WGSL kernels (f32 arithmetic) for the rest of t (gpu.SetTensorCores(false),
// restored when t ends): for a check whose reference belongs to the f32 path, such as central
// finite differences of the GPU loss (on the cooperative-matrix path f16-rounded activations
// move the loss in steps comparable to the difference itself).
func F32(t testing.TB) {
	t.Helper()
	t.Cleanup(gpu.SetTensorCores(false))
}

// GEMMRel is the error bound of one GEMM of depth k on path p relative to Σ|a||b|: the f32
// accumulation's (k+1)·2⁻²⁴ on the f32 path; on the cooperative-matrix path the rounding of A
// to f16 (taken as 2⁻¹⁰, a full ulp, for a conversion that might not round to nearest) plus
// the f32 accumulation doubled for an accumulator that truncates — gpu's coopRel, DESIGN.md §7.
func (p Path) GEMMRel(k int) float64 {
	if p.Coopmat {
		return 2*F16Unit + 2*float64(k+1)*0x1p-24
	}
	return float64(k+1) * 0x1p-24
}

// DevicePath is the path d's GEMMs take in a test that forces none: the cooperative-matrix
// one where tensor cores are on (TensorCores().On: a GPU that has them, or NVG_TENSOR_CORES=on
// on a CPU adapter that has them), else f32. For a test of a command or a whole run that
// cannot take a Paths line per path: its tolerances follow what ran.
func DevicePath(d *gpu.Device) Path { return Path{Coopmat: d.TensorCores().On} }
