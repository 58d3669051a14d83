package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/prng"
	"github.com/nvg-project/nvg/nvgkit"
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
// (in u32 words) and its scales — FP8's f32; q8's f16 (in u32 words) in a streamed net,
// f32 in a resident one (nvgkit's builder widens them).
func quantBytes(f gpu.QuantFormat, m, n int64, streamed bool) uint64 {
	b := quantBlock(f)
	scales := ((m + int64(b[0]) - 1) / int64(b[0])) * ((n + int64(b[1]) - 1) / int64(b[1]))
	if f == gpu.QuantFP8 || !streamed {
		return 4*uint64((m*n+3)/4) + 4*uint64(scales)
	}
	return 4*uint64((m*n+3)/4) + f16Bytes(scales)
}

// NewTeacher builds a synthetic Teacher like NewNet (same seeds, same non-projection
// weights) whose decoder projections are 8-bit in format: the f16 weights a streamed NewNet
// teacher holds (uniform in ±√(3/in), made on the host once per layer type and projection)
// quantized as cmf does it — cmf.QuantizeFP8 with 128×128 blocks (the public checkpoints'
// rule) or cmf.QuantizeQ8 — and shared by the layers of that type: resident nets upload them
// per layer, streamed ones at every pass, as LoadNet's 8-bit teacher. So a streamed
// NewTeacher is the 8-bit form of the streamed NewNet teacher of the same seed (TeacherGap
// compares them). format 0 is NewNet's f16 Teacher. Options and errors as NewNet, and an
// unknown format.
func NewTeacher(dev *gpu.Device, cfg arch.Config, format gpu.QuantFormat, seed uint32, opts ...nvgkit.LoadOption) (*nvgkit.Net, error) {
	if format != 0 && format != gpu.QuantFP8 && format != gpu.QuantQ8 {
		return nil, fmt.Errorf("bench.NewTeacher: unknown format %v", format)
	}
	src := &source{dev: dev, cfg: cfg, seed: seed, planes: map[planeKey]nvgkit.Plane{}, format: format, quant: map[planeKey]*nvgkit.QuantPlane{}}
	return nvgkit.BuildNet(dev, cfg, nvgkit.Teacher, src, opts...)
}

// Quant makes projection t of an 8-bit synthetic teacher (NewTeacher): the quantized host
// plane of its layer type; nil for an f16 teacher.
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
	p, err := s.hostPlane(t, k, t.Shape, true)
	if err != nil {
		return nil, err
	}
	delete(s.planes, key) // only its 8-bit form is used
	q, err := quantizePlane(t.Name, p.F16, t.Shape[0], t.Shape[1], s.format)
	if err != nil {
		return nil, err
	}
	s.quant[key] = q
	return q, nil
}

// quantizePlane quantizes the f16 weight w [out, in] to format as cmf does
// (cmf.QuantizeFP8 with DefaultFP8Block, cmf.QuantizeQ8), 128 rows per goroutine task — a
// whole FP8 block row or 128 q8 rows, so the tasks' codes and scales are the whole tensor's,
// concatenated — on every CPU.
func quantizePlane(name string, w []uint16, out, in int, format gpu.QuantFormat) (*nvgkit.QuantPlane, error) {
	const rows = 128
	parts := make([]*nvgkit.QuantPlane, (out+rows-1)/rows)
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = quantizeRows(name, w, in, i*rows, min((i+1)*rows, out), format, &parts[i])
			}
		}()
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	q := &nvgkit.QuantPlane{Format: parts[0].Format, Block: parts[0].Block}
	for _, p := range parts { // 128·in codes per part: whole u32 words but in the last
		q.Codes.U32 = append(q.Codes.U32, p.Codes.U32...)
		q.Scales.F32 = append(q.Scales.F32, p.Scales.F32...)
		q.Scales.F16 = append(q.Scales.F16, p.Scales.F16...)
	}
	return q, nil
}

