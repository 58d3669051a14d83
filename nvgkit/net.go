package nvgkit

import (
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/x448/float16"
)

// NetKind says how a Net stores its projections on the GPU.
type NetKind int

const (
	// Teacher holds every linear weight — the projections of every layer, the embedding and
	// the (untied) head — as IEEE f16 planes in the PyTorch [out, in] layout, and the norm
	// gains, conv1d weights, A_log and dt_bias in f32. A projection the model stores in 8
	// bits (cmf's fp8 or q8, DESIGN.md §4 "Quantized weights") stays 8-bit on the GPU: its
	// codes and scales, dequantized inside the GEMM's tile loads (gpu.LinearQuant). The
	// other weights must be dense (f32, f16, bf16 or f64, or quantized ones, dequantized at
	// load) and finite within f16's range.
	Teacher NetKind = iota
	// Student is a distillation student (DESIGN.md §6): every BLR projection (dtype blr in the
	// model) as a gpu.BLRLayer whose scales h, ℓ, g (F32) train and whose sign bits U, V
	// stay frozen; every dense projection (in_proj_a/b, and any linear left uncompressed) as a
	// frozen f16 plane; every RMSNorm gain (input, post-attention, q_norm, k_norm, the
	// GatedDeltaNet gated norm, the final norm) as a trainable F32 vector; the embedding and
	// the (untied) head f16 and frozen; conv1d, A_log and dt_bias F32 and frozen. Each
	// trainable has an F32 gradient buffer and Adam's F32 moments m and v of its length.
	// A dense model loads as a Student too (only its gains train).
	Student
)

// String is "teacher" or "student".
func (k NetKind) String() string {
	switch k {
	case Teacher:
		return "teacher"
	case Student:
		return "student"
	}
	return fmt.Sprintf("NetKind(%d)", int(k))
}

// LoadOption changes how LoadNet and BuildNet place the weights.
type LoadOption func(*loadConfig)

type loadConfig struct {
	streamed bool
	progress func(done, total int) // LoadProgress
}

// LoadProgress makes LoadNet and BuildNet call fn after each decoder layer is built (done of
// total layers), e.g. to print progress while a large model is made.
func LoadProgress(fn func(done, total int)) LoadOption {
	return func(c *loadConfig) { c.progress = fn }
}

// StreamLayers makes LoadNet keep the decoder layers' weights in host memory (as the f16/f32
// planes the GPU uses, or an 8-bit projection's codes and scales) and upload them one layer
// at a time during each pass: layer l+1 is uploaded while layer l computes, and layer l is
// released after it, so at most two layers' weights are on the GPU at once. The embedding
// and the head stay on the host too: a pass uploads the embedding rows it gathers, and the
// head a block of vocabulary rows at a time (HeadBlockRows: at most half of the two largest
// layers' bytes each, block b+1 going up while block b computes), so the GPU holds the final
// norm, two layers or two head blocks, and the work. The results are bit-identical to the
// resident mode; it lets a teacher larger than GPU memory run, at the price of re-uploading
// every layer and the head on every pass.
func StreamLayers() LoadOption { return func(c *loadConfig) { c.streamed = true } }

// Net is a Qwen3.5 text model on the GPU (DESIGN.md §3), loaded by LoadNet.
//
// Both kinds store every tensor whole, as the checkpoint holds it (arch.DecoderLayer): q_proj
// with its query and gate rows interleaved per head, in_proj_qkv and conv1d over all q, k, v
// channels; the layer recipe splits their outputs on the GPU (SplitQueryGate, the conv's column blocks;
// DESIGN.md §3 — a BLR weight cannot be split by rows, its ℓ and g are shared). A Net is
// driven by one goroutine at a time; Release frees its GPU memory.
type Net struct {
	// Kind is how the projections are stored.
	Kind NetKind
	// Config is the architecture (validated).
	Config arch.Config

	dev      *gpu.Device
	streamed bool
	embed    *gpu.Buffer // F16 [vocab, H]; nil when embedHost holds it
	head     *gpu.Buffer // F16 [vocab, H]; == embed when tied; nil when headHost holds it
	// embedHost is the f16 embedding [vocab·H] of a streamed net, kept on the host: a pass
	// gathers its rows there and uploads them (embedInto), so the GPU holds one [rows, H]
	// input instead of the vocabulary's rows (2.4 GiB at the 27B geometry). headHost is its
	// f16 head [vocab·H] (embedHost when tied), uploaded a block of rows at a time (runHead).
	embedHost, headHost []uint16
	finalNorm           *gpu.Buffer // F32 [H]
	layers              []*layer
	released            bool
	// onGPU counts the layers uploaded now; maxOnGPU the most at once since LoadNet.
	onGPU, maxOnGPU int
	stager          *gpu.Stager   // a streamed net's uploads (uploadStreamed)
	uploaded        uint64        // bytes the stager has uploaded (UploadedBytes)
	st              *studentState // Student only
	warnings        []string      // Warnings
}

