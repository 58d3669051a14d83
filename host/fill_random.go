package host

import "github.com/nvg-project/nvg/internal/prng"

// The oracle's names for nvg's random generator, which lives in internal/prng (production
// code uses it there; these forward to it unchanged).

// RandomWord is prng.Word: nvg's counter-based random word,
//
//	RandomWord(seed, c) = lowbias32(lowbias32(c ⊕ lowbias32(seed)) + 0x9E3779B9)
//
// with 32-bit wrapping arithmetic (lowbias32: Chris Wellons' 32-bit integer hash).
func RandomWord(seed, counter uint32) uint32 { return prng.Word(seed, counter) }

// FillRandomBits is prng.FillBits: dst[i] = RandomWord(seed, offset+i).
func FillRandomBits(dst []uint32, seed, offset uint32) { prng.FillBits(dst, seed, offset) }

// UniformF32Grid is prng.UniformF32Grid: the grid (base, step) of FillRandomUniformF32 for
// [lo, hi). Errors as prng's.
func UniformF32Grid(lo, hi float64) (base, step float32, err error) {
	return prng.UniformF32Grid(lo, hi)
}

// UniformF16Step is prng.UniformF16Step: the grid step of FillRandomUniformF16 for
// [−amp, amp). Errors as prng's.
func UniformF16Step(amp float64) (float32, error) { return prng.UniformF16Step(amp) }

// FillRandomUniformF32 is prng.FillUniformF32: uniform f32 on a grid of 65536 values in
// [lo, hi). Errors as prng.UniformF32Grid.
func FillRandomUniformF32(dst []float32, seed, offset uint32, lo, hi float64) error {
	return prng.FillUniformF32(dst, seed, offset, lo, hi)
}

// FillRandomUniformF16 is prng.FillUniformF16: f16 bits uniform on 2048 exactly
// representable values in about [−amp, amp). Errors as prng.UniformF16Step.
func FillRandomUniformF16(dst []uint16, seed, offset uint32, amp float64) error {
	return prng.FillUniformF16(dst, seed, offset, amp)
}
