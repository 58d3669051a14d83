package bench

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"sync"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/prng"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// Geometries are the names Config knows, smallest first: "tiny" (the embedded default
// teacher's geometry, for lavapipe) and the Qwen3.5 text geometries of the PyTorch peer
// (../shared/bench/torch_baseline.py).
var Geometries = []string{"tiny", "0.8B", "4B", "9B", "27B"}

// Config returns the architecture of a benchmark geometry by name (see Geometries). "0.8B",
// "4B", "9B" and "27B" are exactly torch_baseline.py's G/cfg_of: vocab 248320, head_dim 256,
// linear key/value head dims 128, conv kernel 4, full attention every 4th layer (layers 3,
// 7, …), partial rotary factor 0.25, RoPE θ 1e7, RMSNorm eps 1e-6, the head tied to the
// embedding for 0.8B and 4B and untied for 9B and 27B:
//
//	name   layers  hidden  intermediate  heads/kv  linear key/value heads
//	0.8B   24      1024    3584          8/2       16/16
//	4B     32      2560    9216          16/4      16/32
//	9B     32      4096    12288         16/4      16/32
//	27B    64      5120    17408         24/4      16/48
//
// "tiny" is the embedded default teacher's config (train.DefaultModelConfig: 8 layers,
// hidden 256, vocab 8192, tied). Errors: an unknown name (the message lists the known ones).
func Config(name string) (arch.Config, error) {
	if name == "tiny" {
		c, err := train.DefaultModelConfig()
		if err != nil {
			return arch.Config{}, fmt.Errorf("bench.Config: tiny: %w", err)
		}
		return c, nil
	}
	g := map[string]struct{ h, i, l, nh, nkv, hk, hv int }{
		"0.8B": {1024, 3584, 24, 8, 2, 16, 16},
		"4B":   {2560, 9216, 32, 16, 4, 16, 32},
		"9B":   {4096, 12288, 32, 16, 4, 16, 32},
		"27B":  {5120, 17408, 64, 24, 4, 16, 48},
	}
	s, ok := g[name]
	if !ok {
		return arch.Config{}, fmt.Errorf("bench.Config: unknown geometry %q (known: %v)", name, Geometries)
	}
	c := arch.Config{
		ModelType: "qwen3_5_text", VocabSize: 248320, HiddenSize: s.h, NumHiddenLayers: s.l, IntermediateSize: s.i,
		NumAttentionHeads: s.nh, NumKeyValueHeads: s.nkv, HeadDim: 256,
		LinearNumKeyHeads: s.hk, LinearNumValueHeads: s.hv, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		LinearConvKernelDim: 4, RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25,
		TieWordEmbeddings: name == "0.8B" || name == "4B", FullAttentionInterval: 4,
	}
	for i := 0; i < s.l; i++ {
		t := arch.LinearAttention
		if (i+1)%4 == 0 {
			t = arch.FullAttention
		}
		c.LayerTypes = append(c.LayerTypes, t)
	}
	if err := c.Validate(); err != nil {
		return arch.Config{}, fmt.Errorf("bench.Config: %s: %w", name, err)
	}
	return c, nil
}

// Rank is the PyTorch peer's rank_for: the rank of a P-path BLR layer [m, n] at bpw bits per
// weight, counting 32 bits of scales per row and column and 16 per rank and path, rounded
// down to a multiple of 128 and at least 128:
//
//	r = max(128, ⌊(m·n·bpw − 32·(m+n)) / (P·(m+n+16))⌋ rounded down to a multiple of 128).
func Rank(m, n int, bpw float64, paths int) int {
	r := (float64(m)*float64(n)*bpw - 32*float64(m+n)) / (float64(paths) * float64(m+n+16))
	return max(128, int(r)/128*128) // int() truncates toward zero, as Python's int()
}

// Paths is the number of BLR paths of every compressed projection of a synthetic Student
// (as the peer's).
const Paths = 2

// IsBLR reports whether a synthetic Student stores projection [m, n] in BLR form: both
// dimensions above 64, as the peer's to_student (in_proj_a/b stay dense f16, frozen).
func IsBLR(m, n int) bool { return m > 64 && n > 64 }