// param is one weight tensor of a layer: its GPU buffer while uploaded, and its host plane
// when the net streams layers (exactly the one of f16, f32 and u32 that its dtype names is
// set then).
type param struct {
	label string
	shape []int
	dtype gpu.DType // F16, F32, or U32 (an 8-bit projection's codes, four per word)
	f16   []uint16
	f32   []float32
	u32   []uint32
	buf   *gpu.Buffer
}

func (p *param) bytes() uint64 {
	n := 1
	for _, s := range p.shape {
		n *= s
	}
	if p.dtype == gpu.F16 {
		return uint64(2*n+3) &^ 3
	}
	return uint64(4 * n)
}

func (p *param) upload(d *gpu.Device) error {
	if p.buf != nil {
		return nil
	}
	var err error
	switch p.dtype {
	case gpu.F16:
		p.buf, err = d.UploadF16(p.label, p.f16, p.shape...)
	case gpu.U32:
		p.buf, err = d.UploadUint32(p.label, p.u32, p.shape...)
	default:
		p.buf, err = d.UploadFloat32(p.label, p.f32, p.shape...)
	}
	return err
}

// dropHost forgets the host plane (once the GPU copy is the only one).
func (p *param) dropHost() { p.f16, p.f32, p.u32 = nil, nil, nil }

func (p *param) release() {
	if p.buf != nil {
		p.buf.Release()
		p.buf = nil
	}
}

// linear is one projection y = x·Wᵀ, W [out, in]. A Teacher holds W as an f16 plane (w) or
// as 8-bit codes and scales (q); a Student holds either an f16 plane (frozen) or the BLR
// factors (blr, with the metric's gradient buffers grads, one per path), behind the same
// apply.
type linear struct {
	w       *param
	q       *quantLinear
	blr     *gpu.BLRLayer
	grads   []gpu.BLRGrad
	name    string // the HF tensor name
	out, in int
	// signs is the BLR projection's sign-learning state (signs.go; shared by the copies of
	// the linear), layer its decoder layer and liveRank its live ranks.
	signs           *blrSigns
	layer, liveRank int
}

// apply records y = x·Wᵀ on rows rows.
func (l *linear) apply(r *gpu.Recorder, x, y *gpu.Buffer, rows int) error {
	if l.blr != nil {
		return gpu.BLRForward(r, l.blr, x, y, gpu.BLRKept{}, rows)
	}
	if l.q != nil {
		return gpu.LinearQuant(r, x, l.q.weight(l.out, l.in), y, rows)
	}
	return gpu.Linear(r, x, l.w.buf, y, rows, l.in, l.out)
}

// quantLinear is an 8-bit projection of a Teacher (DESIGN.md §4, "Quantized weights"): its
// codes (U32, four per word) and scales (F32 or F16, one per block) as params, dequantized
// inside gpu.LinearQuant's tile loads.
type quantLinear struct {
	codes, scales *param
	format        gpu.QuantFormat
	block         [2]int
}

// weight is the uploaded weight [out, in] as gpu.LinearQuant takes it.
func (q *quantLinear) weight(out, in int) gpu.QuantWeight {
	return gpu.QuantWeight{Codes: q.codes.buf, Scales: q.scales.buf, Format: q.format, Out: out, In: in, Block: q.block}
}

