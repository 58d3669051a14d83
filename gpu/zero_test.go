package gpu_test

import (
	"math"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestZero: every element of f32, u32 and odd-length f16 buffers becomes exactly 0.
func TestZero(t *testing.T) {
	d := gputest.Open(t)
	a := must(d.UploadFloat32("a", []float32{1, -2, 3, float32(math.NaN()), 5}, 5)).T(t)
	b := must(d.UploadUint32("b", []uint32{7, 8, 9}, 3)).T(t)
	c := must(d.UploadF16("c", []uint16{0x3c00, 0x4000, 0x4200}, 3)).T(t)
	defer a.Release()
	defer b.Release()
	defer c.Release()
	if err := d.Run(func(r *gpu.Recorder) error {
		for _, x := range []*gpu.Buffer{a, b, c} {
			if err := gpu.Zero(r, x); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, v := range must(d.ReadFloat32(a)).T(t) {
		if math.Float32bits(v) != 0 {
			t.Errorf("f32[%d] = %g", i, v)
		}
	}
	for i, v := range must(d.ReadUint32(b)).T(t) {
		if v != 0 {
			t.Errorf("u32[%d] = %d", i, v)
		}
	}
	for i, v := range must(d.ReadF16(c)).T(t) {
		if v != 0 {
			t.Errorf("f16[%d] = %#x", i, v)
		}
	}
	if err := gpu.Zero(d.Begin(), nil); err == nil {
		t.Error("nil buffer accepted")
	}
}
