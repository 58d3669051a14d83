package gpu_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// applyGEMMVariant forces the GEMM variant named v ("auto", "general", or "BMxBNxBK"
// optionally followed by "-general"; "wgsl": tensor cores off; "coopmat", or
// "coopmat:BMxBNxBK/WMxWN" with a cooperative-matrix tile, tensor cores on with the KHR
// kernels; "coopmat2", or "coopmat2:BMxBNxBK/NT" with a block, the dense GEMMs on the
// coopmat2 kernel, skipped without it) and returns the
// function restoring the automatic choice. A suffix "+coldot=FORM" also forces the column
// reductions' form (SetColDotForm: "dot4", "dot", "windows"). A coopmat variant on a device
// without tensor cores skips t.
func applyGEMMVariant(t testing.TB, v string) func() {
	if base, form, ok := strings.Cut(v, "+coldot="); ok {
		r1 := gpu.SetColDotForm(form)
		r2 := applyGEMMVariant(t, base)
		return func() { r2(); r1() }
	}
	switch {
	case v == "wgsl":
		return gpu.SetTensorCores(false)
	case strings.HasPrefix(v, "coopmat2"):
		d := gputest.Open(t)
		if tc := d.TensorCores(); !tc.Coopmat2 {
			t.Skipf("variant %s: no coopmat2 GEMM on %s: %s", v, d.Info().Name, tc.Coopmat2Reason)
		}
		r1, r2 := gpu.SetTensorCores(true), gpu.SetCoopmat2(true)
		restore := func() { r2(); r1() }
		if tile, ok := strings.CutPrefix(v, "coopmat2:"); ok {
			r3, err := gpu.SetCoopmat2Tile(d, tile)
			if err != nil {
				restore()
				t.Fatalf("variant %q: %v", v, err)
			}
			return func() { r3(); restore() }
		}
		return restore
	case strings.HasPrefix(v, "coopmat"):
		d := gputest.Open(t)
		if tc := d.TensorCores(); !tc.Available {
			t.Skipf("variant %s: no tensor cores on %s: %s", v, d.Info().Name, tc.Reason)
		}
		r1, r2 := gpu.SetTensorCores(true), gpu.SetCoopmat2(false) // the KHR kernels
		restore := func() { r2(); r1() }
		if tile, ok := strings.CutPrefix(v, "coopmat:"); ok {
			r2, err := gpu.SetCoopmatTile(d, tile)
			if err != nil {
				restore()
				t.Fatalf("variant %q: %v", v, err)
			}
			return func() { r2(); restore() }
		}
		return restore
	}
	general := strings.HasSuffix(v, "general")
	var bm, bn, bk int
	if v != "auto" && v != "general" {
		if _, err := fmt.Sscanf(v, "%dx%dx%d", &bm, &bn, &bk); err != nil {
			t.Fatalf("variant %q: %v", v, err)
		}
	}
	return gpu.SetGEMMVariant(bm, bn, bk, general)
}