// backward records dx = dy·W (overwritten) for y = x·Wᵀ and, for a BLR linear, adds the
// metric's gradients into l.grads (kept: what the forward kept of t1 and c per path, nil
// slices to recompute them) and records the sign part when sign learning or a capture is on
// (its dt2 reused from the metric's backward).
func (l *linear) backward(r *gpu.Recorder, x *gpu.Buffer, kept gpu.BLRKept, dy, dx *gpu.Buffer, rows int) error {
	if l.q != nil { // a Student's projections are never 8-bit (modelSource dequantizes them)
		return fmt.Errorf("projection %s: no backward through an 8-bit weight", l.name)
	}
	if l.blr == nil {
		return gpu.LinearT(r, dy, l.w.buf, dx, rows, l.in, l.out)
	}
	grads, dt2 := l.grads, []*gpu.Buffer(nil)
	if l.signs.active() {
		grads = append([]gpu.BLRGrad(nil), l.grads...)
		dt2 = make([]*gpu.Buffer, len(grads))
		for p := range grads {
			b, err := r.Temp("student dt2", gpu.F32, rows, l.blr.Rank)
			if err != nil {
				return err
			}
			grads[p].DT2, dt2[p] = b, b
		}
	}
	if err := gpu.BLRBackward(r, l.blr, x, kept, dy, dx, grads, rows); err != nil {
		return err
	}
	return l.signs.record(r, l.blr, x, kept.T1, dt2, dy, rows)
}

// layer holds the weights of one decoder layer, one field per checkpoint tensor
// (arch.DecoderLayer), the same for both net kinds. Exactly one of attn and delta is non-nil.
type layer struct {
	index            int
	inNorm, postNorm *param // [H], gain 1 + w
	gate, up, down   linear
	attn             *attnWeights
	delta            *deltaWeights
	params           []*param        // every parameter above, for upload and release
	blrs             []*gpu.BLRLayer // a Student's BLR projections (released by the net)
	uploaded         bool
}

// attnWeights is the gated attention's weights (arch.Attention).
type attnWeights struct {
	qg, k, v, o  linear // qg: the whole q_proj [nh·2·hd, H]
	qNorm, kNorm *param // [hd], gain 1 + w
}

// deltaWeights is the GatedDeltaNet's weights (arch.GatedDeltaNet).
type deltaWeights struct {
	qkv, z, a, b, out linear // qkv: the whole in_proj_qkv [C, H]
	conv              *param // the whole conv1d.weight [C, K]
	aLog, dtBias      *param // [Hv]
	norm              *param // [dv], plain gain
}

func (l *layer) bytes() uint64 {
	var n uint64
	for _, p := range l.params {
		n += p.bytes()
	}
	for _, b := range l.blrs {
		n += blrBytes(b)
	}
	return n
}

// upload puts every parameter of layer l on the GPU (a no-op when already there); on error
// the parameters uploaded so far are released. A streamed net uploads through its stager
// (uploadStreamed); a resident one once, at load, through Queue.WriteBuffer.
func (n *Net) upload(l *layer) error {
	if l.uploaded {
		return nil
	}
	var err error
	if n.streamed {
		err = n.uploadStreamed(l)
	} else {
		for _, p := range l.params {
			if err = p.upload(n.dev); err != nil {
				break
			}
		}
	}
	if err != nil {
		n.releaseLayer(l)
		return memRemedy(fmt.Errorf("nvgkit: upload layer %d: %w", l.index, err))
	}
	l.uploaded = true
	n.onGPU++
	n.maxOnGPU = max(n.maxOnGPU, n.onGPU)
	return nil
}

// uploadStreamed allocates layer l's buffers and fills them through the net's two-slot
// stager (ensureStager), so the host's copy of layer l overlaps the GPU's work on the layer
// before it (gpu.Stager says why Queue.WriteBuffer could not). A layer larger than a slot
// goes in several uploads.
func (n *Net) uploadStreamed(l *layer) error {
	if err := n.ensureStager(0); err != nil {
		return err
	}
	var items []gpu.StagerUpload
	var batch uint64
	for _, p := range l.params {
		if p.buf != nil {
			continue
		}
		buf, err := n.dev.NewBuffer(p.label, p.dtype, p.shape...)
		if err != nil {
			return err
		}
		p.buf = buf
		if batch+p.bytes() > n.stager.SlotBytes() {
			if err := n.stager.Upload(items); err != nil {
				return err
			}
			items, batch = nil, 0
		}
		items = append(items, gpu.StagerUpload{Dst: buf, F32: p.f32, F16: p.f16, U32: p.u32})
		batch += p.bytes()
		n.uploaded += p.bytes()
	}
	return n.stager.Upload(items)
}

