// Package kittest holds the nets shared by the GPU tests of nvgkit and nvgkit/train: the
// embedded tiny teacher loaded once per test binary, a Student loaded for one test, and the
// 4-layer teacher/student pair of the robustness tests. Test code only (testkit: never
// imported by production code).
package kittest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/tinytest"
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

// PadRank returns a copy of m whose BLR tensor name carries extra more ranks of padding, as
// a compressor that rounds ranks up leaves them: ℓ = 0 on every path (so the weight is the
// same) and sign bits from a fixed generator in the new columns of U and rows of V. The
// other tensors are m's. Errors: name is not a BLR tensor of m, extra is not a positive
// multiple of 8.
func PadRank(m *cmf.Model, name string, extra int) (*cmf.Model, error) {
	if extra < 8 || extra%8 != 0 {
		return nil, fmt.Errorf("kittest.PadRank: extra = %d, want a positive multiple of 8", extra)
	}
	t, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("kittest.PadRank: no tensor %q", name)
	}
	w, err := cmf.BLRFromTensor(t)
	if err != nil {
		return nil, fmt.Errorf("kittest.PadRank: %w", err)
	}
	r := w.Rank
	seed := uint32(12345)
	rnd := func() byte { seed = seed*1664525 + 1013904223; return byte(seed >> 24) }
	for p := range w.Paths {
		q := &w.Paths[p]
		q.L = append(q.L, make([]float32, extra)...)
		var u []byte
		for row := range w.M {
			u = append(u, q.U[row*r/8:(row+1)*r/8]...)
			for range extra / 8 {
				u = append(u, rnd())
			}
		}
		q.U = u
		for range extra * w.N / 8 {
			q.V = append(q.V, rnd())
		}
	}
	w.Rank = r + extra
	payload, err := cmf.EncodeBLR(w)
	if err != nil {
		return nil, fmt.Errorf("kittest.PadRank: %w", err)
	}
	pm := cmf.NewModel(m.Config)
	for _, tn := range m.Tensors {
		if err := pm.Set(tn); err != nil {
			return nil, err
		}
	}
	nt, err := cmf.NewTensor(name, cmf.BLR, []int{w.M, w.N}, payload)
	if err != nil {
		return nil, err
	}
	if err := pm.Set(nt); err != nil {
		return nil, err
	}
	return pm, nil
}
