package prng

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

// TestRandomWord pins the hash to values computed independently (Python, 32-bit masks).
func TestWord(t *testing.T) {
	for _, c := range []struct{ seed, ctr, want uint32 }{
		{0, 0, 0x01fce552}, {42, 7, 0x4537d0a3}, {0xdeadbeef, 0xffffffff, 0x7b70daba},
	} {
		if got := Word(c.seed, c.ctr); got != c.want {
			t.Errorf("Word(%#x, %#x) = %#x, want %#x", c.seed, c.ctr, got, c.want)
		}
	}
}

// TestRandomUniformGrids: the grid bounds, the values inside the interval, and a mean/spread
// close to the uniform's over 1<<16 draws (loose bounds: 6σ).
func TestRandomUniformGrids(t *testing.T) {
	base, step, err := UniformF32Grid(-0.3, 0.7)
	if err != nil || base != float32(-0.3) || step != float32(math.Ldexp(1, -16)) { // hi − lo = 1 = 65536·2^-16
		t.Fatalf("UniformF32Grid(-0.3, 0.7) = %g, %g, %v", base, step, err)
	}
	if s, err := UniformF16Step(0.01); err != nil || s != float32(math.Ldexp(1, -17)) { // log2(0.01/1024) = -16.64 → -17
		t.Fatalf("UniformF16Step(0.01) = %g, %v", s, err)
	}
	for _, bad := range [][2]float64{{1, 1}, {0, math.Inf(1)}, {math.NaN(), 1}} {
		if _, _, err := UniformF32Grid(bad[0], bad[1]); err == nil {
			t.Errorf("UniformF32Grid(%g, %g): no error", bad[0], bad[1])
		}
	}
	for _, amp := range []float64{0, -1, 1e9, 1e-12} {
		if _, err := UniformF16Step(amp); err == nil {
			t.Errorf("UniformF16Step(%g): no error", amp)
		}
	}
	f := make([]float32, 1<<16)
	if err := FillUniformF32(f, 3, 0, 2, 3); err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, v := range f {
		if v < 2 || v >= 3 {
			t.Fatalf("value %g outside [2, 3)", v)
		}
		s += float64(v)
	}
	// grid [2, 3) with step 2^-16: mean ≈ 2.5, σ of the mean 1/√12/256.
	if m := s / float64(len(f)); math.Abs(m-2.5) > 6/math.Sqrt(12)/256 {
		t.Errorf("mean %g, want ≈ 2.5", m)
	}
	h := make([]uint16, 1<<16)
	if err := FillUniformF16(h, 5, 100, 1); err != nil {
		t.Fatal(err)
	}
	var s2 float64
	for _, b := range h {
		v := float64(float16.Frombits(b).Float32())
		if v < -1 || v >= 1 {
			t.Fatalf("f16 value %g outside [-1, 1)", v)
		}
		s2 += v * v
	}
	if rms := math.Sqrt(s2 / float64(len(h))); math.Abs(rms-1/math.Sqrt(3)) > 0.01 {
		t.Errorf("f16 RMS %g, want ≈ 1/√3", rms)
	}
}
