package nvgkit

import (
	"encoding/binary"
	"fmt"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/x448/float16"
)

// modelSource is LoadNet's Source: the tensors of a cmf.Model, converted on the host (f16
// planes for the projections, f32 for the rest; loadF16, loadF32), a Teacher's 8-bit
// projections as their codes and scales, and a Student's BLR payloads uploaded as they are
// (gpu.UploadBLR). It collects loadF16's warnings.
type modelSource struct {
	m        *cmf.Model
	dev      *gpu.Device
	warnings []string
}

func (s *modelSource) BeginLayer(int) error          { return nil }
func (s *modelSource) EndLayer(_ int, _ error) error { return nil }

// Dense reads t with its checkpoint shape and returns its values as host planes (always: the
// net uploads them).
func (s *modelSource) Dense(t arch.Tensor, _ []int, half, _ bool) (Plane, error) {
	if !half {
		v, err := loadF32(s.m, t.Name, t.Shape...)
		return Plane{F32: v}, err
	}
	v, warn, err := loadF16(s.m, t.Name, t.Shape...)
	if warn != "" {
		s.warnings = append(s.warnings, warn)
	}
	return Plane{F16: v}, err
}

// Quant returns projection t as its 8-bit codes and scales when the model stores it
// quantized (QuantPlaneOf), else nil. Errors, naming the tensor: a missing tensor, a shape
// other than t's, QuantPlaneOf's.
func (s *modelSource) Quant(t arch.Tensor, _ bool) (*QuantPlane, error) {
	mt, err := s.m.Tensor(t.Name)
	if err != nil || mt.Quant == nil {
		return nil, err
	}
	out, in := t.Shape[0], t.Shape[1]
	if len(mt.Shape) != 2 || mt.Shape[0] != out || mt.Shape[1] != in {
		return nil, fmt.Errorf("%s: shape %v, want [%d %d]", mt.Where(), mt.Shape, out, in)
	}
	return QuantPlaneOf(mt)
}

// QuantPlaneOf returns a quantized cmf tensor (cmf.Tensor.Quant) as host planes for a
// Source: its codes packed four per u32 word, fp8 scales as f32 (exact from the
// checkpoint's F32, BF16 or F16), q8's f16 scales as they are; nil for a tensor that is not
// quantized. Errors, naming the tensor: QuantCodes' and QuantScales' (an FP8 NaN code, a
// scale that is not finite, a read error).
func QuantPlaneOf(mt *cmf.Tensor) (*QuantPlane, error) {
	q := mt.Quant
	if q == nil {
		return nil, nil
	}
	codes, err := mt.QuantCodes()
	if err != nil {
		return nil, err
	}
	scales, err := mt.QuantScales()
	if err != nil {
		return nil, err
	}
	qp := &QuantPlane{Format: gpu.QuantQ8, Block: q.Block, Codes: Plane{U32: packCodes(codes)}}
	if q.Scheme == cmf.QuantFP8 {
		qp.Format = gpu.QuantFP8
	}
	if q.Scale.DType == cmf.F16 {
		qp.Scales.F16 = make([]uint16, len(scales))
		for i, v := range scales {
			qp.Scales.F16[i] = float16.Fromfloat32(v).Bits() // exact: v came from an f16
		}
	} else {
		qp.Scales.F32 = scales
	}
	return qp, nil
}

// packCodes packs byte codes four per little-endian u32 word, the last word zero-padded
// (gpu.Device.UploadQuantCodes' layout).
func packCodes(codes []byte) []uint32 {
	words := make([]uint32, (len(codes)+3)/4)
	parallelChunks(len(words), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var b [4]byte
			copy(b[:], codes[4*i:])
			words[i] = binary.LittleEndian.Uint32(b[:])
		}
	})
	return words
}

// BLR uploads t's BLR payload with its live ranks (liveRank), or returns nil for a tensor
// stored dense. Errors: a missing tensor, a BLR tensor of another shape, a malformed payload.
func (s *modelSource) BLR(t arch.Tensor) (*gpu.BLRLayer, int, error) {
	name, out, in := t.Name, t.Shape[0], t.Shape[1]
	mt, err := s.m.Tensor(name)
	if err != nil {
		return nil, 0, err
	}
	if mt.DType != cmf.BLR {
		return nil, 0, nil
	}
	if len(mt.Shape) != 2 || mt.Shape[0] != out || mt.Shape[1] != in {
		return nil, 0, fmt.Errorf("tensor %s: shape %v, want [%d %d]", name, mt.Shape, out, in)
	}
	w, err := cmf.BLRFromTensor(mt)
	if err != nil {
		return nil, 0, err
	}
	paths := make([]gpu.BLRHostPath, len(w.Paths))
	for p := range w.Paths {
		paths[p] = gpu.BLRHostPath(w.Paths[p])
	}
	live := liveRank(w)
	bl, err := gpu.UploadBLR(s.dev, name, w.M, w.N, w.Rank, paths, live)
	if err != nil {
		return nil, 0, fmt.Errorf("tensor %s: %w", name, err)
	}
	return bl, live, nil
}

// liveRank is the rank padding rule of a Student: ranks past the last one whose ℓ is non-zero
// in some path are padding (ℓ added to reach a GEMM tile, DESIGN.md §6) and are masked; a
// payload without trailing all-zero ℓ has no padding. All-zero ℓ keeps every rank live.
func liveRank(w *cmf.BLRWeight) int {
	live := 0
	for _, p := range w.Paths {
		for i := len(p.L) - 1; i >= live; i-- {
			if p.L[i] != 0 {
				live = i + 1
				break
			}
		}
	}
	if live == 0 {
		return w.Rank
	}
	return live
}
