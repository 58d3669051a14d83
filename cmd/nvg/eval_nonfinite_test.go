package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestEvalNonFiniteNamesLayer: `nvg eval` of the tiny teacher with layer 5's
// post-attention RMSNorm gain set to 3e38 (finite, so the model loads; the MLP's input
// overflows f32 on the GPU) prints no perplexity and exits 1 with one line naming layer 5
// and its kind, the first non-finite hidden state (nvgkit.FirstNonFinite).
func TestEvalNonFiniteNamesLayer(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	m, err := cmf.Open("../../cmf/tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const name = "model.layers.5.post_attention_layernorm.weight"
	v := make([]float64, m.Tensors[name].NumElements())
	for i := range v {
		v[i] = 3e38
	}
	nt, err := cmf.NewFloatTensor(name, cmf.F32, m.Tensors[name].Shape, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(nt); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "huge.cmf")
	if err := cmf.WriteCMF(path, m); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("eval.go")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := capture(t, []string{"eval", "--files", src, "--windows", "3", "--t", "32", "--batch", "2", path})
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1]
	want := " (no perplexity printed): the first non-finite hidden state is the output of layer 5 (linear_attention): "
	if code != 1 || stdout != "" || !strings.Contains(last, want) {
		t.Errorf("exit %d, stdout %q, stderr's last line %q; want 1, nothing, and %q", code, stdout, last, want)
	}
}
