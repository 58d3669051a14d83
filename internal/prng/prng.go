// Package prng is nvg's counter-based random generator: a pure function of (seed, counter)
// and the uniform grids built on it. The host fills here and the GPU's gpu.FillRandomBits /
// gpu.FillRandomUniform compute the same bits, so a synthetic tensor made on either side is
// identical (gpu/fill_random_test.go checks it). It serves production code (nvgkit's
// synthetic nets) and the float64 oracle host alike.
package prng

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Hash is lowbias32, Chris Wellons' 32-bit integer hash (a well-mixing bijection on uint32):
// the mixer of Word and of the sign-learning kernels' stochastic rounding (host.SignHash).
func Hash(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// Word is nvg's counter-based random word: a pure function of (seed, counter), so any
// element of a random tensor can be generated independently (on the host or by
// gpu.FillRandomBits / gpu.FillRandomUniform, which compute the same bits):
//
//	Word(seed, c) = lowbias32(lowbias32(c ⊕ lowbias32(seed)) + 0x9E3779B9)
//
// with 32-bit wrapping arithmetic.
func Word(seed, counter uint32) uint32 {
	return Hash(Hash(counter^Hash(seed)) + 0x9e3779b9)
}

// FillBits sets dst[i] = Word(seed, offset+i) (the counter wraps at 2³²).
func FillBits(dst []uint32, seed, offset uint32) {
	for i := range dst {
		dst[i] = Word(seed, offset+uint32(i))
	}
}

// UniformF32Grid is the grid of FillUniformF32 for [lo, hi): values lo + k·step for
// k = 0…65535 (the top 16 bits of the word), step the largest power of two with
// 65536·step ≤ hi − lo, so every value lies in [lo, hi) and the grid covers more than half
// of the interval. lo is rounded to float32 first. Errors: lo, hi not finite, hi ≤ lo, or a
// step outside float32's normal range.
func UniformF32Grid(lo, hi float64) (base, step float32, err error) {
	if math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0) || !(hi > lo) {
		return 0, 0, fmt.Errorf("prng.UniformF32Grid: interval [%g, %g) must be finite and non-empty", lo, hi)
	}
	e := math.Floor(math.Log2((hi - lo) / 65536))
	if math.Ldexp(65536, int(e)) > hi-lo { // guard Log2 rounding
		e--
	}
	if e < -126 || e > 100 {
		return 0, 0, fmt.Errorf("prng.UniformF32Grid: interval [%g, %g) is too narrow or too wide", lo, hi)
	}
	return float32(lo), float32(math.Ldexp(1, int(e))), nil
}

// UniformF16Step is the grid step of FillUniformF16 for the symmetric interval
// [−amp, amp): values (k − 1024)·step for k = 0…2047 (the top 11 bits of the word), step =
// 2^round(log2(amp/1024)), so the values are exactly representable in f16 (11 significant
// bits) and span [−1024·step, 1023·step], within a factor √2 of [−amp, amp). Errors: amp not
// finite and > 0, or a step outside [2⁻²⁴, 2⁵] (values beyond f16's range or its
// subnormal resolution).
func UniformF16Step(amp float64) (float32, error) {
	if !(amp > 0) || math.IsInf(amp, 0) {
		return 0, fmt.Errorf("prng.UniformF16Step: amplitude %g must be finite and > 0", amp)
	}
	e := int(math.Round(math.Log2(amp / 1024)))
	if e < -24 || e > 5 {
		return 0, fmt.Errorf("prng.UniformF16Step: amplitude %g gives step 2^%d outside [2^-24, 2^5]", amp, e)
	}
	return float32(math.Ldexp(1, e)), nil
}

// FillUniformF32 sets dst[i] = base + k·step with k = Word(seed, offset+i) >> 16
// and (base, step) = UniformF32Grid(lo, hi): uniform on a grid of 65536 values in [lo, hi).
func FillUniformF32(dst []float32, seed, offset uint32, lo, hi float64) error {
	base, step, err := UniformF32Grid(lo, hi)
	if err != nil {
		return err
	}
	for i := range dst {
		k := Word(seed, offset+uint32(i)) >> 16
		dst[i] = base + float32(k)*step // k·step is exact: one rounding, as on the GPU
	}
	return nil
}

// FillUniformF16 sets dst[i] to the f16 bits of (k − 1024)·step with
// k = Word(seed, offset+i) >> 21 and step = UniformF16Step(amp): uniform on 2048
// exactly representable values in about [−amp, amp).
func FillUniformF16(dst []uint16, seed, offset uint32, amp float64) error {
	step, err := UniformF16Step(amp)
	if err != nil {
		return err
	}
	for i := range dst {
		k := int(Word(seed, offset+uint32(i)) >> 21)
		dst[i] = float16.Fromfloat32(float32(float64(k-1024) * float64(step))).Bits()
	}
	return nil
}
