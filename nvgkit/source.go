package nvgkit

import (
	"fmt"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
)

// modelSource is LoadNet's Source: the tensors of a cmf.Model, converted on the host (f16
// planes for the projections, f32 for the rest; loadF16, loadF32) and a Student's BLR
// payloads uploaded as they are (gpu.UploadBLR). It collects loadF16's warnings.
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
