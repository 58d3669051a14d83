package gpu_test

import (
	"math"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestFillRandom: the GPU fill equals the host reference bit for bit in every mode, on odd
// lengths, a non-zero counter offset, f16 subnormals, and in forced slices of 64 words.
func TestFillRandom(t *testing.T) {
	d := gputest.Open(t)
	for _, slice := range []int{0, 64} {
		restore := gpu.SetFillRandomSliceWords(slice)
		const n = 1001
		bits := must(d.NewBuffer("bits", gpu.U32, n)).T(t)
		f32 := must(d.NewBuffer("f32", gpu.F32, n)).T(t)
		f16a := must(d.NewBuffer("f16a", gpu.F16, n)).T(t)
		f16b := must(d.NewBuffer("f16b", gpu.F16, n)).T(t)
		err := d.Run(func(r *gpu.Recorder) error {
			if err := gpu.FillRandomBits(r, bits, 42, 7); err != nil {
				return err
			}
			if err := gpu.FillRandomUniform(r, f32, 9, 1<<31, -0.3, 0.7); err != nil {
				return err
			}
			if err := gpu.FillRandomUniform(r, f16a, 11, 3, -0.01, 0.01); err != nil {
				return err
			}
			return gpu.FillRandomUniform(r, f16b, 12, math.MaxUint32-500, -1e-4, 1e-4) // wraps; step 2^-23: many subnormals
		})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		wantBits := make([]uint32, n)
		host.FillRandomBits(wantBits, 42, 7)
		for i, v := range must(d.ReadUint32(bits)).T(t) {
			if v != wantBits[i] {
				t.Fatalf("slice %d: bits[%d] = %#x, want %#x", slice, i, v, wantBits[i])
			}
		}
		wantF32 := make([]float32, n)
		if err := host.FillRandomUniformF32(wantF32, 9, 1<<31, -0.3, 0.7); err != nil {
			t.Fatal(err)
		}
		for i, v := range must(d.ReadFloat32(f32)).T(t) {
			if math.Float32bits(v) != math.Float32bits(wantF32[i]) {
				t.Fatalf("slice %d: f32[%d] = %g, want %g", slice, i, v, wantF32[i])
			}
		}
		for _, c := range []struct {
			b      *gpu.Buffer
			seed   uint32
			off    uint32
			amp    float64
			subnrm bool
		}{{f16a, 11, 3, 0.01, false}, {f16b, 12, math.MaxUint32 - 500, 1e-4, true}} {
			want := make([]uint16, n)
			if err := host.FillRandomUniformF16(want, c.seed, c.off, c.amp); err != nil {
				t.Fatal(err)
			}
			sub := 0
			for i, v := range must(d.ReadF16(c.b)).T(t) {
				if v != want[i] {
					t.Fatalf("slice %d: %s[%d] = %#04x, want %#04x", slice, c.b.Label(), i, v, want[i])
				}
				if v&0x7c00 == 0 && v&0x3ff != 0 {
					sub++
				}
			}
			if c.subnrm && sub == 0 {
				t.Errorf("%s: no subnormal exercised", c.b.Label())
			}
		}
		for _, b := range []*gpu.Buffer{bits, f32, f16a, f16b} {
			b.Release()
		}
	}
}

// TestFillRandomErrors: wrong dtypes and intervals are errors, nothing is recorded.
func TestFillRandomErrors(t *testing.T) {
	d := gputest.Open(t)
	u := must(d.NewBuffer("u", gpu.U32, 8)).T(t)
	h := must(d.NewBuffer("h", gpu.F16, 8)).T(t)
	f := must(d.NewBuffer("f", gpu.F32, 8)).T(t)
	defer u.Release()
	defer h.Release()
	defer f.Release()
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"u32":       gpu.FillRandomUniform(r, u, 1, 0, -1, 1),
		"f16 asym":  gpu.FillRandomUniform(r, h, 1, 0, 0, 1),
		"f32 empty": gpu.FillRandomUniform(r, f, 1, 0, 1, 1),
		"f16 huge":  gpu.FillRandomUniform(r, h, 1, 0, -1e9, 1e9),
	})
}
