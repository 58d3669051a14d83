package gpu

import (
	"fmt"
	"math"
)

const fillRandomWG = 256

// fillRandomSliceWords, when > 0, overrides the words per dispatch (tests: slicing).
var fillRandomSliceWords = 0

// FillRandomBits records b's u32 word w ← host.RandomWord(seed, offset+w) for every word of b
// (any dtype: F32 and F16 buffers get random bit patterns, U32 buffers random words — e.g.
// the packed ±1 sign bits of a BLR layer). The counter wraps at 2³². A buffer larger than one
// storage binding is filled in slices (one dispatch each). Errors: a nil recorder, a nil or
// released buffer.
func FillRandomBits(r *Recorder, b *Buffer, seed, offset uint32) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := b.usable(); err != nil {
		return fmt.Errorf("gpu: FillRandomBits: b: %w", err)
	}
	return fillRandom(r, "FillRandomBits", b, 0, seed, offset, 0, 0)
}

// FillRandomUniform records random values uniform on a grid inside an interval into b, the
// same values as the host references (bit-exact):
//
//   - F32 b: element e ← base + (host.RandomWord(seed, offset+e) >> 16)·step with
//     (base, step) = host.UniformF32Grid(lo, hi): 65536 values in [lo, hi)
//     (host.FillRandomUniformF32);
//   - F16 b: lo must be −hi; element e ← (host.RandomWord(seed, offset+e) >> 21 − 1024)·step
//     with step = host.UniformF16Step(hi): 2048 values exactly representable in f16, in
//     about [−hi, hi) (host.FillRandomUniformF16).
//
// The counter wraps at 2³². A buffer larger than one storage binding is filled in slices.
// Costs no memory traffic but the writes (Recorder.Cost: bytes = the buffer's size).
// Errors: a nil recorder, a nil or released buffer, a U32 buffer, an interval the grid
// functions reject, or an F16 interval that is not symmetric.
func FillRandomUniform(r *Recorder, b *Buffer, seed, offset uint32, lo, hi float64) error {
	const op = "FillRandomUniform"
	if err := r.usable(); err != nil {
		return err
	}
	if err := b.usable(); err != nil {
		return fmt.Errorf("gpu: %s: b: %w", op, err)
	}
	switch b.dtype {
	case F32:
		base, step, err := uniformF32Grid(lo, hi)
		if err != nil {
			return fmt.Errorf("gpu: %s: %s: %w", op, b.label, err)
		}
		return fillRandom(r, op, b, 1, seed, offset, math.Float32bits(base), math.Float32bits(step))
	case F16:
		if lo != -hi {
			return fmt.Errorf("gpu: %s: %s: an f16 fill needs a symmetric interval [−a, a), got [%g, %g)", op, b.label, lo, hi)
		}
		step, err := uniformF16Step(hi)
		if err != nil {
			return fmt.Errorf("gpu: %s: %s: %w", op, b.label, err)
		}
		return fillRandom(r, op, b, 2, seed, offset, 0, math.Float32bits(step))
	}
	return fmt.Errorf("gpu: %s: %s is %v; want F32 or F16 (FillRandomBits fills U32)", op, b.label, b.dtype)
}

// uniformF32Grid is host.UniformF32Grid (kept here so the gpu package does not import host).
func uniformF32Grid(lo, hi float64) (base, step float32, err error) {
	if math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0) || !(hi > lo) {
		return 0, 0, fmt.Errorf("interval [%g, %g) must be finite and non-empty", lo, hi)
	}
	e := math.Floor(math.Log2((hi - lo) / 65536))
	if math.Ldexp(65536, int(e)) > hi-lo {
		e--
	}
	if e < -126 || e > 100 {
		return 0, 0, fmt.Errorf("interval [%g, %g) is too narrow or too wide", lo, hi)
	}
	return float32(lo), float32(math.Ldexp(1, int(e))), nil
}

// uniformF16Step is host.UniformF16Step.
func uniformF16Step(amp float64) (float32, error) {
	if !(amp > 0) || math.IsInf(amp, 0) {
		return 0, fmt.Errorf("amplitude %g must be finite and > 0", amp)
	}
	e := int(math.Round(math.Log2(amp / 1024)))
	if e < -24 || e > 5 {
		return 0, fmt.Errorf("amplitude %g gives step 2^%d outside [2^-24, 2^5]", amp, e)
	}
	return float32(math.Ldexp(1, e)), nil
}

// fillRandom records the FillRandom dispatches of one mode over all of b's words.
func fillRandom(r *Recorder, op string, b *Buffer, mode int, seed, offset, base, step uint32) error {
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "fill_random.wgsl",
		Params: struct{ WG, Mode int }{fillRandomWG, mode}, Bindings: []Access{ReadWrite}, Uniforms: 7})
	if err != nil {
		return err
	}
	words := b.size / 4
	if words > math.MaxUint32 {
		return fmt.Errorf("gpu: %s: %s has %d words, beyond the 2³² counter range", op, b.label, words)
	}
	align := r.d.StorageAlign()
	chunk := r.d.info.MaxStorageBindingSize / align * align / 4 // words per dispatch
	if fillRandomSliceWords > 0 {
		chunk = uint64(fillRandomSliceWords)
	}
	if chunk == 0 || chunk*4%align != 0 {
		return fmt.Errorf("gpu: %s: slice of %d words is not a multiple of the %d-byte storage alignment", op, chunk, align)
	}
	nelem := uint32(words)
	if mode == 2 {
		nelem = uint32(b.numel)
	}
	mark := len(r.ops)
	for w0 := uint64(0); w0 < words; w0 += chunk {
		n := min(chunk, words-w0)
		grid, err := Grid1D(int((n + fillRandomWG - 1) / fillRandomWG))
		if err != nil {
			r.ops = r.ops[:mark]
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		err = r.Dispatch(k, grid, []uint32{uint32(n), uint32(w0), seed, offset, base, step, nelem},
			Binding{Buf: b, Offset: w0 * 4, Size: n * 4})
		if err != nil {
			r.ops = r.ops[:mark]
			return err
		}
		r.Cost(0, float64(n*4))
	}
	return nil
}
