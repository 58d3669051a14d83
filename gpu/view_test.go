package gpu_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestView checks views of one base: what one writes the other reads (an op on a view reads
// and writes the base's first bytes), MemStats counts the base only, an op refuses to bind
// two views of one base, releasing a view leaves the base and its other views usable,
// releasing the base invalidates them; bad arguments are refused.
func TestView(t *testing.T) {
	d := gputest.Open(t)
	before := d.MemStats()
	base := must(d.NewBuffer("base", gpu.F32, 12)).T(t)
	defer base.Release()
	a := must(d.View(base, "a", gpu.F32, 2, 3)).T(t)
	b := must(d.View(base, "b", gpu.F32, 6)).T(t)
	u := must(d.View(base, "u", gpu.U32, 4)).T(t)
	if got := d.MemStats(); got.Buffers != before.Buffers+1 || got.CurrentBytes != before.CurrentBytes+48 {
		t.Errorf("MemStats with three views of a 48-byte base: %+v (before %+v)", got, before)
	}
	if err := d.WriteFloat32(a, []float32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	one := must(d.UploadFloat32("one", []float32{1, 1, 1, 1, 1, 1}, 6)).T(t)
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.ResidualAdd(r, b, one) }); err != nil {
		t.Fatal(err)
	}
	one.Release()
	if got := must(d.ReadFloat32(a)).T(t); !slices.Equal(got, []float32{2, 3, 4, 5, 6, 7}) {
		t.Errorf("a after b += 1: %v", got)
	}
	if got := must(d.ReadUint32(u)).T(t); got[0] != 0x40000000 { // 2.0f
		t.Errorf("u[0] = %#x, want the bits of 2.0", got[0])
	}
	err := d.Run(func(r *gpu.Recorder) error { return gpu.ResidualAdd(r, a, b) })
	if err == nil || !strings.Contains(err.Error(), `"base"`) {
		t.Errorf("ResidualAdd of two views of one base: %v, want an error naming the base", err)
	}
	u.Release()
	if got := must(d.ReadFloat32(b)).T(t); got[0] != 2 {
		t.Errorf("b after releasing view u: %v", got)
	}
	for _, c := range []struct {
		name string
		f    func() (*gpu.Buffer, error)
		want string
	}{
		{"too large", func() (*gpu.Buffer, error) { return d.View(base, "big", gpu.F32, 13) }, "above base"},
		{"view of a view", func() (*gpu.Buffer, error) { return d.View(a, "vv", gpu.F32, 1) }, "itself a view"},
		{"nil base", func() (*gpu.Buffer, error) { return d.View(nil, "n", gpu.F32, 1) }, "nil buffer"},
		{"bad shape", func() (*gpu.Buffer, error) { return d.View(base, "s", gpu.F32, 0) }, "dimension ≤ 0"},
	} {
		if _, err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if _, _, err := d.Pack("p", []*gpu.Buffer{base}); err == nil {
		t.Error("Pack of a view's base: no error")
	}
	base.Release()
	if _, err := d.ReadFloat32(a); err == nil {
		t.Error("reading a view of a released base: no error")
	}
	if got := d.MemStats(); got.Buffers != before.Buffers || got.CurrentBytes != before.CurrentBytes {
		t.Errorf("after releasing the base: %+v, before %+v", got, before)
	}
}