// ensureStager makes the net's two-slot stager (on first use) or a larger one when a slot
// holds less than need bytes (a head block of one logits slice larger than the slots; the
// old stager is released): each slot the size of the largest layer, at most maxStagerSlot
// unless one parameter is larger, and at least need.
func (n *Net) ensureStager(need uint64) error {
	if n.stager != nil && n.stager.SlotBytes() >= need {
		return nil
	}
	var most, param uint64 // the largest layer and parameter (a streamed net has no BLR)
	for _, L := range n.layers {
		most = max(most, L.bytes())
		for _, p := range L.params {
			param = max(param, p.bytes())
		}
	}
	s, err := n.dev.NewStager(max(min(most, maxStagerSlot), param, need), 2)
	if err != nil {
		return err
	}
	n.stager.Release() // nil-safe; its submitted copies complete first
	n.stager = s
	return nil
}

// maxStagerSlot bounds a streamed net's staging slots (host memory, two of them): 1 GiB
// holds a whole 27B layer (≈ 0.7 GiB). Tests: SetMaxStagerSlot.
var maxStagerSlot uint64 = 1 << 30

// releaseLayer frees layer l's GPU buffers (work already submitted keeps them alive until
// it completes).
func (n *Net) releaseLayer(l *layer) {
	for _, p := range l.params {
		p.release()
	}
	if l.uploaded {
		n.onGPU--
	}
	l.uploaded = false
}

// Source supplies the tensors of a net that BuildNet assembles: LoadNet's reads a cmf.Model;
// nvg bench's (package bench) makes random weights on the GPU. BuildNet asks for the shared
// tensors (layer −1: the embedding, the final norm and the untied head), then for every
// decoder layer's in checkpoint order, each layer between BeginLayer and EndLayer. A Source
// is used by one goroutine.
type Source interface {
	// BeginLayer starts layer (−1: the shared tensors).
	BeginLayer(layer int) error
	// Dense returns tensor t (arch's name, checkpoint shape and role) as the GPU holds it,
	// shape (conv1d's [C, 1, K] as [C, K]), in f16 when half (the projections, the embedding
	// and the head) else in f32: host values (Plane.F16 or Plane.F32, of the shape's size),
	// or, unless host is set (the net streams its layers from host planes), a GPU buffer of
	// that dtype and shape, which the net then owns.
	Dense(t arch.Tensor, shape []int, half, host bool) (Plane, error)
	// Quant returns projection t [out, in] of a Teacher in 8 bits (QuantPlane: codes and
	// scales, host planes when host is set, else host planes or GPU buffers the net then
	// owns), or nil to keep t dense (BuildNet then asks Dense for it).
	Quant(t arch.Tensor, host bool) (*QuantPlane, error)
	// BLR returns projection t of a Student as a BLR layer on the GPU and its live ranks
	// (the net then owns the layer), or a nil layer to keep t dense (BuildNet then asks Dense
	// for it).
	BLR(t arch.Tensor) (l *gpu.BLRLayer, live int, err error)
	// EndLayer ends layer: the GPU buffers it returned since BeginLayer are complete once it
	// returns nil. err is the layer's first error (nil when every tensor came), on which a
	// source discards the work it has pending.
	EndLayer(layer int, err error) error
}

// Plane is one tensor from a Source: host values (exactly one of F16, F32 and U32) or a GPU
// buffer (Buf).
type Plane struct {
	F16 []uint16
	F32 []float32
	U32 []uint32
	Buf *gpu.Buffer
}

// QuantPlane is an 8-bit projection W [out, in] from a Source (DESIGN.md §4, "Quantized
// weights"), in gpu.QuantWeight's layout: Codes, ceil(out·in/4) u32 words of four byte codes
// each (W's row-major order, little-endian: gpu.Device.UploadQuantCodes), as Plane.U32 or a
// U32 Buf; Scales, the [ceil(out/Block[0]), ceil(in/Block[1])] scale grid row-major, as
// Plane.F32 or Plane.F16 or an F32 or F16 Buf. W[i, j] = value(code) · scale of its block.
type QuantPlane struct {
	Format gpu.QuantFormat
	Block  [2]int // [rows, columns] of weights per scale
	Codes  Plane
	Scales Plane
}

// builder makes one layer's params from a Source, keeping its first error.
type builder struct {
	n     *Net // the net being built (a Student's linears register with it)
	src   Source
	host  bool   // the params must be host planes (the net streams its layers)
	L     *layer // nil for the shared tensors
	err   error
	ps    []*param
	gains []*param // the params of Trainable tensors (the norm gains), in load order
}

