package nvgkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/nvg-project/nvg/cmf"
	"github.com/x448/float16"
)

// parallelChunks runs f over [0, n) in contiguous chunks on up to GOMAXPROCS goroutines
// (serially for small n).
func parallelChunks(n int, f func(lo, hi int)) {
	const minChunk = 1 << 16
	p := min(runtime.GOMAXPROCS(0), (n+minChunk-1)/minChunk)
	if p <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + p - 1) / p
	for lo := 0; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+step, n))
	}
	wg.Wait()
}

// decodeF32 returns element i of raw data of dtype d as float32 (F64 rounded to nearest).
func decoder(d cmf.DType, raw []byte) (func(i int) float32, error) {
	switch d {
	case cmf.F32:
		return func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])) }, nil
	case cmf.BF16:
		return func(i int) float32 { return math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16) }, nil
	case cmf.F16:
		return func(i int) float32 { return float16.Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32() }, nil
	case cmf.F64:
		return func(i int) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))) }, nil
	}
	return nil, fmt.Errorf("dtype %s is not a dense float dtype", d)
}

// tensorData reads t (which must have the given shape and a dense float dtype, or be
// quantized: it then reads its dense view, cmf.Tensor.Dequantized) and returns its bytes
// with an element decoder. Errors name the tensor.
func tensorData(m *cmf.Model, name string, shape ...int) (*cmf.Tensor, func(int) float32, int, error) {
	t, err := m.Tensor(name)
	if err != nil {
		return nil, nil, 0, err
	}
	t = t.Dequantized()
	if len(t.Shape) != len(shape) {
		return nil, nil, 0, fmt.Errorf("tensor %s: shape %v, want %v", name, t.Shape, shape)
	}
	n := 1
	for i, s := range shape {
		if t.Shape[i] != s {
			return nil, nil, 0, fmt.Errorf("%s: shape %v, want %v", t.Where(), t.Shape, shape)
		}
		n *= s
	}
	if t.DType == cmf.BLR {
		return nil, nil, 0, fmt.Errorf("%s: dtype blr: a Teacher net needs dense (f32, f16, bf16, f64) weights", t.Where())
	}
	raw, err := t.Bytes()
	if err != nil {
		return nil, nil, 0, err
	}
	dec, err := decoder(t.DType, raw)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%s: %w", t.Where(), err)
	}
	if len(raw) != n*t.DType.Size() {
		return nil, nil, 0, fmt.Errorf("%s: %d bytes for shape %v of %s", t.Where(), len(raw), shape, t.DType)
	}
	return t, dec, n, nil
}

// f16MinNormal is IEEE binary16's smallest normal magnitude, 2⁻¹⁴ ≈ 6.1e-5: below it an f16
// keeps fewer than 11 significant bits (2⁻²⁴ absolute spacing), and below 2⁻²⁵ it is 0.
const f16MinNormal = 0x1p-14

// Thresholds on the fraction of a tensor's nonzero values below f16MinNormal (loadF16):
// above f16SubnormalWarn LoadNet warns, above f16SubnormalRefuse it refuses the model. A
// trained bf16 weight matrix (std ≈ 0.02) has ≈ 0.25 % of its values there, whose absolute
// error (< 3e-8) is negligible; a tensor scaled far down (an embedding × 1e-5: ≈ 100 %)
// loses most of its precision and, silently, the model's outputs (hidden states 51 % off
// the host). Keeping such values exact would take a per-plane scale in every kernel that
// reads an f16 plane (each GEMM, the embedding gather, the heads), changing their
// numerics for every model, so nvg reports the tensor instead.
const (
	f16SubnormalWarn   = 0.01
	f16SubnormalRefuse = 0.5
)

// loadF16 reads a dense float tensor of the given shape and rounds it to IEEE binary16
// bits (round to nearest even). warn is non-empty when more than 1 % of the tensor's nonzero
// values lie below f16's smallest normal (6.1e-5) and so lose relative precision; it names
// the tensor and gives the fraction. Errors: missing tensor, wrong shape, a non-float or BLR
// dtype, a NaN or infinite element, or a finite value beyond f16's range (|x| > 65504), each
// naming the tensor and the element; more than half of the nonzero values below f16's
// smallest normal (the message gives the fraction).
func loadF16(m *cmf.Model, name string, shape ...int) (_ []uint16, warn string, _ error) {
	t, dec, n, err := tensorData(m, name, shape...)
	if err != nil {
		return nil, "", err
	}
	out := make([]uint16, n)
	var mu sync.Mutex
	bad := -1
	var nonzero, small, zeroed int
	parallelChunks(n, func(lo, hi int) {
		var nz, sm, zd int
		defer func() {
			mu.Lock()
			nonzero, small, zeroed = nonzero+nz, small+sm, zeroed+zd
			mu.Unlock()
		}()
		for i := lo; i < hi; i++ {
			f := dec(i)
			h := float16.Fromfloat32(f)
			if h.IsNaN() || h.IsInf(0) {
				mu.Lock()
				if bad < 0 || i < bad {
					bad = i
				}
				mu.Unlock()
				return
			}
			out[i] = h.Bits()
			if f != 0 {
				nz++
				if math.Abs(float64(f)) < f16MinNormal {
					sm++
					if h.Bits()&0x7fff == 0 {
						zd++
					}
				}
			}
		}
	})
	if bad >= 0 {
		return nil, "", fmt.Errorf("%s (%s): element %d = %g is not finite in f16 (|x| ≤ 65504)", t.Where(), t.DType, bad, dec(bad))
	}
	if nonzero == 0 {
		return out, "", nil
	}
	frac := float64(small) / float64(nonzero)
	if frac <= f16SubnormalWarn {
		return out, "", nil
	}
	msg := fmt.Sprintf("%s (%s): %.1f %% of its %d nonzero values have |x| < 6.1e-5, f16's smallest normal, so the GPU's f16 copy keeps them with less relative precision (%.1f %% become 0)",
		t.Where(), t.DType, 100*frac, nonzero, 100*float64(zeroed)/float64(nonzero))
	if frac > f16SubnormalRefuse {
		return nil, "", fmt.Errorf("%s: the GPU results would be far off; rescale the tensor, or use the float64 host path (host.Load, nvg trace --host)", msg)
	}
	return out, msg, nil
}

// loadF32 reads a dense float tensor of the given shape as float32. Errors as loadF16
// (non-finite elements rejected).
func loadF32(m *cmf.Model, name string, shape ...int) ([]float32, error) {
	t, dec, n, err := tensorData(m, name, shape...)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		f := dec(i)
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return nil, fmt.Errorf("%s: element %d = %g is not finite in f32", t.Where(), i, f)
		}
		out[i] = f
	}
	return out, nil
}
