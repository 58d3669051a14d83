package bench

import (
	"fmt"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/prng"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/x448/float16"
)

// TeacherDTypes are the synthetic teacher's projection formats nvg bench knows
// (--teacher-dtype): "f16" planes (what a bf16 or f16 checkpoint becomes on the GPU), and
// the 8-bit forms of an FP8 checkpoint ("fp8": e4m3 codes, an f32 scale per 128×128 block)
// and of `nvg import --quantize q8` ("q8": int8 codes, an f16 scale per row and 128 inputs).
var TeacherDTypes = []string{"f16", "fp8", "q8"}

// ParseTeacherDType returns the format of a teacher dtype name (TeacherDTypes): 0 for
// "f16", gpu.QuantFP8 or gpu.QuantQ8. Errors: an unknown name (the message lists the known
// ones).
func ParseTeacherDType(s string) (gpu.QuantFormat, error) {
	switch s {
	case "f16":
		return 0, nil
	case "fp8":
		return gpu.QuantFP8, nil
	case "q8":
		return gpu.QuantQ8, nil
	}
	return 0, fmt.Errorf("unknown teacher dtype %q (known: %v)", s, TeacherDTypes)
}

// quantBlock is the block of a format's scales: FP8's 128×128 (cmf.DefaultFP8Block), q8's
// one row by cmf.QuantQ8Group inputs.
func quantBlock(f gpu.QuantFormat) [2]int {
	if f == gpu.QuantFP8 {
		return cmf.DefaultFP8Block
	}
	return [2]int{1, cmf.QuantQ8Group}
}

// quantBytes is the GPU bytes of an 8-bit [m, n] weight of format f: a byte per weight
// (in u32 words) and its scales (FP8 f32, q8 f16 in u32 words).
func quantBytes(f gpu.QuantFormat, m, n int64) uint64 {
	b := quantBlock(f)
	scales := ((m + int64(b[0]) - 1) / int64(b[0])) * ((n + int64(b[1]) - 1) / int64(b[1]))
	if f == gpu.QuantFP8 {
		return 4*uint64((m*n+3)/4) + 4*uint64(scales)
	}
	return 4*uint64((m*n+3)/4) + f16Bytes(scales)
}

// NewTeacher builds a synthetic Teacher like NewNet (same seeds, same non-projection
// weights) whose decoder projections are 8-bit in format: codes uniform over the format's
// grid and one scale for every block, so each weight is uniform in about ±√(3/in) as
// NewNet's f16 projections are — FP8 the e4m3 code nearest to a uniform value in ±448
// (from a 16-bit grid) with scale √(3/in)/448; q8 an int8 uniform in [−127, 127] with the
// f16 scale nearest to √(3/in)/127. The codes are made on the host once per layer type and
// projection and shared by the layers of that type (resident nets upload them per layer,
// streamed ones at every pass, as LoadNet's 8-bit teacher). format 0 is NewNet's f16
// Teacher. Options and errors as NewNet, and an unknown format.
func NewTeacher(dev *gpu.Device, cfg arch.Config, format gpu.QuantFormat, seed uint32, opts ...nvgkit.LoadOption) (*nvgkit.Net, error) {
	if format != 0 && format != gpu.QuantFP8 && format != gpu.QuantQ8 {
		return nil, fmt.Errorf("bench.NewTeacher: unknown format %v", format)
	}
	src := &source{dev: dev, cfg: cfg, seed: seed, planes: map[planeKey]nvgkit.Plane{}, format: format, quant: map[planeKey]*nvgkit.QuantPlane{}}
	return nvgkit.BuildNet(dev, cfg, nvgkit.Teacher, src, opts...)
}

// Quant makes projection t of an 8-bit synthetic teacher (NewTeacher): host planes shared
// by every layer of the same type; nil for an f16 teacher.
func (s *source) Quant(t arch.Tensor, _ bool) (*nvgkit.QuantPlane, error) {
	if s.format == 0 {
		return nil, nil
	}
	k, err := s.kindOf(t)
	if err != nil {
		return nil, err
	}
	key := planeKey{s.layer < 0, s.full, k.role}
	if q, ok := s.quant[key]; ok {
		return q, nil
	}
	out, in := t.Shape[0], t.Shape[1]
	block := quantBlock(s.format)
	seed := s.tensorSeed(k.role)
	q := &nvgkit.QuantPlane{Format: s.format, Block: block}
	codes := make([]uint32, (out*in+3)/4)
	nScales := ((out + block[0] - 1) / block[0]) * ((in + block[1] - 1) / block[1])
	if s.format == gpu.QuantFP8 {
		var table [1 << 16]byte // the e4m3 code nearest to each point of a uniform grid in ±448
		for i := range table {
			table[i] = cmf.FP8E4M3Code(float32((float64(i)+0.5)/(1<<16)*2-1) * cmf.FP8E4M3Max)
		}
		err = parallelFill(len(codes), func(a, b int) error {
			for i := a; i < b; i++ {
				lo, hi := prng.Word(seed, uint32(2*i)), prng.Word(seed, uint32(2*i+1))
				codes[i] = uint32(table[lo&0xffff]) | uint32(table[lo>>16])<<8 | uint32(table[hi&0xffff])<<16 | uint32(table[hi>>16])<<24
			}
			return nil
		})
		q.Scales.F32 = make([]float32, nScales)
		for i := range q.Scales.F32 {
			q.Scales.F32[i] = float32(k.hi / cmf.FP8E4M3Max)
		}
	} else {
		err = parallelFill(len(codes), func(a, b int) error {
			for i := a; i < b; i++ {
				w := prng.Word(seed, uint32(i))
				for j := 0; j < 32; j += 8 { // int8 −128 becomes −127: codes stay in [−127, 127]
					if w>>j&0xff == 0x80 {
						w ^= 1 << j
					}
				}
				codes[i] = w
			}
			return nil
		})
		q.Scales.F16 = make([]uint16, nScales)
		h := float16.Fromfloat32(float32(k.hi / 127)).Bits()
		for i := range q.Scales.F16 {
			q.Scales.F16[i] = h
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	if r := out * in % 4; r != 0 { // the last word's padding codes are zero, as UploadQuantCodes'
		codes[len(codes)-1] &= 1<<(8*r) - 1
	}
	q.Codes.U32 = codes
	s.quant[key] = q
	return q, nil
}
