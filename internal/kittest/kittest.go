// Package kittest holds the nets shared by the GPU tests of nvgkit and nvgkit/train: the
// embedded tiny teacher loaded once per test binary, a Student loaded for one test, and the
// 4-layer teacher/student pair of the robustness tests. Test code only.
package kittest

import (
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/internal/tinytest"
	"github.com/nvg-project/nvg/nvgkit"
)

var tiny struct {
	once sync.Once
	m    *cmf.Model
	net  *nvgkit.Net
	err  error
}

// TinyTeacher opens the test GPU (gputest.Open: skips without one, fails with
// NVG_REQUIRE_GPU=1) and the embedded tiny teacher, and loads it (resident) as a Teacher net
// once per test binary: the device, the model and the shared net (do not release it).
func TinyTeacher(t testing.TB) (*gpu.Device, *cmf.Model, *nvgkit.Net) {
	t.Helper()
	d := gputest.Open(t)
	tiny.once.Do(func() {
		tiny.m, tiny.err = tinyteacher.Open()
		if tiny.err != nil {
			return
		}
		tiny.net, tiny.err = nvgkit.LoadNet(d, tiny.m, nvgkit.Teacher)
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	return d, tiny.m, tiny.net
}

// LoadStudent loads m on d as a Student net, released at the end of the test; it fails t
// on an error.
func LoadStudent(t testing.TB, d *gpu.Device, m *cmf.Model) *nvgkit.Net {
	t.Helper()
	s, err := nvgkit.LoadNet(d, m, nvgkit.Student)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Release)
	return s
}

// RobustNets returns the tiny teacher truncated to 4 layers (three GatedDeltaNet, one
// attention) as a Teacher net and its 1-bit two-path compression as a Student net, both
// released at the end of the test.
func RobustNets(t testing.TB) (*gpu.Device, *nvgkit.Net, *nvgkit.Net) {
	t.Helper()
	d, m, _ := TinyTeacher(t)
	small := tinytest.FirstLayers(t, m, 4)
	teacher, err := nvgkit.LoadNet(d, small, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(teacher.Release)
	sm, _, err := compress.Model(small, compress.Options{BitsPerWeight: 1, Paths: compress.Paths2, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d, teacher, LoadStudent(t, d, sm)
}
