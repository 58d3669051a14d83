package nvgkit_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// belowF16Normal returns the fraction of t's nonzero values whose magnitude is below f16's
// smallest normal 2⁻¹⁴, counted on the host from the tensor's own values.
func belowF16Normal(t *testing.T, tn *cmf.Tensor) float64 {
	t.Helper()
	v, err := tn.Float64()
	if err != nil {
		t.Fatal(err)
	}
	var nz, small int
	for _, x := range v {
		if x != 0 {
			nz++
			if math.Abs(x) < 0x1p-14 {
				small++
			}
		}
	}
	return float64(small) / float64(nz)
}

// cloneModel returns a model with m's config and tensors, to edit without touching m.
func cloneModel(t testing.TB, m *cmf.Model) *cmf.Model {
	t.Helper()
	c := cmf.NewModel(m.Config)
	for _, tn := range m.Tensors {
		if err := c.Set(tn); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestLoadNetSubnormalWeights: f16 planes cannot hold values below 6.1e-5 at full relative
// precision (and flush those below 3e-8 to zero), which the upload used to do silently.
// (1) The tiny teacher with its (tied) embedding scaled by 1e-5 and stored as BF16, as a
// bf16 checkpoint would hold it: LoadNet refuses it, naming the tensor and the fraction of
// its nonzero values below f16's smallest normal (counted here on the host), for a Teacher
// and a Student. (2) One projection with 5 % of its values set to 1e-6: it loads, and
// Warnings names that tensor and its fraction. (3) The tiny teacher itself (trained-like
// weights): no warning.
func TestLoadNetSubnormalWeights(t *testing.T) {
	d, m, net := kittest.TinyTeacher(t)
	if w := net.Warnings(); len(w) != 0 {
		t.Errorf("the tiny teacher gives warnings: %q", w)
	}
	base := tinytest.FirstLayers(t, m, 1)
	clone := func() *cmf.Model { return cloneModel(t, base) }
	d.FreeScratch() // a refused LoadNet frees kept scratch: count only the nets' buffers
	before := d.MemStats()

	const emb = "model.embed_tokens.weight"
	ev, err := base.Tensors[emb].Float64()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ev {
		ev[i] *= 1e-5
	}
	scaled, err := cmf.NewFloatTensor(emb, cmf.BF16, base.Tensors[emb].Shape, ev)
	if err != nil {
		t.Fatal(err)
	}
	frac := belowF16Normal(t, scaled)
	t.Logf("embedding × 1e-5: %.4f of its nonzero values below 2⁻¹⁴", frac)
	sm := clone()
	sm.Tensors[emb] = scaled
	for _, kind := range []nvgkit.NetKind{nvgkit.Teacher, nvgkit.Student} {
		n, err := nvgkit.LoadNet(d, sm, kind)
		if err == nil {
			n.Release()
			t.Fatalf("%v: an embedding scaled by 1e-5 loaded", kind)
		}
		want := fmt.Sprintf("%s (BF16): %.1f %% of its", emb, 100*frac)
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "smallest normal") {
			t.Errorf("%v: err = %v, want it to contain %q", kind, err, want)
		}
		t.Log(err)
	}
	if after := d.MemStats(); after.Buffers != before.Buffers {
		t.Errorf("refused loads left %d buffers behind", after.Buffers-before.Buffers)
	}

	const victim = "model.layers.0.mlp.up_proj.weight"
	uv, err := base.Tensors[victim].Float64()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(uv); i += 20 {
		uv[i] = 1e-6
	}
	tiny, err := cmf.NewFloatTensor(victim, cmf.F32, base.Tensors[victim].Shape, uv)
	if err != nil {
		t.Fatal(err)
	}
	frac = belowF16Normal(t, tiny)
	wm := clone()
	wm.Tensors[victim] = tiny
	n, err := nvgkit.LoadNet(d, wm, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release()
	w := n.Warnings()
	want := fmt.Sprintf("%s (F32): %.1f %% of its", victim, 100*frac)
	if len(w) != 1 || !strings.Contains(w[0], want) {
		t.Errorf("warnings %q, want one containing %q", w, want)
	}
}
