package gpu_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
)

// applyGEMMVariant forces the GEMM variant named v ("auto", "general", or "BMxBNxBK"
// optionally followed by "-general") and returns the function restoring the automatic
// choice.
func applyGEMMVariant(t testing.TB, v string) func() {
	general := strings.HasSuffix(v, "general")
	var bm, bn, bk int
	if v != "auto" && v != "general" {
		if _, err := fmt.Sscanf(v, "%dx%dx%d", &bm, &bn, &bk); err != nil {
			t.Fatalf("variant %q: %v", v, err)
		}
	}
	return gpu.SetGEMMVariant(bm, bn, bk, general)
}