// newParam registers a param of the given label, GPU shape and dtype.
func (b *builder) newParam(label string, shape []int, dtype gpu.DType) *param {
	p := &param{label: label, shape: shape, dtype: dtype}
	b.ps = append(b.ps, p)
	return p
}

// set gives p the source's plane v (err: the source's error), checking that a net that
// streams its layers got host values and that they are of p's dtype and size.
func (b *builder) set(p *param, v Plane, err error) {
	n := 1
	for _, s := range p.shape {
		n *= s
	}
	switch {
	case err != nil:
		b.err = err
	case v.Buf != nil && b.host:
		v.Buf.Release()
		b.err = fmt.Errorf("tensor %s: the source gave a GPU buffer to a net that streams its layers from the host", p.label)
	case v.Buf != nil:
		p.buf = v.Buf
		if v.Buf.DType() != p.dtype || v.Buf.Len() != n {
			b.err = fmt.Errorf("tensor %s: the source gave buffer %s, want %d values of %s", p.label, v.Buf, n, p.dtype)
		}
	default:
		p.f16, p.f32, p.u32 = v.F16, v.F32, v.U32
		if got := map[gpu.DType]int{gpu.F16: len(v.F16), gpu.F32: len(v.F32), gpu.U32: len(v.U32)}; got[p.dtype] != n || len(v.F16)+len(v.F32)+len(v.U32) != n {
			b.err = fmt.Errorf("tensor %s: the source gave %d f16, %d f32 and %d u32 values, want %d of %s", p.label, len(v.F16), len(v.F32), len(v.U32), n, p.dtype)
		}
	}
}

// param makes the param of tensor t, of the GPU's shape, from the source (f16 when half,
// else f32).
func (b *builder) param(t arch.Tensor, shape []int, half bool) *param {
	dtype := gpu.F32
	if half {
		dtype = gpu.F16
	}
	p := b.newParam(t.Name, shape, dtype)
	if b.err == nil {
		v, err := b.src.Dense(t, shape, half, b.host)
		b.set(p, v, err)
	}
	return p
}

// dense makes a frozen f16 linear from projection t [out, in].
func (b *builder) dense(t arch.Tensor) linear {
	out, in := t.Shape[0], t.Shape[1]
	return linear{w: b.param(t, []int{out, in}, true), name: t.Name, out: out, in: in}
}

// teacherLinear makes a Teacher's projection t [out, in]: 8-bit when the source gives it so
// (Source.Quant), else a dense f16 plane.
func (b *builder) teacherLinear(t arch.Tensor) linear {
	if b.err != nil {
		return linear{}
	}
	qp, err := b.src.Quant(t, b.host)
	if err != nil {
		b.err = err
		return linear{}
	}
	if qp == nil {
		return b.dense(t)
	}
	out, in := t.Shape[0], t.Shape[1]
	l := linear{name: t.Name, out: out, in: in, q: &quantLinear{format: qp.Format, block: qp.Block}}
	if qp.Format != gpu.QuantFP8 && qp.Format != gpu.QuantQ8 || qp.Block[0] <= 0 || qp.Block[1] <= 0 {
		b.err = fmt.Errorf("tensor %s: 8-bit weight of format %v and block %v (want fp8 or q8, a positive block)", t.Name, qp.Format, qp.Block)
		for _, v := range []Plane{qp.Codes, qp.Scales} {
			v.Buf.Release() // nil-safe
		}
		return l
	}
	l.q.codes = b.newParam(t.Name, []int{(out*in + 3) / 4}, gpu.U32)
	b.set(l.q.codes, qp.Codes, nil)
	if qp.Scales.F16 != nil && !b.host {
		// A resident net's q8 scales go up as f32 (exact): the tensor-core GEMM stages f32
		// scales faster (H100, q8 4B gate 922 µs with f32 scales, 1,019 with f16; 27B down
		// 3,584 and 5,454; fp8's f32 915 and 3,428: docs/bench/targets.md), for 2 more bytes
		// per 128 weights. A streamed net keeps them as stored, f16: those bytes go up at
		// every pass.
		f := make([]float32, len(qp.Scales.F16))
		for i, h := range qp.Scales.F16 {
			f[i] = float16.Frombits(h).Float32()
		}
		qp.Scales = Plane{F32: f}
	}
	sdt := gpu.F32
	if qp.Scales.F16 != nil || qp.Scales.Buf != nil && qp.Scales.Buf.DType() == gpu.F16 {
		sdt = gpu.F16
	}
	l.q.scales = b.newParam(t.Name+"_scale", []int{(out + qp.Block[0] - 1) / qp.Block[0], (in + qp.Block[1] - 1) / qp.Block[1]}, sdt)
	if b.err == nil {
		b.set(l.q.scales, qp.Scales, nil)
	} else {
		qp.Scales.Buf.Release()
	}
	return l
}