// Tensor roles: the second half of each tensor's seed (with the layer index). The gaps are
// retired roles (the teacher's old query/gate split of q_proj and the q, k, v splits of
// in_proj_qkv and conv1d, before the one layout), kept so that every other tensor keeps its
// seed. BLR tensors use roleBLR + 16·role + 8·path + {0: h, 1: g, 2: ℓ, 3: U, 4: V}.
const (
	roleInNorm, rolePostNorm, roleGate, roleUp, roleDown, roleQ = 1, 2, 3, 4, 5, 6
	roleK, roleV, roleO, roleQNorm, roleKNorm, roleQKVq         = 8, 9, 10, 11, 12, 13
	roleZ, roleA, roleB, roleOut, roleConvQ                     = 16, 17, 18, 19, 20
	roleALog, roleDtBias, roleGNorm, roleBLR                    = 23, 24, 25, 64
)

// NewNet builds a net of architecture cfg with random weights made on the GPU by
// gpu.FillRandomUniform / gpu.FillRandomBits (no files), for the benchmark:
// nvgkit.BuildNet with a random Source, so the layers are LoadNet's and TeacherTopK, Step,
// ClipGrads and Adam run unchanged. The same seed gives the same weights on any device.
//
//   - Teacher: every projection an f16 plane uniform in ±√(3/in) (unit gain on unit-RMS
//     inputs); embedding (and the untied head) f16 uniform in ±2√(3/H) (logits of standard
//     deviation ≈ 2); norm gains w of (1+w) uniform in [−0.1, 0.1); the gated norm's plain
//     gain in [0.9, 1.1); conv1d in [−0.5, 0.5); A_log in [−2, 0); dt_bias in [−1, 0).
//     With nvgkit.StreamLayers, one set of host planes per layer type is made once on the
//     host (prng.FillUniformF16, the same generator) and shared by every layer of that type,
//     then uploaded per layer during each pass like LoadNet's streamed path (so the host→GPU
//     transfer is measured; the host holds about two layers' planes, the embedding and the
//     head, not the model's).
//   - Student: every decoder projection with both dimensions above 64 in BLR form, Paths
//     paths at rank Rank(m, n, 1, 2) (no rank padding), random sign bits, h and g uniform in
//     [0.75, 1.25), ℓ uniform in [0.75, 1.25)/√(P·r·n) (each path contributes variance ≈ 1/P:
//     unit gain); in_proj_a/b dense f16 and frozen; gains, embedding, head, conv, A_log and
//     dt_bias as the Teacher's. Trainables, gradients and Adam moments as LoadNet's Student.
//
// Options: nvgkit.StreamLayers (Teacher only), nvgkit.LoadProgress. Memory: as LoadNet (Memory
// computes it without a device). Errors: BuildNet's — a nil device, an invalid config, an
// unknown kind, StreamLayers with a Student, a tensor above the device's maxBufferSize or an
// allocation failure, each naming the tensor; nothing stays allocated on error.
func NewNet(dev *gpu.Device, cfg arch.Config, kind nvgkit.NetKind, seed uint32, opts ...nvgkit.LoadOption) (*nvgkit.Net, error) {
	src := &source{dev: dev, cfg: cfg, seed: seed, planes: map[planeKey]nvgkit.Plane{}}
	return nvgkit.BuildNet(dev, cfg, kind, src, opts...)
}

// source is NewNet's nvgkit.Source: each tensor filled on the GPU (one submit per layer) or,
// for a streamed teacher, host planes shared by the layers of one type.
type source struct {
	dev    *gpu.Device
	cfg    arch.Config
	seed   uint32
	layer  int
	full   bool                      // the current layer is full attention
	kinds  map[string]tensorKind     // the current layer's tensors by name
	r      *gpu.Recorder             // the current layer's fills
	drop   []func()                  // what to release once the layer's recording is discarded
	planes map[planeKey]nvgkit.Plane // streamed teacher: host planes per (layer type, role)
	// format is an 8-bit teacher's projection format (NewTeacher; 0: f16 planes), quant its
	// host planes per (layer type, role).
	format gpu.QuantFormat
	quant  map[planeKey]*nvgkit.QuantPlane
}

type planeKey struct {
	shared, full bool // shared: a tensor of layer −1 (the embedding's host plane)
	role         int
}

