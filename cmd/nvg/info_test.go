package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// TestInfoInvalidModel: `nvg info` on an HF checkpoint with one problem (model.norm.weight
// missing) says "(1 problem)" and names it once; with a second (a stray tensor) "(2 problems)"
// with each line once.
func TestInfoInvalidModel(t *testing.T) {
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg, err := os.ReadFile("../../cmf/tinyteacher/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	stray, err := cmf.NewFloatTensor("extra.weight", cmf.F32, []int{3}, []float64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	const missing = "tensor model.norm.weight is missing (want shape [256])"
	const extra = "tensor extra.weight is not part of the architecture"
	for _, tc := range []struct {
		name  string
		extra []*cmf.Tensor
		count string
		lines []string
	}{
		{"one", nil, "invalid model (1 problem):", []string{missing}},
		{"two", []*cmf.Tensor{stray}, "invalid model (2 problems):", []string{missing, extra}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var ts []*cmf.Tensor
			for _, n := range m.Names() {
				if n != "model.norm.weight" {
					ts = append(ts, m.Tensors[n])
				}
			}
			ts = append(ts, tc.extra...)
			if err := cmf.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
				t.Fatal(err)
			}
			_, stderr, code := capture(t, []string{"info", dir})
			if code != 1 || strings.Count(stderr, tc.count) != 1 {
				t.Errorf("exit %d, stderr %q; want 1 and %q once", code, stderr, tc.count)
			}
			for _, l := range tc.lines {
				if n := strings.Count(stderr, l); n != 1 {
					t.Errorf("%q appears %d times in %q", l, n, stderr)
				}
			}
		})
	}
}