// vec makes an f32 parameter of t's shape (a norm gain, A_log, dt_bias), noting a Trainable
// one in b.gains.
func (b *builder) vec(t arch.Tensor) *param {
	p := b.param(t, t.Shape, false)
	if t.Trainable {
		b.gains = append(b.gains, p)
	}
	return p
}

// conv makes the f32 conv1d weight t [C, 1, K] as a [C, K] parameter.
func (b *builder) conv(t arch.Tensor) *param {
	return b.param(t, []int{t.Shape[0], t.Shape[2]}, false)
}

// LoadNet converts the model's weights for kind and, unless StreamLayers is given, uploads
// all of them to dev (BuildNet with the model as its Source). The model's config and every
// tensor's shape are validated first; m may be closed after LoadNet returns (the Net keeps no
// reference to its files).
//
// Memory: resident, the GPU holds every weight (2 bytes per projection weight — 1 and its
// share of the scales for a Teacher's 8-bit projections —, 4 per norm, conv, A_log and
// dt_bias value) and the host none; streamed, the GPU holds the final norm plus at most two
// layers or two head blocks (StreamLayers), and the host keeps the embedding, the head and
// every layer's planes.
// Errors: a nil device or model, an unknown kind, an invalid config, a missing tensor or one
// of the wrong shape or dtype (BLR for a Teacher), a weight not finite in f16, or a GPU
// allocation failure — each naming the tensor; a tensor more than half of whose nonzero
// values lie below f16's smallest normal (see Warnings). Nothing is left allocated on error.
func LoadNet(dev *gpu.Device, m *cmf.Model, kind NetKind, opts ...LoadOption) (*Net, error) {
	if m == nil {
		return nil, errors.New("nvgkit.LoadNet: nil model")
	}
	src := &modelSource{m: m, dev: dev}
	n, err := buildNet("LoadNet", dev, m.Config, kind, src, opts)
	if err != nil {
		return nil, err
	}
	n.warnings = src.warnings
	for _, w := range n.warnings {
		fmt.Fprintf(os.Stderr, "nvgkit.LoadNet: warning: %s\n", w)
	}
	return n, nil
}

// BuildNet assembles a net of architecture cfg for kind from the tensors src supplies, the
// one recipe of both kinds (the layer layout of Net): the shared tensors on the GPU, then
// every decoder layer, uploaded as it is made (or kept on the host with StreamLayers); a
// Student's BLR projections come from src.BLR, its trainables are registered in load order.
// Options: StreamLayers (Teacher only), LoadProgress. Errors: a nil device or source, an
// unknown kind, an invalid config, StreamLayers with a Student, and the source's errors or an
// allocation failure, naming the tensor; nothing stays allocated on error.
func BuildNet(dev *gpu.Device, cfg arch.Config, kind NetKind, src Source, opts ...LoadOption) (*Net, error) {
	return buildNet("BuildNet", dev, cfg, kind, src, opts)
}

func buildNet(op string, dev *gpu.Device, cfg arch.Config, kind NetKind, src Source, opts []LoadOption) (*Net, error) {
	if dev == nil {
		return nil, fmt.Errorf("nvgkit.%s: nil device", op)
	}
	if src == nil {
		return nil, fmt.Errorf("nvgkit.%s: nil source", op)
	}
	if kind != Teacher && kind != Student {
		return nil, fmt.Errorf("nvgkit.%s: unsupported net kind %v", op, kind)
	}
	var lc loadConfig
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if kind == Student && lc.streamed {
		return nil, fmt.Errorf("nvgkit.%s: StreamLayers is for teachers; a Student net is always resident (its trainables and their gradients live on the GPU)", op)
	}
	n := &Net{Kind: kind, Config: cfg, dev: dev, streamed: lc.streamed}
	if err := n.build(src, lc.progress); err != nil {
		n.Release()
		return nil, memRemedy(fmt.Errorf("nvgkit.%s: %w", op, err))
	}
	return n, nil
}