// tensorKind is a tensor's role (its seed) and the range of its random values.
type tensorKind struct {
	role   int
	lo, hi float64
}

// BeginLayer starts layer's recorder and its table of tensors.
func (s *source) BeginLayer(layer int) error {
	s.layer, s.r, s.drop = layer, s.dev.Begin(), nil
	s.kinds = map[string]tensorKind{}
	add := func(t arch.Tensor, role int, lo, hi float64) { s.kinds[t.Name] = tensorKind{role, lo, hi} }
	if layer < 0 {
		l := s.cfg.Layout()
		ea := 2 * math.Sqrt(3/float64(s.cfg.HiddenSize))
		add(l.EmbedTokens, 1, -ea, ea)
		if l.LMHead != nil {
			add(*l.LMHead, 2, -ea, ea)
		}
		add(l.Norm, 3, -0.1, 0.1)
		return nil
	}
	T := s.cfg.Layer(layer)
	s.full = T.SelfAttn != nil
	gains := map[int]arch.Tensor{roleInNorm: T.InputLayernorm, rolePostNorm: T.PostAttentionLayernorm}
	projs := map[int]arch.Tensor{roleGate: T.MLP.GateProj, roleUp: T.MLP.UpProj, roleDown: T.MLP.DownProj}
	if a := T.SelfAttn; a != nil {
		maps.Copy(projs, map[int]arch.Tensor{roleQ: a.QProj, roleK: a.KProj, roleV: a.VProj, roleO: a.OProj})
		maps.Copy(gains, map[int]arch.Tensor{roleQNorm: a.QNorm, roleKNorm: a.KNorm})
	} else {
		d := T.LinearAttn
		maps.Copy(projs, map[int]arch.Tensor{roleQKVq: d.InProjQKV, roleZ: d.InProjZ, roleB: d.InProjB, roleA: d.InProjA, roleOut: d.OutProj})
		add(d.Conv1d, roleConvQ, -0.5, 0.5)
		add(d.ALog, roleALog, -2, 0)
		add(d.DtBias, roleDtBias, -1, 0)
		add(d.Norm, roleGNorm, 0.9, 1.1)
	}
	for role, t := range gains { // w of the zero-centred (1 + w)
		add(t, role, -0.1, 0.1)
	}
	for role, t := range projs { // unit gain on unit-RMS inputs
		a := math.Sqrt(3 / float64(t.Shape[1]))
		add(t, role, -a, a)
	}
	return nil
}

// kindOf is tensor t's role and range in the current layer.
func (s *source) kindOf(t arch.Tensor) (tensorKind, error) {
	k, ok := s.kinds[t.Name]
	if !ok {
		return k, fmt.Errorf("bench: no random values for tensor %s of layer %d", t.Name, s.layer)
	}
	return k, nil
}

// EndLayer submits the layer's fills, or discards them (and releases what the failed tensor
// had allocated) when the layer failed.
func (s *source) EndLayer(_ int, err error) error {
	if err != nil {
		s.r.Discard()
		for _, f := range s.drop {
			f()
		}
		return nil
	}
	return s.r.Submit()
}

// tensorSeed is the seed of a tensor: a hash of the net's seed, the layer (−1: shared
// tensors) and the role.
func (s *source) tensorSeed(role int) uint32 {
	return prng.Word(s.seed, uint32(s.layer+1)<<10|uint32(role))
}

// Dense makes tensor t: on the GPU, filled by the layer's recorder, or (host) host planes
// shared by all layers of the same type. Projections and the embedding and head are f16
// uniform in ±hi; the rest f32 uniform in [lo, hi).
func (s *source) Dense(t arch.Tensor, shape []int, half, host bool) (nvgkit.Plane, error) {
	k, err := s.kindOf(t)
	if err != nil {
		return nvgkit.Plane{}, err
	}
	if host {
		return s.hostPlane(t, k, shape, half)
	}
	dt := gpu.F32
	if half {
		dt = gpu.F16
	}
	b, err := s.dev.NewBuffer(t.Name, dt, shape...)
	if err != nil {
		return nvgkit.Plane{}, err
	}
	if err := gpu.FillRandomUniform(s.r, b, s.tensorSeed(k.role), 0, k.lo, k.hi); err != nil {
		s.drop = append(s.drop, b.Release)
		return nvgkit.Plane{}, fmt.Errorf("%s: %w", t.Name, err)
	}
	return nvgkit.Plane{Buf: b}, nil
}

