package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
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

// roundF16Blocks returns x (per window b < nb and head h < heads, t rows of n values,
// token-major [nb·t, heads, n] or, headMajor, [nb·heads·t, n]) as the cooperative-matrix
// kernels see it after CoopmatPackHeads: each block of 64 rows of a head scaled by the power
// of two 2^e that puts its largest |value| in [2¹⁴, 2¹⁵), rounded to f16 (to nearest even)
// and scaled back. A reference for the kernels' arithmetic on exactly these operands.
func roundF16Blocks(x []float64, nb, t, heads, n int, headMajor bool) []float64 {
	y := make([]float64, len(x))
	at := func(b, h, tau, c int) int {
		if headMajor {
			return ((b*heads+h)*t+tau)*n + c
		}
		return ((b*t+tau)*heads+h)*n + c
	}
	for b := range nb {
		for h := range heads {
			for t0 := 0; t0 < t; t0 += 64 {
				t1 := min(t0+64, t)
				m := 0.0
				for tau := t0; tau < t1; tau++ {
					for c := range n {
						m = math.Max(m, math.Abs(x[at(b, h, tau, c)]))
					}
				}
				e := 0
				if m > 0 {
					_, ex := math.Frexp(m)
					e = 15 - ex
				}
				for tau := t0; tau < t1; tau++ {
					for c := range n {
						i := at(b, h, tau, c)
						y[i] = math.Ldexp(float64(float16.Fromfloat32(float32(math.Ldexp(x[i], e))).Float32()), -e)
					}
				}
			}
		}
	}
	return y
}

// pow2Scaled is an input of a test (f32 and float64 copies) to be multiplied by 2^e.
type pow2Scaled struct {
	f []float32
	d []float64
	e int
}

// scalePow2 multiplies each x.f by 2^x.e (exactly, in f32) and sets x.d to the result.
func scalePow2(xs ...pow2Scaled) {
	for _, x := range xs {
		for i := range x.f {
			x.f[i] = float32(math.Ldexp(float64(x.f[i]), x.e))
			x.d[i] = float64(x.f[i])
		}
	}
}

// runElementwise uploads one f32 input per scale (n values uniform in ±scale), makes nOut
// f32 outputs of n values, records launch(r, inputs, outputs) and returns the inputs as
// float64 (what the host reference takes), the outputs read back and the buffers (inputs
// then outputs, released when the test ends) for the test's error cases.
func runElementwise(t *testing.T, d *gpu.Device, rng *rand.Rand, n int, scales []float64, nOut int,
	launch func(r *gpu.Recorder, in, out []*gpu.Buffer) error) (in [][]float64, out [][]float32, in32, out32 []*gpu.Buffer) {
	t.Helper()
	for i, s := range scales {
		f, x := randF32(rng, n, s)
		in = append(in, x)
		in32 = append(in32, must(d.UploadFloat32(fmt.Sprintf("in%d", i), f, n)).T(t))
	}
	for i := 0; i < nOut; i++ {
		out32 = append(out32, must(d.NewBuffer(fmt.Sprintf("out%d", i), gpu.F32, n)).T(t))
	}
	t.Cleanup(func() {
		for _, b := range append(in32, out32...) {
			b.Release()
		}
	})
	if err := d.Run(func(r *gpu.Recorder) error { return launch(r, in32, out32) }); err != nil {
		t.Fatal(err)
	}
	for _, b := range out32 {
		out = append(out, must(d.ReadFloat32(b)).T(t))
	}
	return in, out, in32, out32
}

// checkErrors fails t for every named call that returned no error (logging the others'
// errors) and, when r is not nil, when the failing calls left anything recorded in r.
func checkErrors(t *testing.T, r *gpu.Recorder, errs map[string]error) {
	t.Helper()
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if r != nil && r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
}

// randUpload draws Π shape values uniform in ±scale (randF32), uploads them as an F32 buffer
// of that shape named name, released when tb ends, and returns it with the values as float64.
func randUpload(tb testing.TB, d *gpu.Device, rng *rand.Rand, name string, scale float64, shape ...int) (*gpu.Buffer, []float64) {
	tb.Helper()
	return randUploadAs(tb, d, rng, gpu.F32, name, scale, shape...)
}

// randUploadF16 is randUpload for an F16 buffer: the values rounded to f16 (randF16).
func randUploadF16(tb testing.TB, d *gpu.Device, rng *rand.Rand, name string, scale float64, shape ...int) (*gpu.Buffer, []float64) {
	tb.Helper()
	return randUploadAs(tb, d, rng, gpu.F16, name, scale, shape...)
}

func randUploadAs(tb testing.TB, d *gpu.Device, rng *rand.Rand, dt gpu.DType, name string, scale float64, shape ...int) (*gpu.Buffer, []float64) {
	tb.Helper()
	n := 1
	for _, s := range shape {
		n *= s
	}
	var b *gpu.Buffer
	var x []float64
	if dt == gpu.F16 {
		var h []uint16
		h, x = randF16(rng, n, scale)
		b = must(d.UploadF16(name, h, shape...)).T(tb)
	} else {
		var f []float32
		f, x = randF32(rng, n, scale)
		b = must(d.UploadFloat32(name, f, shape...)).T(tb)
	}
	tb.Cleanup(b.Release)
	return b, x
}