// build makes the shared tensors and every layer from src, named and shaped by arch: a
// Teacher's projections dense f16; a Student's as studentLinear makes them, with its
// trainables (see Student).
func (n *Net) build(src Source, progress func(done, total int)) error {
	c := n.Config
	student := n.Kind == Student
	if student {
		n.st = &studentState{byName: map[string]*trainable{}, byParam: map[*gpu.Buffer]*trainable{}, signs: &signNet{}}
	}
	if err := n.buildShared(src); err != nil {
		return err
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		if err := n.buildLayer(src, i); err != nil {
			return err
		}
		if progress != nil {
			progress(i+1, c.NumHiddenLayers)
		}
	}
	if student {
		l := n.Config.Layout()
		if err := n.addTrainable(l.Norm.Name, n.finalNorm, nil, false, l.Norm.Shape); err != nil {
			return err
		}
		return n.finishStudent()
	}
	return nil
}

// buildShared puts the final norm on the GPU, and the embedding and the (untied) head: on the
// GPU, but for a streamed net in host planes (embedHost, headHost).
func (n *Net) buildShared(src Source) error {
	l := n.Config.Layout()
	if err := src.BeginLayer(-1); err != nil {
		return err
	}
	b := &builder{n: n, src: src} // the final norm is on the GPU…
	eb := b
	if n.streamed {
		eb = &builder{n: n, src: src, host: true} // …and so are the embedding and head unless streamed
	}
	emb := eb.param(l.EmbedTokens, l.EmbedTokens.Shape, true)
	fn := b.param(l.Norm, l.Norm.Shape, false)
	head := emb
	if l.LMHead != nil {
		head = eb.param(*l.LMHead, l.LMHead.Shape, true)
	}
	b.err = cmp.Or(b.err, eb.err)
	err := src.EndLayer(-1, b.err)
	if b.err == nil && err == nil {
		for _, p := range b.ps {
			if err = p.upload(n.dev); err != nil {
				break
			}
		}
	}
	if eb.host {
		n.embedHost, n.headHost = emb.f16, head.f16
	} else {
		n.embed, n.head = emb.buf, head.buf // released with the net, even on error
	}
	n.finalNorm = fn.buf
	return cmp.Or(b.err, err)
}

// embedInto records the embedding of flat (rows ids, validated) into x [rows, H] f32: the
// gather of the GPU's f16 embedding (gpu.Embedding), or, for a net that keeps its embedding
// on the host (hostEmbed), the same values gathered on the host and written into x through
// the queue (ordered before r's submit and after earlier ones).
func (n *Net) embedInto(r *gpu.Recorder, flat []int, x *gpu.Buffer) error {
	if n.embedHost == nil {
		return gpu.Embedding(r, n.embed, flat, x)
	}
	H := n.Config.HiddenSize
	if x.Len() != len(flat)*H {
		return fmt.Errorf("embedding: %d ids for an output of %d values (hidden %d)", len(flat), x.Len(), H)
	}
	v := make([]float32, len(flat)*H)
	parallelChunks(len(flat), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := n.embedHost[flat[i]*H : (flat[i]+1)*H]
			for j, h := range row {
				v[i*H+j] = float16.Frombits(h).Float32()
			}
		}
	})
	return n.dev.WriteFloat32(x, v)
}