// quantizeRows quantizes rows [r0, r1) of quantizePlane's w into *part.
func quantizeRows(name string, w []uint16, in, r0, r1 int, format gpu.QuantFormat, part **nvgkit.QuantPlane) error {
	chunk := w[r0*in : r1*in]
	// The f16 bits as a cmf tensor's little-endian bytes (nvg's hosts and GPUs are).
	dense, err := cmf.NewTensor(name, cmf.F16, []int{r1 - r0, in}, unsafe.Slice((*byte)(unsafe.Pointer(&chunk[0])), 2*len(chunk)))
	if err != nil {
		return err
	}
	var qt *cmf.Tensor
	if format == gpu.QuantFP8 {
		qt, err = cmf.QuantizeFP8(dense, cmf.DefaultFP8Block)
	} else {
		qt, err = cmf.QuantizeQ8(dense)
	}
	if err == nil {
		*part, err = nvgkit.QuantPlaneOf(qt)
	}
	if err != nil {
		return fmt.Errorf("%s: rows [%d, %d): %w", name, r0, r1, err)
	}
	return nil
}

// Gap is how far an 8-bit synthetic teacher's next-token distributions are from the f16
// teacher's on the same tokens (TeacherGaps; nvgkit.DistributionGap): the mean top-k KL
// (both renormalised over the f16 teacher's top-k), the top-1 agreement, and both mean
// next-token NLLs, natural logs.
type Gap struct {
	Tokens int     `json:"tokens"`
	K      int     `json:"k"`
	TopKKL float64 `json:"topk_kl_nats"`
	Top1   float64 `json:"top1_agreement"`
	RefNLL float64 `json:"f16_nll"`
	NLL    float64 `json:"nll"`
}

// TeacherGaps measures on the GPU what 8 bits cost geometry cfg's synthetic teacher: the f16
// teacher (NewNet, streamed) over windows windows of t+1 random token ids (seeded by seed),
// nb per pass, with its top-k, then each 8-bit form of dtypes (NewTeacher, streamed: the
// quantization of those very f16 weights) against it (nvgkit.TeacherDistribution,
// CompareDistributions), one net on the device at a time; "f16" in dtypes is skipped. On
// random weights and random tokens, not a language model's: it shows what the quantization
// does to the distributions at the geometry's sizes, not a model's quality. Errors: an
// unknown dtype, nb, t, windows < 1, k outside [1, 64], and the nets' and passes' errors.
func TeacherGaps(dev *gpu.Device, cfg arch.Config, dtypes []string, nb, t, k, windows int, seed uint32) (map[string]Gap, error) {
	if nb < 1 || t < 1 || windows < 1 {
		return nil, fmt.Errorf("bench.TeacherGaps: nb = %d, t = %d, windows = %d must be ≥ 1", nb, t, windows)
	}
	ids := make([][]int, windows)
	for b := range ids {
		for j := range t + 1 {
			ids[b] = append(ids[b], int(prng.Word(seed, uint32(b*(t+1)+j))%uint32(cfg.VocabSize)))
		}
	}
	dist := func(format gpu.QuantFormat, ref *nvgkit.Distribution) (*nvgkit.Distribution, error) {
		net, err := NewTeacher(dev, cfg, format, seed, nvgkit.StreamLayers())
		if err != nil {
			return nil, err
		}
		defer net.Release()
		w, err := nvgkit.NewWork(dev, net, min(nb, windows), t)
		if err != nil {
			return nil, err
		}
		defer w.Release()
		kk := k
		if ref != nil {
			kk = 1
		}
		return nvgkit.TeacherDistribution(context.Background(), net, w, ids, kk, ref, nil)
	}
	ref, err := dist(0, nil)
	if err != nil {
		return nil, fmt.Errorf("f16 teacher: %w", err)
	}
	gaps := map[string]Gap{}
	for _, dt := range dtypes {
		format, err := ParseTeacherDType(dt)
		if err != nil {
			return nil, err
		}
		if format == 0 {
			continue
		}
		d, err := dist(format, ref)
		if err != nil {
			return nil, fmt.Errorf("%s teacher: %w", dt, err)
		}
		g, err := nvgkit.CompareDistributions(ref, d)
		if err != nil {
			return nil, err
		}
		gaps[dt] = Gap{Tokens: g.Tokens, K: g.K, TopKKL: g.TopKKL, Top1: g.Top1, RefNLL: g.RefNLL, NLL: g.NLL}
	}
	return gaps, nil
}