// hostPlane makes (once per layer type and role) the host values of tensor t.
func (s *source) hostPlane(t arch.Tensor, k tensorKind, shape []int, half bool) (nvgkit.Plane, error) {
	key := planeKey{s.layer < 0, s.full, k.role}
	if p, ok := s.planes[key]; ok {
		return p, nil
	}
	seed := s.tensorSeed(k.role)
	numel := 1
	for _, d := range shape {
		numel *= d
	}
	var p nvgkit.Plane
	var err error
	if half {
		p.F16 = make([]uint16, numel)
		err = parallelFill(numel, func(a, b int) error { return prng.FillUniformF16(p.F16[a:b], seed, uint32(a), k.hi) })
	} else {
		p.F32 = make([]float32, numel)
		err = parallelFill(numel, func(a, b int) error { return prng.FillUniformF32(p.F32[a:b], seed, uint32(a), k.lo, k.hi) })
	}
	if err != nil {
		return nvgkit.Plane{}, fmt.Errorf("%s: %w", t.Name, err)
	}
	s.planes[key] = p
	return p, nil
}

// parallelFill runs fill over [0, n) in chunks on every CPU.
func parallelFill(n int, fill func(a, b int) error) error {
	const chunk = 1 << 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for a := 0; a < n; a += chunk {
		b := min(n, a+chunk)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fill(a, b); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// BLR makes a Student's projection t in BLR form when the architecture compresses it and
// IsBLR holds: Paths paths at Rank(m, n, 1, Paths), no padding; else nil (dense).
func (s *source) BLR(t arch.Tensor) (*gpu.BLRLayer, int, error) {
	out, in := t.Shape[0], t.Shape[1]
	if !t.BLR || !IsBLR(out, in) {
		return nil, 0, nil
	}
	k, err := s.kindOf(t)
	if err != nil {
		return nil, 0, err
	}
	rank := Rank(out, in, 1, Paths)
	bl := &gpu.BLRLayer{M: out, N: in, Rank: rank}
	if err := s.fillBLR(t.Name, k.role, bl); err != nil {
		s.drop = append(s.drop, bl.Release)
		return nil, 0, err
	}
	return bl, rank, nil
}

// fillBLR allocates and fills every path of bl (seeds roleBLR + 16·role + 8·path + …).
func (s *source) fillBLR(name string, role int, bl *gpu.BLRLayer) error {
	out, in, rank := bl.M, bl.N, bl.Rank
	lc := 1 / math.Sqrt(float64(Paths*rank*in))
	for p := 0; p < Paths; p++ {
		bl.Paths = append(bl.Paths, gpu.BLRLayerPath{})
		q := &bl.Paths[p]
		base := roleBLR + 16*role + 8*p
		for _, f := range []struct {
			dst    **gpu.Buffer
			key    string
			size   int
			lo, hi float64
			seed   int
		}{{&q.H, "h", out, 0.75, 1.25, base}, {&q.G, "g", in, 0.75, 1.25, base + 1}, {&q.L, "l", rank, 0.75 * lc, 1.25 * lc, base + 2}} {
			b, err := s.dev.NewBuffer(fmt.Sprintf("%s.%s%d", name, f.key, p), gpu.F32, f.size)
			if err != nil {
				return err
			}
			*f.dst = b
			if err := gpu.FillRandomUniform(s.r, b, s.tensorSeed(f.seed), 0, f.lo, f.hi); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		// Sign bits: the payload's bit rows end to end, ceil(bits/32) words (as gpu.UploadBLR).
		for _, f := range []struct {
			dst  **gpu.Buffer
			key  string
			bits int
			seed int
		}{{&q.U, "U", out * rank, base + 3}, {&q.V, "V", rank * in, base + 4}} {
			b, err := s.dev.NewBuffer(fmt.Sprintf("%s.%s%d", name, f.key, p), gpu.U32, (f.bits/8+3)/4)
			if err != nil {
				return err
			}
			*f.dst = b
			if err := gpu.FillRandomBits(s.r, b, s.tensorSeed(f.seed), 0); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}