// buildLayer makes decoder layer i from src and, unless the net streams, uploads it; the
// layer joins the net even when it fails half-made, so that Release frees what it holds.
func (n *Net) buildLayer(src Source, i int) error {
	A := n.Config.Layer(i)
	L := &layer{index: i}
	if err := src.BeginLayer(i); err != nil {
		return err
	}
	b := &builder{n: n, src: src, host: n.streamed, L: L}
	lin := b.teacherLinear
	if n.Kind == Student {
		lin = b.studentLinear
	}
	L.inNorm = b.vec(A.InputLayernorm)
	L.postNorm = b.vec(A.PostAttentionLayernorm)
	L.gate = lin(A.MLP.GateProj)
	L.up = lin(A.MLP.UpProj)
	L.down = lin(A.MLP.DownProj)
	if t := A.SelfAttn; t != nil { // (a composite literal evaluates its calls in order)
		L.attn = &attnWeights{qg: lin(t.QProj), k: lin(t.KProj), v: lin(t.VProj), o: lin(t.OProj),
			qNorm: b.vec(t.QNorm), kNorm: b.vec(t.KNorm)}
	} else {
		t := A.LinearAttn
		L.delta = &deltaWeights{qkv: lin(t.InProjQKV), z: lin(t.InProjZ), b: lin(t.InProjB), a: lin(t.InProjA),
			out: lin(t.OutProj), conv: b.conv(t.Conv1d), aLog: b.vec(t.ALog), dtBias: b.vec(t.DtBias), norm: b.vec(t.Norm)}
	}
	err := src.EndLayer(i, b.err)
	L.params = b.ps
	n.layers = append(n.layers, L)
	if err := cmp.Or(b.err, err); err != nil {
		return err
	}
	if !n.streamed {
		if err := n.upload(L); err != nil {
			return err
		}
		for _, p := range L.params { // the GPU copy is the only one now
			p.dropHost()
		}
	}
	if n.Kind == Student {
		for _, g := range b.gains {
			if err := n.addTrainable(g.label, g.buf, nil, false, g.shape); err != nil {
				return err
			}
		}
	}
	return nil
}

// Warnings returns what LoadNet warned about (also printed to stderr): one line per f16
// weight tensor of which more than 1 % of the nonzero values lie below f16's smallest normal
// (6.1e-5) and so lose relative precision on the GPU, naming the tensor and the fraction.
// (LoadNet refuses a model where a tensor has more than half of them there.)
func (n *Net) Warnings() []string { return append([]string(nil), n.warnings...) }

// Streamed reports whether the net streams its layers (LoadNet with StreamLayers).
func (n *Net) Streamed() bool { return n.streamed }

// Device is the device the net lives on.
func (n *Net) Device() *gpu.Device { return n.dev }

// WeightBytes is the GPU bytes of all weights when resident: embedding, head (0 extra when
// tied), final norm and every layer. LayerBytes(l) is layer l's share.
func (n *Net) WeightBytes() uint64 {
	t := n.finalNorm.Bytes()
	if n.streamed { // the host planes, as the GPU would hold them
		t += uint64(2*len(n.embedHost)+3) &^ 3
		if n.Config.Layout().LMHead != nil {
			t += uint64(2*len(n.headHost)+3) &^ 3
		}
	} else {
		t += n.embed.Bytes()
		if n.head != n.embed {
			t += n.head.Bytes()
		}
	}
	for _, l := range n.layers {
		t += l.bytes()
	}
	return t
}

// UploadedBytes is the bytes a streamed net has uploaded through its staging buffers since
// LoadNet: every layer's weights and the head once per pass that runs the head (TeacherTopK,
// Forward, NLL…; 0 for a resident net, whose weights went up once at load). The embedding
// rows a pass gathers and the target rows of NLL go up through the queue, uncounted.
func (n *Net) UploadedBytes() uint64 { return n.uploaded }

// MaxLayersOnGPU is the largest number of decoder layers whose weights were on the GPU at
// the same time since LoadNet: all of them when resident, at most 2 when streamed.
func (n *Net) MaxLayersOnGPU() int { return n.maxOnGPU }

// LayerBytes is the GPU bytes of decoder layer l's weights (0 when l is out of range).
func (n *Net) LayerBytes(l int) uint64 {
	if l < 0 || l >= len(n.layers) {
		return 0
	}
	return n.layers[l].bytes()
}

// Release frees every GPU buffer of the net (and, when streamed, the host planes) and the
// device's kept scratch buffers (gpu.Device.FreeScratch). Using the net afterwards returns
// errors; releasing twice is a no-op.
func (n *Net) Release() {
	if n == nil || n.released {
		return
	}
	n.released = true
	n.dev.FreeScratch() // temporaries sized for this net are unlikely to be reused
	for _, b := range []*gpu.Buffer{n.embed, n.head, n.finalNorm} {
		b.Release() // nil-safe; the tied head is the embedding, released once
	}
	for _, l := range n.layers {
		n.releaseLayer(l)
		for _, p := range l.params {
			p.dropHost()
		}
	}
	n.embedHost, n.headHost = nil, nil
	n.stager.Release()
	n.st.release()
}

func (n *Net) usable(op string) error {
	if n == nil {
		return fmt.Errorf("nvgkit.%s: nil net", op)
	}
	if n.released {
		return fmt.Errorf("nvgkit.%s: the net has been released", op)
	}
	return nil
}
