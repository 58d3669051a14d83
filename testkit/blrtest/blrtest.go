// Package blrtest makes random binary-low-rank weights for the tests of the BLR kernels
// (gpu) and of their float64 reference (host).
package blrtest

import (
	"math/rand/v2"

	"github.com/nvg-project/nvg/cmf"
)

// Random returns a valid BLR weight of m×n and rank r with the given paths, drawn from rng
// path by path: the scales h [m], g [n] and ℓ [r], uniform in ±1 and passed through round
// (the storage's rounding: to f16 as a decoded payload holds them, or to f32), then random
// sign bits of U [m, r] and V [r, n]; ranks live … r−1 have ℓ = 0 (padding).
func Random(rng *rand.Rand, m, n, r, paths, live int, round func(float64) float32) *cmf.BLRWeight {
	w := &cmf.BLRWeight{M: m, N: n, Rank: r}
	scales := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = round(rng.Float64()*2 - 1)
		}
		return v
	}
	bits := func(k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	for range paths {
		p := cmf.BLRPath{H: scales(m), G: scales(n), L: scales(r), U: bits(m * r / 8), V: bits(r * n / 8)}
		for k := live; k < r; k++ {
			p.L[k] = 0
		}
		w.Paths = append(w.Paths, p)
	}
	return w
}
