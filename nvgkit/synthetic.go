package nvgkit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime"
	"sync"

	"github.com/nvg-project/nvg/arch"

	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/prng"
)

// SyntheticGeometries are the names SyntheticConfig knows, smallest first: "tiny" (the
// embedded tiny teacher's geometry, for lavapipe) and the Qwen3.5 text geometries of the
// PyTorch peer (../shared/bench/torch_baseline.py).
var SyntheticGeometries = []string{"tiny", "0.8B", "4B", "9B", "27B"}

// SyntheticConfig returns the architecture of a benchmark geometry by name (see
// SyntheticGeometries). "0.8B", "4B", "9B" and "27B" are exactly torch_baseline.py's G/cfg_of:
// vocab 248320, head_dim 256, linear key/value head dims 128, conv kernel 4, full attention
// every 4th layer (layers 3, 7, …), partial rotary factor 0.25, RoPE θ 1e7, RMSNorm eps 1e-6,
// the head tied to the embedding for 0.8B and 4B and untied for 9B and 27B:
//
//	name   layers  hidden  intermediate  heads/kv  linear key/value heads
//	0.8B   24      1024    3584          8/2       16/16
//	4B     32      2560    9216          16/4      16/32
//	9B     32      4096    12288         16/4      16/32
//	27B    64      5120    17408         24/4      16/48
//
// "tiny" is cmf/tinyteacher's config (8 layers, hidden 256, vocab 8192, tied). Errors: an
// unknown name (the message lists the known ones).
func SyntheticConfig(name string) (arch.Config, error) {
	if name == "tiny" {
		raw, err := fs.ReadFile(tinyteacher.FS(), "config.json")
		if err != nil {
			return arch.Config{}, fmt.Errorf("nvgkit.SyntheticConfig: tiny: %w", err)
		}
		c, err := arch.ParseConfig(raw)
		if err != nil {
			return arch.Config{}, fmt.Errorf("nvgkit.SyntheticConfig: tiny: %w", err)
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
		return arch.Config{}, fmt.Errorf("nvgkit.SyntheticConfig: unknown geometry %q (known: %v)", name, SyntheticGeometries)
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
		return arch.Config{}, fmt.Errorf("nvgkit.SyntheticConfig: %s: %w", name, err)
	}
	return c, nil
}

// SyntheticRank is the PyTorch peer's rank_for: the rank of a P-path BLR layer [m, n] at
// bpw bits per weight, counting 32 bits of scales per row and column and 16 per rank and
// path, rounded down to a multiple of 128 and at least 128:
//
//	r = max(128, ⌊(m·n·bpw − 32·(m+n)) / (P·(m+n+16))⌋ rounded down to a multiple of 128).
func SyntheticRank(m, n int, bpw float64, paths int) int {
	r := (float64(m)*float64(n)*bpw - 32*float64(m+n)) / (float64(paths) * float64(m+n+16))
	return max(128, int(r)/128*128) // int() truncates toward zero, as Python's int()
}

// SyntheticPaths is the number of BLR paths of every compressed projection of a synthetic
// Student (as the peer's).
const SyntheticPaths = 2

// SyntheticIsBLR reports whether a synthetic Student stores projection [m, n] in BLR form:
// both dimensions above 64, as the peer's to_student (in_proj_a/b stay dense f16, frozen).
func SyntheticIsBLR(m, n int) bool { return m > 64 && n > 64 }

// SyntheticSeed sets the seed of NewSyntheticNet's random weights (default 1). The same seed
// gives the same weights on any device.
func SyntheticSeed(seed uint32) LoadOption {
	return func(c *loadConfig) { c.seed = seed }
}

// SyntheticProgress makes NewSyntheticNet call fn after each decoder layer is built (done of
// total layers), e.g. to print progress while a large model is made.
func SyntheticProgress(fn func(done, total int)) LoadOption {
	return func(c *loadConfig) { c.progress = fn }
}

// Tensor roles: the second half of each tensor's seed (with the layer index).
const (
	roleInNorm = iota + 1
	rolePostNorm
	roleGate
	roleUp
	roleDown
	roleQ // q_proj (whole)
	_     // (the teacher's old query/gate split; the blank keeps later roles' seeds)
	roleK
	roleV
	roleO
	roleQNorm
	roleKNorm
	roleQKVq // in_proj_qkv (whole)
	_        // (in_proj_qkv k rows, before the one layout)
	_        // (in_proj_qkv v rows)
	roleZ
	roleA
	roleB
	roleOut
	roleConvQ // conv1d (whole)
	_         // (conv1d k channels, before the one layout)
	_         // (conv1d v channels)
	roleALog
	roleDtBias
	roleGNorm
	roleBLR = 64 // BLR tensors: roleBLR + 16·role + 8·path + {0: h, 1: g, 2: ℓ, 3: U, 4: V}
)

// NewSyntheticNet builds a Net of architecture cfg with random weights made on the GPU by
// gpu.FillRandomUniform / gpu.FillRandomBits (no files), for the benchmark: the same layer
// structures as LoadNet's, so TeacherTopK, Step, ClipGrads and Adam run unchanged.
//
//   - Teacher: every projection an f16 plane uniform in ±√(3/in) (unit gain on unit-RMS
//     inputs); embedding (and the untied head) f16 uniform in ±2√(3/H) (logits of standard
//     deviation ≈ 2); norm gains w of (1+w) uniform in [−0.1, 0.1); the gated norm's plain
//     gain in [0.9, 1.1); conv1d in [−0.5, 0.5); A_log in [−2, 0); dt_bias in [−1, 0).
//     With StreamLayers, one set of host planes per layer type is made once on the host
//     (prng.FillUniformF16, the same generator) and shared by every layer of that type,
//     then uploaded per layer during each pass like LoadNet's streamed path (so the host→GPU
//     transfer is measured; the host holds about two layers' planes, not the model's).
//   - Student: every decoder projection with both dimensions above 64 in BLR form,
//     SyntheticPaths paths at rank SyntheticRank(m, n, 1, 2) (no rank padding), random sign
//     bits, h and g uniform in [0.75, 1.25), ℓ uniform in [0.75, 1.25)/√(P·r·n) (each path
//     contributes variance ≈ 1/P: unit gain); in_proj_a/b dense f16 and frozen; gains,
//     embedding, head, conv, A_log and dt_bias as the Teacher's. Trainables, gradients and
//     Adam moments as LoadNet's Student.
//
// Options: SyntheticSeed, SyntheticProgress, StreamLayers (Teacher only). Memory: as LoadNet
// (SyntheticMemory computes it without a device). Errors: a nil device, an invalid config,
// an unknown kind, StreamLayers with a Student, a tensor above the device's maxBufferSize or
// an allocation failure — each naming the tensor; nothing stays allocated on error.
func NewSyntheticNet(dev *gpu.Device, cfg arch.Config, kind NetKind, opts ...LoadOption) (*Net, error) {
	if dev == nil {
		return nil, errors.New("nvgkit.NewSyntheticNet: nil device")
	}
	if kind != Teacher && kind != Student {
		return nil, fmt.Errorf("nvgkit.NewSyntheticNet: unsupported net kind %v", kind)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nvgkit.NewSyntheticNet: %w", err)
	}
	lc := loadConfig{seed: 1}
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	if kind == Student && lc.streamed {
		return nil, errors.New("nvgkit.NewSyntheticNet: StreamLayers is for teachers; a Student net is always resident")
	}
	n := &Net{Kind: kind, Config: cfg, dev: dev, streamed: lc.streamed}
	if kind == Student {
		n.st = &studentState{byName: map[string]*trainable{}, byParam: map[*gpu.Buffer]*trainable{}, signs: &signNet{}}
	}
	s := &synth{n: n, seed: lc.seed, planes: map[planeKey]*param{}}
	if err := s.build(lc.progress); err != nil {
		n.Release()
		return nil, fmt.Errorf("nvgkit.NewSyntheticNet: %w", err)
	}
	return n, nil
}

// synth builds a synthetic net.
type synth struct {
	n      *Net
	seed   uint32
	r      *gpu.Recorder // the current layer's fills
	L      *layer
	ps     []*param
	planes map[planeKey]*param // streamed teacher: host planes per (layer type, role)
}

type planeKey struct {
	full bool
	role int
}

// tensorSeed is the seed of a tensor: a hash of the net's seed, the layer (−1: shared
// tensors) and the role.
func (s *synth) tensorSeed(layer, role int) uint32 {
	return prng.Word(s.seed, uint32(layer+1)<<10|uint32(role))
}

// newBuf allocates a GPU tensor.
func (s *synth) newBuf(label string, dt gpu.DType, shape ...int) (*gpu.Buffer, error) {
	return s.n.dev.NewBuffer(label, dt, shape...)
}

// tensor makes a weight param of the current layer: on the GPU (filled by s.r) or, for a
// streamed teacher, host planes shared by all layers of the same type. half: f16 values
// uniform in ±hi (lo must be −hi); else f32 uniform in [lo, hi).
func (s *synth) tensor(label string, role int, half bool, lo, hi float64, shape ...int) (*param, error) {
	p := &param{label: label, shape: shape, half: half}
	s.ps = append(s.ps, p)
	if s.n.streamed {
		full := s.L.attn != nil
		key := planeKey{full, role}
		if q := s.planes[key]; q != nil {
			p.f16, p.f32 = q.f16, q.f32
			return p, nil
		}
		seed := s.tensorSeed(s.L.index, role)
		numel := 1
		for _, d := range shape {
			numel *= d
		}
		var err error
		if half {
			p.f16 = make([]uint16, numel)
			err = parallelFill(numel, func(a, b int) error {
				return prng.FillUniformF16(p.f16[a:b], seed, uint32(a), hi)
			})
		} else {
			p.f32 = make([]float32, numel)
			err = parallelFill(numel, func(a, b int) error {
				return prng.FillUniformF32(p.f32[a:b], seed, uint32(a), lo, hi)
			})
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		s.planes[key] = p
		return p, nil
	}
	dt := gpu.F32
	if half {
		dt = gpu.F16
	}
	b, err := s.newBuf(label, dt, shape...)
	if err != nil {
		return nil, err
	}
	p.buf = b
	if err := gpu.FillRandomUniform(s.r, b, s.tensorSeed(s.L.index, role), 0, lo, hi); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
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

// weight makes an f16 projection [out, in] with unit gain (Teacher, or a Student's dense one).
func (s *synth) weight(label string, role, out, in int) (linear, error) {
	p, err := s.tensor(label, role, true, -math.Sqrt(3/float64(in)), math.Sqrt(3/float64(in)), out, in)
	if err != nil {
		return linear{}, err
	}
	return linear{w: p, name: label, out: out, in: in}, nil
}

// vec makes an f32 vector parameter uniform in [lo, hi).
func (s *synth) vec(label string, role int, lo, hi float64, shape ...int) (*param, error) {
	return s.tensor(label, role, false, lo, hi, shape...)
}

// studentLinear makes a Student projection: BLR when SyntheticIsBLR, else dense f16 frozen.
func (s *synth) studentLinear(label string, role, out, in int) (linear, error) {
	if !SyntheticIsBLR(out, in) {
		return s.weight(label, role, out, in)
	}
	n := s.n
	rank := SyntheticRank(out, in, 1, SyntheticPaths)
	bl := &gpu.BLRLayer{M: out, N: in, Rank: rank}
	n.st.blrLayers = append(n.st.blrLayers, bl) // released with the net, even half-built
	s.L.blrs = append(s.L.blrs, bl)
	lc := 1 / math.Sqrt(float64(SyntheticPaths*rank*in))
	for p := 0; p < SyntheticPaths; p++ {
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
			b, err := s.newBuf(fmt.Sprintf("%s.%s%d", label, f.key, p), gpu.F32, f.size)
			if err != nil {
				return linear{}, err
			}
			*f.dst = b
			if err := gpu.FillRandomUniform(s.r, b, s.tensorSeed(s.L.index, f.seed), 0, f.lo, f.hi); err != nil {
				return linear{}, fmt.Errorf("%s: %w", label, err)
			}
		}
		// Sign bits: the payload's bit rows end to end, ceil(bits/32) words (as gpu.UploadBLR).
		for _, f := range []struct {
			dst  **gpu.Buffer
			key  string
			bits int
			seed int
		}{{&q.U, "U", out * rank, base + 3}, {&q.V, "V", rank * in, base + 4}} {
			words := (f.bits/8 + 3) / 4
			b, err := s.newBuf(fmt.Sprintf("%s.%s%d", label, f.key, p), gpu.U32, words)
			if err != nil {
				return linear{}, err
			}
			*f.dst = b
			if err := gpu.FillRandomBits(s.r, b, s.tensorSeed(s.L.index, f.seed), 0); err != nil {
				return linear{}, fmt.Errorf("%s: %w", label, err)
			}
		}
	}
	l := &linear{blr: bl, name: label, out: out, in: in, signs: &blrSigns{net: s.n.st.signs}, layer: s.L.index, liveRank: rank}
	for p, q := range bl.Paths {
		var g gpu.BLRGrad
		for _, x := range []struct {
			key   string
			param *gpu.Buffer
			dst   **gpu.Buffer
		}{{arch.ScaleH, q.H, &g.H}, {arch.ScaleL, q.L, &g.L}, {arch.ScaleG, q.G, &g.G}} {
			tn := arch.MetricName(label, p, x.key)
			if err := n.addTrainable(tn, x.param, nil, true, []int{x.param.Len()}); err != nil {
				return linear{}, err
			}
			*x.dst = n.st.byName[tn].grad
		}
		l.grads = append(l.grads, g)
	}
	n.st.blrs = append(n.st.blrs, l)
	return *l, nil
}

// build makes the shared tensors and every layer, one submit per layer.
func (s *synth) build(progress func(done, total int)) error {
	n, c := s.n, s.n.Config
	H, V := c.HiddenSize, c.VocabSize
	l := c.Layout()
	// Shared tensors: always on the GPU.
	s.r = n.dev.Begin()
	s.L = &layer{index: -1}
	ea := 2 * math.Sqrt(3/float64(H))
	var err error
	if n.embed, err = s.newBuf(l.EmbedTokens.Name, gpu.F16, V, H); err != nil {
		return err
	}
	if err := gpu.FillRandomUniform(s.r, n.embed, s.tensorSeed(-1, 1), 0, -ea, ea); err != nil {
		return err
	}
	n.head = n.embed
	if l.LMHead != nil {
		if n.head, err = s.newBuf(l.LMHead.Name, gpu.F16, V, H); err != nil {
			return err
		}
		if err := gpu.FillRandomUniform(s.r, n.head, s.tensorSeed(-1, 2), 0, -ea, ea); err != nil {
			return err
		}
	}
	if n.finalNorm, err = s.newBuf(l.Norm.Name, gpu.F32, H); err != nil {
		return err
	}
	if err := gpu.FillRandomUniform(s.r, n.finalNorm, s.tensorSeed(-1, 3), 0, -0.1, 0.1); err != nil {
		return err
	}
	if err := s.r.Submit(); err != nil {
		return err
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		if err := s.layer(i); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if progress != nil {
			progress(i+1, c.NumHiddenLayers)
		}
	}
	if n.Kind == Student {
		if err := n.addTrainable(l.Norm.Name, n.finalNorm, nil, false, []int{H}); err != nil {
			return err
		}
		if err := n.finishStudent(); err != nil {
			return err
		}
	}
	return n.dev.Sync()
}

// layer builds decoder layer i (its fills recorded into one submit).
func (s *synth) layer(i int) (err error) {
	n, c := s.n, s.n.Config
	T := c.Layer(i)
	student := n.Kind == Student
	s.r = n.dev.Begin()
	s.ps = nil
	L := &layer{index: i}
	if c.IsFullAttention(i) {
		L.attn = &attnWeights{}
	} else {
		L.delta = &deltaWeights{}
	}
	s.L = L
	defer func() {
		L.params = s.ps
		n.layers = append(n.layers, L) // released with the net, even half-built
		if !n.streamed {
			L.uploaded = true
			n.onGPU++
			n.maxOnGPU = max(n.maxOnGPU, n.onGPU)
		}
		if err != nil {
			s.r.Discard()
			return
		}
		err = s.r.Submit()
	}()
	lin := s.weight
	if student {
		lin = s.studentLinear
	}
	type lspec struct {
		dst       *linear
		name      string
		role      int
		out, in   int
		forceDens bool
	}
	// whole is projection t as one linear. A projection the architecture keeps dense
	// (arch.Tensor.BLR false: in_proj_a/b) is dense in a Student too.
	whole := func(dst *linear, t arch.Tensor, role int) lspec {
		return lspec{dst, t.Name, role, t.Shape[0], t.Shape[1], !t.BLR}
	}
	do := func(specs []lspec) error {
		for _, sp := range specs {
			var l linear
			var err error
			if sp.forceDens {
				l, err = s.weight(sp.name, sp.role, sp.out, sp.in)
			} else {
				l, err = lin(sp.name, sp.role, sp.out, sp.in)
			}
			if err != nil {
				return err
			}
			*sp.dst = l
		}
		return nil
	}
	var gains []*param
	if L.inNorm, err = s.vec(T.InputLayernorm.Name, roleInNorm, -0.1, 0.1, T.InputLayernorm.Shape...); err != nil {
		return err
	}
	if L.postNorm, err = s.vec(T.PostAttentionLayernorm.Name, rolePostNorm, -0.1, 0.1, T.PostAttentionLayernorm.Shape...); err != nil {
		return err
	}
	gains = append(gains, L.inNorm, L.postNorm)
	if err := do([]lspec{
		whole(&L.gate, T.MLP.GateProj, roleGate),
		whole(&L.up, T.MLP.UpProj, roleUp),
		whole(&L.down, T.MLP.DownProj, roleDown),
	}); err != nil {
		return err
	}
	if a, t := L.attn, T.SelfAttn; a != nil {
		specs := []lspec{whole(&a.k, t.KProj, roleK), whole(&a.v, t.VProj, roleV), whole(&a.o, t.OProj, roleO)}
		specs = append(specs, whole(&a.qg, t.QProj, roleQ))
		if err := do(specs); err != nil {
			return err
		}
		if a.qNorm, err = s.vec(t.QNorm.Name, roleQNorm, -0.1, 0.1, t.QNorm.Shape...); err != nil {
			return err
		}
		if a.kNorm, err = s.vec(t.KNorm.Name, roleKNorm, -0.1, 0.1, t.KNorm.Shape...); err != nil {
			return err
		}
		gains = append(gains, a.qNorm, a.kNorm)
	} else {
		d, t := L.delta, T.LinearAttn
		C, K := t.Conv1d.Shape[0], t.Conv1d.Shape[2] // [C, 1, K], held as [C, K]
		specs := []lspec{whole(&d.z, t.InProjZ, roleZ), whole(&d.b, t.InProjB, roleB), whole(&d.a, t.InProjA, roleA), whole(&d.out, t.OutProj, roleOut)}
		specs = append(specs, whole(&d.qkv, t.InProjQKV, roleQKVq))
		if err := do(specs); err != nil {
			return err
		}
		if d.conv, err = s.vec(t.Conv1d.Name, roleConvQ, -0.5, 0.5, C, K); err != nil {
			return err
		}
		if d.aLog, err = s.vec(t.ALog.Name, roleALog, -2, 0, t.ALog.Shape...); err != nil {
			return err
		}
		if d.dtBias, err = s.vec(t.DtBias.Name, roleDtBias, -1, 0, t.DtBias.Shape...); err != nil {
			return err
		}
		if d.norm, err = s.vec(t.Norm.Name, roleGNorm, 0.9, 1.1, t.Norm.Shape...); err != nil {
			return err
		}
		gains = append(gains, d.norm)
	}
	if student {
		for _, g := range gains {
			if err := n.addTrainable(g.label, g.buf, nil, false, g.shape); err != nil {
				return err
			}
		}
	}
	return nil
}
