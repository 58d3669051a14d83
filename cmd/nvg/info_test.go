package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu/gputest"
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

// TestInfoGPU: `nvg info --gpu` prints the adapter and its tensor cores as the device says
// them ("on (…)" or "off: reason"); --json gives the same status; a MODEL with --gpu is a
// usage error.
func TestInfoGPU(t *testing.T) {
	d := gputest.Open(t)
	want := d.TensorCores().String()
	stdout, stderr, code := capture(t, []string{"info", "--gpu"})
	if code != 0 || !strings.Contains(stdout, "adapter        "+d.Info().Name) || !strings.Contains(stdout, "tensor cores   "+want+"\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant the adapter %q and tensor cores %q", code, stdout, stderr, d.Info().Name, want)
	}
	stdout, _, code = capture(t, []string{"info", "--gpu", "--json"})
	var js struct {
		Adapter     struct{ Name string }
		TensorCores struct {
			Status string
			On     bool
		} `json:"tensor_cores"`
	}
	if err := json.Unmarshal([]byte(stdout), &js); code != 0 || err != nil || js.Adapter.Name != d.Info().Name ||
		js.TensorCores.Status != want || js.TensorCores.On != d.TensorCores().On {
		t.Errorf("--json: exit %d, %v: %+v from\n%s", code, err, js, stdout)
	}
	if _, _, code := capture(t, []string{"info", "--gpu", "model.cmf"}); code != 2 {
		t.Errorf("--gpu with a MODEL: exit %d, want 2", code)
	}
}
