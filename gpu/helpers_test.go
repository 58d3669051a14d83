package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// randF32 returns n values uniform in [-scale, scale) as float32, and the same as float64.
func randF32(rng *rand.Rand, n int, scale float64) ([]float32, []float64) {
	f := make([]float32, n)
	d := make([]float64, n)
	for i := range f {
		f[i] = float32((rng.Float64()*2 - 1) * scale)
		d[i] = float64(f[i])
	}
	return f, d
}

// randF16 returns n values uniform in [-scale, scale) rounded to f16: the bits and the
// exactly represented values as float64.
func randF16(rng *rand.Rand, n int, scale float64) ([]uint16, []float64) {
	b := make([]uint16, n)
	d := make([]float64, n)
	for i := range b {
		h := float16.Fromfloat32(float32((rng.Float64()*2 - 1) * scale))
		b[i] = h.Bits()
		d[i] = float64(h.Float32())
	}
	return b, d
}

// checkClose fails t when |got[i] − want[i]| > atol + rtol·|want[i]| for some i, reporting
// the worst element; it returns the maximum absolute error.
func checkClose(t *testing.T, what string, got []float32, want []float64, atol, rtol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	worst, worstI, maxAbs := -1.0, -1, 0.0
	for i := range got {
		e := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(float64(got[i])) {
			e = math.Inf(1)
		}
		maxAbs = math.Max(maxAbs, e)
		if r := e / (atol + rtol*math.Abs(want[i])); r > worst {
			worst, worstI = r, i
		}
	}
	if worst > 1 {
		t.Errorf("%s: element %d = %g, want %g (|err| %.3g > %.3g + %.3g·|want|)", what, worstI, got[worstI], want[worstI],
			math.Abs(float64(got[worstI])-want[worstI]), atol, rtol)
	}
	t.Logf("%s: max |err| %.3g over %d values", what, maxAbs, len(got))
	return maxAbs
}

// result carries a (value, error) pair so that must(f(...)).T(t) fails the test on error.
type result[T any] struct {
	v   T
	err error
}

func must[T any](v T, err error) result[T] { return result[T]{v, err} }

// T returns the value, failing t when the error is not nil.
func (r result[T]) T(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}
