package nvgkit

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/arch"

	"github.com/nvg-project/nvg/gpu"
)

// Work holds the activation buffers of one pass over nb windows of t tokens (rows = nb·t
// token rows), sized once by NewWork and reused by every TeacherTopK, Forward and NLL call.
// Each buffer is F32 and row-major [rows, width]: the residual stream x [rows, H] and the
// norm output xn [rows, H], one layer's activations as the layer recipe writes them (acts:
// mix [rows, H]; gate, up, act [rows, I]; when the model has GatedDeltaNet layers mixed
// [rows, C], qc, kc, qn, kn [rows, Hk·dk], vc, z, core, normed [rows, Hv·dv], a, b, g, beta
// [rows, Hv]; when it has attention layers qg [rows, 2·nh·hd], q, agate, qr, o, gated
// [rows, nh·hd], k, v, kr [rows, nkv·hd], alse [rows, nh]), and the head's lse, tgt [rows]
// and top-k ids (U32) and log-probs [rows, k] (allocated per k). A Teacher's work lays the
// MLP's, the attention's and the GatedDeltaNet's activations over each other in shared slots
// (gpu.Device.View; a layer uses one group at a time), TeacherWorkBytes gives the total. A
// Work fits any net of the same architecture sizes. Release frees it.
type Work struct {
	// NB is the number of windows and T the tokens per window the buffers are sized for.
	NB, T int

	dev  *gpu.Device
	cfg  arch.Config
	bufs []*gpu.Buffer // the buffers the work owns (a Teacher's shared slots included)
	// views are a Teacher's activations laid over its shared slots, groups their specs by
	// group (actGroups, shareSlots).
	views  []*gpu.Buffer
	groups [][]wspec

	x, xn           *gpu.Buffer
	acts            acts // resid = x, xn1 = xn2 = xn (the pass runs in place)
	headLSE, tgt    *gpu.Buffer
	topIDs, topLogp *gpu.Buffer
	topK            int
	released        bool
	st              *stWork // a Student's buffers (NewWork for a Student net), else nil
	lossScale       float64 // the KL gradient's scale (SetLossScale); 0: 1/(NB·T)
}

// wspec is one work buffer: where it goes, its label and its width (elements per row).
type wspec struct {
	dst   **gpu.Buffer
	label string
	width int
}

// workSpecs prefixes each spec's label with "work.".
func workSpecs(sp ...wspec) []wspec {
	for i := range sp {
		sp[i].label = "work." + sp[i].label
	}
	return sp
}

// actSpecs lists the buffers of one layer's activations (acts) for architecture c: the
// attention ones only when c has attention layers, the GatedDeltaNet ones only when it has
// such layers, and xn1, resid and xn2 only for a student (a teacher aliases them).
func actSpecs(c arch.Config, a *acts, student bool) []wspec {
	return layerActSpecs(c, a, student, hasKind(c, true), hasKind(c, false))
}

// layerActSpecs is actSpecs with the mixer kinds given: the attention buffers when attn, the
// GatedDeltaNet ones when delta.
func layerActSpecs(c arch.Config, a *acts, student, attn, delta bool) []wspec {
	H := c.HiddenSize
	var sp []wspec
	if student {
		sp = workSpecs(wspec{&a.xn1, "xn1 (input norm)", H}, wspec{&a.resid, "resid (x + mixer)", H}, wspec{&a.xn2, "xn2 (post norm)", H})
	}
	sp = append(sp, workSpecs(wspec{&a.mix, "mix (mixer/MLP output)", H})...)
	for _, g := range actGroups(c, a, attn, delta) {
		sp = append(sp, g...)
	}
	return sp
}

// actGroups lists one layer's activations by the part of the recipe that writes and reads
// them: the MLP's, the attention's (when attn) and the GatedDeltaNet's (when delta). The
// groups are never live at once — the recipe runs the mixer, writes its output to mix, then
// the MLP, and no op binds buffers of two groups — so a Teacher's work lays them over each
// other (shareSlots).
func actGroups(c arch.Config, a *acts, attn, delta bool) [][]wspec {
	I := c.IntermediateSize
	groups := [][]wspec{workSpecs(wspec{&a.gate, "gate (mlp gate_proj)", I}, wspec{&a.up, "up (mlp up_proj)", I}, wspec{&a.act, "act (SwiGLU)", I})}
	if attn {
		g := attnDims(c)
		groups = append(groups, workSpecs(
			wspec{&a.qg, "qg (q_proj)", 2 * g.Q}, wspec{&a.q, "q (attention query)", g.Q}, wspec{&a.agate, "agate (attention gate)", g.Q},
			wspec{&a.qr, "qr (query after norm+RoPE)", g.Q}, wspec{&a.o, "o (attention output)", g.Q}, wspec{&a.gated, "gated (gated attention output)", g.Q},
			wspec{&a.k, "k (attention key)", g.KV}, wspec{&a.v, "v (attention value)", g.KV}, wspec{&a.kr, "kr (key after norm+RoPE)", g.KV},
			wspec{&a.alse, "alse (attention logsumexp)", g.nh}))
	}
	if delta {
		g := deltaDims(c)
		groups = append(groups, workSpecs(
			wspec{&a.mixed, "mixed (in_proj_qkv)", g.C},
			wspec{&a.qc, "qc (conv q)", g.QK}, wspec{&a.kc, "kc (conv k)", g.QK}, wspec{&a.qn, "qn (normalised q)", g.QK}, wspec{&a.kn, "kn (normalised k)", g.QK},
			wspec{&a.vc, "vc (conv v)", g.VV}, wspec{&a.z, "z (in_proj_z)", g.VV}, wspec{&a.core, "core (delta rule output)", g.VV}, wspec{&a.normed, "normed (gated norm output)", g.VV},
			wspec{&a.a, "a (in_proj_a)", g.hv}, wspec{&a.b, "b (in_proj_b)", g.hv}, wspec{&a.g, "g (log decay)", g.hv}, wspec{&a.beta, "beta", g.hv}))
	}
	return groups
}

// shareSlots lays groups of buffers over each other: each group ordered widest first, the
// i-th member of every group takes slot i, whose width (slots[i]) is its widest member's,
// so one op never binds two buffers of one slot (an op's buffers are of one group, or of
// their own). shared lists every member, slotOf its slot. One layer's activations then take
// the widest group's bytes per slot rather than the sum of all three groups (1.1 GiB less at
// the 27B geometry, 8 × 512 tokens).
func shareSlots(groups [][]wspec) (slots []int, shared []wspec, slotOf []int) {
	for _, g := range groups {
		members := slices.Clone(g)
		sort.SliceStable(members, func(i, j int) bool { return members[i].width > members[j].width })
		for i, m := range members {
			if i == len(slots) {
				slots = append(slots, 0)
			}
			slots[i] = max(slots[i], m.width)
			shared, slotOf = append(shared, m), append(slotOf, i)
		}
	}
	return slots, shared, slotOf
}

// attnGeom is a gated attention layer's sizes: nh query heads, nkv KV heads of hd,
// Q = nh·hd, KV = nkv·hd.
type attnGeom struct{ nh, nkv, hd, Q, KV int }

func attnDims(c arch.Config) attnGeom {
	nh, nkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	return attnGeom{nh, nkv, hd, nh * hd, nkv * hd}
}

// deltaGeom is a GatedDeltaNet layer's sizes: hk key heads of dk, hv value heads of dv, K
// conv taps, QK = hk·dk, VV = hv·dv, C = 2·QK + VV conv channels.
type deltaGeom struct{ hk, hv, dk, dv, K, QK, VV, C int }

func deltaDims(c arch.Config) deltaGeom {
	hk, hv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	return deltaGeom{hk, hv, dk, dv, c.LinearConvKernelDim, hk * dk, hv * dv, 2*hk*dk + hv*dv}
}

// teacherSpecs lists a Teacher work's own buffers (not the top-k ones) and the groups of one
// layer's activations that share slots (actGroups, shareSlots).
func teacherSpecs(c arch.Config, w *Work) (own []wspec, groups [][]wspec) {
	H := c.HiddenSize
	own = workSpecs(wspec{&w.x, "x (residual stream)", H}, wspec{&w.xn, "xn (norm output)", H}, wspec{&w.acts.mix, "mix (mixer/MLP output)", H},
		wspec{&w.headLSE, "headLSE (logsumexp)", 1}, wspec{&w.tgt, "tgt (target logits)", 1})
	return own, actGroups(c, &w.acts, hasKind(c, true), hasKind(c, false))
}

// TeacherWorkBytes is the GPU bytes NewWork allocates for a Teacher of architecture c over
// nb windows of t tokens (rows = nb·t), before the top-k buffers (8·rows·k bytes, allocated
// at the first TeacherTopK or Forward of a given k):
//
//	4·rows·[ 3·H + 2 + Σ_i slot_i ]   the residual stream, norm and mixer/MLP outputs, head lse and
//	                                  target, and one layer's activations in shared slots
//
// where slot i is as wide as the widest i-th buffer (widest first) of the MLP's (3 of I),
// the attention's (when the model has attention layers: 2·Q, 5 of Q, 3 of KV, nh; Q = nh·hd,
// KV = nkv·hd) and the GatedDeltaNet's (when it has such layers: 1 of C, 4 of VV, 4 of QK,
// 4 of Hv; QK = Hk·dk, VV = Hv·dv, C = 2·QK + VV): the three never live at once
// (shareSlots). The recorder's temporaries (GatedDeltaRuleChunked's scratch and the head's
// logits slice) come on top, freed at each submit.
func TeacherWorkBytes(c arch.Config, nb, t int) uint64 {
	var w Work
	own, groups := teacherSpecs(c, &w)
	slots, _, _ := shareSlots(groups)
	var n uint64
	for _, sp := range own {
		n += 4 * uint64(nb*t) * uint64(sp.width)
	}
	for _, width := range slots {
		n += 4 * uint64(nb*t) * uint64(width)
	}
	return n
}

// NewWork allocates the activation buffers for nb windows of t tokens of net's
// architecture on dev (TeacherWorkBytes). For a Student net it allocates the step's buffers
// instead (Step, LossOnly): (layers+1) checkpoints of [nb·t, H] f32 (every layer's input and
// the last output), one layer's activations (recomputed per layer in the backward), the
// head's, and the gradient scratch — StudentWorkBytes(net.Config, nb, t) bytes, given there
// as a formula (Work.Bytes reports them, plus the top-k buffers once a Step or LossOnly has
// run). Every buffer is checked against the device before anything is allocated: none may
// exceed maxStorageBufferBindingSize (each is bound whole by one kernel), and the head's
// per-slice logits scratch (≥ nb·t·128·4 bytes) must fit one binding and 64 MiB, i.e.
// nb·t ≤ 131072 tokens per pass. Errors: a nil device or net, a net on another device, nb or
// t < 1, nb·t·width beyond 2³¹ elements, a buffer over the binding limit (named, with its
// bytes and the limit), or an allocation failure (nothing stays allocated then).
//
// Options: KeepActivations and KeepBLROutputs (a Student's work only).
func NewWork(dev *gpu.Device, net *Net, nb, t int, opts ...WorkOption) (*Work, error) {
	if dev == nil {
		return nil, errors.New("nvgkit.NewWork: nil device")
	}
	if err := net.usable("NewWork"); err != nil {
		return nil, err
	}
	if net.dev != dev {
		return nil, errors.New("nvgkit.NewWork: the net lives on another device")
	}
	if nb < 1 || t < 1 {
		return nil, fmt.Errorf("nvgkit.NewWork: nb = %d windows and t = %d tokens must be ≥ 1", nb, t)
	}
	var o workOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.keep && net.Kind != Student {
		return nil, errors.New("nvgkit.NewWork: KeepActivations is for a Student's work (a teacher pass keeps nothing for a backward)")
	}
	if o.keepC && !o.keep {
		return nil, errors.New("nvgkit.NewWork: KeepBLROutputs needs KeepActivations (the c of a recomputed layer is kept by the recompute already)")
	}
	which, err := o.keptLayers(len(net.layers))
	if err != nil {
		return nil, err
	}
	c := net.Config
	w := &Work{NB: nb, T: t, dev: dev, cfg: c}
	var specs []wspec
	if net.Kind == Student {
		w.st = &stWork{}
		specs = studentSpecs(c, w.st)
		if o.keep {
			kept, err := keptSpecs(net, w.st, o.keepC, which)
			if err != nil {
				return nil, err
			}
			for _, k := range kept {
				specs = append(specs, k...)
			}
		}
	} else {
		var groups [][]wspec
		specs, groups = teacherSpecs(c, w)
		for _, g := range groups {
			specs = append(specs, g...) // checked with the others, then laid over each other
		}
		w.groups = groups
	}
	if err := w.alloc(specs); err != nil {
		w.Release()
		return nil, err
	}
	if w.st == nil {
		w.acts.resid, w.acts.xn1, w.acts.xn2 = w.x, w.xn, w.xn
	}
	return w, nil
}

// WorkOption is an option of NewWork.
type WorkOption func(*workOptions)

type workOptions struct {
	keep, keepC bool
	// layers are KeepActivationLayers' (layersSet), else every layer is kept with keep.
	layers    []int
	layersSet bool
}

// keptLayers returns which of n layers keep their activations: nil for all (or none
// without keep), else one flag per layer (KeepActivationLayers). Errors: an empty list, a
// layer out of range or listed twice.
func (o *workOptions) keptLayers(n int) ([]bool, error) {
	if !o.layersSet {
		return nil, nil
	}
	if len(o.layers) == 0 {
		return nil, errors.New("nvgkit.NewWork: KeepActivationLayers lists no layer (leave the option out to recompute every layer)")
	}
	which := make([]bool, n)
	for _, l := range o.layers {
		switch {
		case l < 0 || l >= n:
			return nil, fmt.Errorf("nvgkit.NewWork: KeepActivationLayers: layer %d is not one of the net's %d layers (0 … %d)", l, n, n-1)
		case which[l]:
			return nil, fmt.Errorf("nvgkit.NewWork: KeepActivationLayers lists layer %d twice", l)
		}
		which[l] = true
	}
	return which, nil
}

// KeepActivations makes a Student's work keep every layer's activations from Step's forward
// for the backward, instead of keeping only each layer's input and recomputing the layer's
// forward from it in the backward (DESIGN.md §6): a step does one layer forward fewer per
// layer (about a quarter of its GPU work) for KeptActivationBytes(net, nb, t) more GPU
// memory. Every value — loss, gradients, the kept t1 — is bit-identical to the recomputing
// step's: the recompute runs the same kernels on the same inputs. NewWork refuses it for a
// Teacher net, and for a Student whose layers are not all loaded on the GPU.
func KeepActivations() WorkOption { return func(o *workOptions) { o.keep = true } }

// KeepActivationLayers is KeepActivations for the listed layers only (0-based decoder
// layer indices, any order): their activations are kept, every other layer is recomputed
// in the backward as without the option — the middle ground between the least memory and
// the fastest step, KeptActivationLayerBytes(net, nb, t)[l] bytes for each layer l kept.
// Bit-identical to both. With KeepBLROutputs, the kept layers' BLR outputs c are kept too.
// The list decides even beside KeepActivations, and of several KeepActivationLayers options
// the last counts.
// NewWork refuses an empty list, a layer out of range or listed twice, and what it refuses
// for KeepActivations.
func KeepActivationLayers(layers ...int) WorkOption {
	l := slices.Clone(layers)
	return func(o *workOptions) { o.keep, o.layers, o.layersSet = true, l, true }
}

// KeepBLROutputs, with KeepActivations, also keeps every BLR projection's per-path output
// before ⊙h, c_p = (t1_p⊙ℓ_p)·U_pᵀ [nb·t, out_features] f32 (gpu.BLRKept.C; the forward's y
// GEMM stores it beside y), so the backward skips its c GEMM too, one of its four sign-bit
// GEMMs per path, for KeptBLROutputBytes(net, nb, t) more GPU memory. Bit-identical, as
// KeepActivations is. It is what train.TrainConfig.ActivationBudget keeps when everything
// fits; KeepActivations alone leaves it out because c is as large as the projections'
// outputs (34 GiB more at 4B, 8 × 512 tokens, on the H200). NewWork refuses it without
// KeepActivations.
func KeepBLROutputs() WorkOption { return func(o *workOptions) { o.keepC = true } }

// KeptActivationBytes is the GPU bytes KeepActivations adds to a Student's work of nb
// windows of t tokens (rows = nb·t): for every layer, its activations (the widths of one
// layer's acts in StudentWorkBytes' formula: 4·H + 3·I, plus 7·Q + 3·KV + nh for an
// attention layer or C + 4·QK + 4·VV + 4·Hv for a GatedDeltaNet layer) and, for every BLR
// projection of the layer, one t1 [rows, rank] per path, all F32: 4·rows·Σ widths. 0 for a
// Teacher net, or a Student whose layers are not all on the GPU.
func KeptActivationBytes(net *Net, nb, t int) uint64 {
	var n uint64
	for _, b := range KeptActivationLayerBytes(net, nb, t) {
		n += b
	}
	return n
}

// KeptActivationLayerBytes is KeptActivationBytes layer by layer: element l is what keeping
// layer l's activations adds (KeepActivationLayers), in bytes. nil for a Teacher net, or a
// Student whose layers are not all on the GPU.
func KeptActivationLayerBytes(net *Net, nb, t int) []uint64 {
	return keptBytes(net, nb, t, false)
}

// KeptBLROutputBytes is the GPU bytes KeepBLROutputs adds to a Student's kept activations
// of nb windows of t tokens: for every BLR projection, one c [nb·t, out_features] f32 per
// path. 0 for a Teacher net.
func KeptBLROutputBytes(net *Net, nb, t int) uint64 {
	var n uint64
	with, without := keptBytes(net, nb, t, true), keptBytes(net, nb, t, false)
	for l := range with {
		n += with[l] - without[l]
	}
	return n
}

// keptBytes sums keptSpecs' buffers of each layer for nb·t rows (with the c buffers when
// keepC).
func keptBytes(net *Net, nb, t int, keepC bool) []uint64 {
	if net == nil || net.Kind != Student {
		return nil
	}
	var s stWork
	sp, err := keptSpecs(net, &s, keepC, nil)
	if err != nil {
		return nil
	}
	n := make([]uint64, len(sp))
	for l, layer := range sp {
		for _, x := range layer {
			n[l] += 4 * uint64(nb*t) * uint64(x.width)
		}
	}
	return n
}

// keptSpecs lists the buffers of a Student work's kept activations (KeepActivations), layer
// by layer: for each layer kept (which[l], or every layer when which is nil) one acts of its
// own mixer kind, and it points that layer's kept map at its buffers: every BLR projection's
// t1 per path, and its c per path when keepC (KeepBLROutputs). s.kept[l] stays nil for a
// layer recomputed in the backward.
func keptSpecs(net *Net, s *stWork, keepC bool, which []bool) ([][]wspec, error) {
	c := net.Config
	s.kept = make([]*acts, len(net.layers))
	sp := make([][]wspec, len(net.layers))
	for l, L := range net.layers {
		if which != nil && !which[l] {
			continue
		}
		a := &acts{}
		s.kept[l] = a
		full := c.IsFullAttention(l)
		prefix := fmt.Sprintf("work.kept[%d].", l)
		for _, x := range layerActSpecs(c, a, true, full, !full) {
			x.label = prefix + strings.TrimPrefix(x.label, "work.")
			sp[l] = append(sp[l], x)
		}
		a.kept, a.ownKept = map[*gpu.BLRLayer]gpu.BLRKept{}, true
		for _, b := range L.blrs {
			if b == nil {
				return nil, fmt.Errorf("nvgkit.NewWork: KeepActivations needs every layer of the student on the GPU; layer %d is not", l)
			}
			// c only with keepC: [rows, out] per path for every projection of every layer, it
			// would add 34 GiB to the 4B step's 53 GiB kept peak on the H200 (8 × 512 tokens) to
			// save one GEMM of four (the recomputing step keeps c only for the layer it
			// recomputes).
			k := gpu.BLRKept{T1: make([]*gpu.Buffer, len(b.Paths))}
			if keepC {
				k.C = make([]*gpu.Buffer, len(b.Paths))
			}
			for p := range k.T1 {
				sp[l] = append(sp[l], wspec{&k.T1[p], fmt.Sprintf("%st1[%d] (a BLR projection's (x⊙g)·Vᵀ, path %d)", prefix, len(a.kept), p), b.Rank})
				if keepC {
					sp[l] = append(sp[l], wspec{&k.C[p], fmt.Sprintf("%sc[%d] (a BLR projection's (t1⊙ℓ)·Uᵀ, path %d)", prefix, len(a.kept), p), b.M})
				}
			}
			a.kept[b] = k
		}
	}
	return sp, nil
}

// KeptLayers returns the decoder layers whose activations the work keeps for the backward
// (KeepActivations: every layer; KeepActivationLayers: those), in increasing order; nil for
// a work that recomputes every layer, a Teacher's work, or a released one.
func (w *Work) KeptLayers() []int {
	if w == nil || w.st == nil || w.released {
		return nil
	}
	var ls []int
	for l, a := range w.st.kept {
		if a != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// keptActs returns layer l's kept activations, or nil where the backward recomputes it.
func (s *stWork) keptActs(l int) *acts {
	if s.kept == nil {
		return nil
	}
	return s.kept[l]
}

// alloc checks every buffer of specs against the device, then allocates them (into w.st.bufs
// for a Student's work, else w.bufs). The loss and the reduction scalar are [1].
func (w *Work) alloc(specs []wspec) error {
	rows := w.NB * w.T
	maxBind := w.dev.Info().MaxStorageBindingSize
	// gpu.LogitsTopK and gpu.KLLossBackward need a logits scratch of at least [rows, 128] f32
	// within one binding and its 64 MiB cap: refuse here rather than after every layer has run.
	if need := uint64(rows) * 128 * 4; need > min(maxBind, 64<<20) {
		return fmt.Errorf("nvgkit.NewWork: the head's logits scratch for %d rows needs at least %d bytes (a 128-entry vocabulary slice), above min(maxStorageBufferBindingSize %d, 64 MiB); use at most %d tokens per pass",
			rows, need, maxBind, min(maxBind, 64<<20)/512)
	}
	for _, s := range specs {
		n := uint64(rows) * uint64(s.width)
		if n > 1<<31-1 {
			return fmt.Errorf("nvgkit.NewWork: %s needs %d×%d = %d elements, beyond the 2³¹ index range; use fewer or shorter windows",
				s.label, rows, s.width, n)
		}
		if 4*n > maxBind {
			return fmt.Errorf("nvgkit.NewWork: %s [%d×%d] f32 needs %d bytes, above the device's maxStorageBufferBindingSize %d; use fewer or shorter windows (nb = %d, t = %d)",
				s.label, rows, s.width, 4*n, maxBind, w.NB, w.T)
		}
	}
	bufs := &w.bufs
	if w.st != nil {
		bufs = &w.st.bufs
	}
	specs = specs[:len(specs)-groupSize(w.groups)] // a Teacher's groups: slots below
	for _, s := range specs {
		shape := []int{rows, s.width}
		if w.st != nil && (s.dst == &w.st.loss || s.dst == &w.st.gss) {
			shape = []int{1}
		}
		b, err := w.dev.NewBuffer(s.label, gpu.F32, shape...)
		if err != nil {
			return memRemedy(fmt.Errorf("nvgkit.NewWork: %w", err))
		}
		*s.dst = b
		*bufs = append(*bufs, b)
	}
	slots, shared, slotOf := shareSlots(w.groups)
	bases := make([]*gpu.Buffer, len(slots))
	for i, width := range slots {
		b, err := w.dev.NewBuffer(fmt.Sprintf("work.shared[%d] (one layer's MLP, attention or GatedDeltaNet activations)", i), gpu.F32, rows, width)
		if err != nil {
			return memRemedy(fmt.Errorf("nvgkit.NewWork: %w", err))
		}
		bases[i] = b
		w.bufs = append(w.bufs, b)
	}
	for j, s := range shared {
		v, err := w.dev.View(bases[slotOf[j]], s.label, gpu.F32, rows, s.width)
		if err != nil {
			return fmt.Errorf("nvgkit.NewWork: %w", err)
		}
		*s.dst = v
		w.views = append(w.views, v)
	}
	return nil
}

// groupSize is the number of specs in groups.
func groupSize(groups [][]wspec) int {
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	return n
}

// memRemedy appends what to do to an allocation error that wraps gpu.ErrOutOfMemory (a
// buffer above maxBufferSize, beyond the NVG_GPU_MEMORY budget, or refused by the driver);
// other errors are returned as they are.
func memRemedy(err error) error {
	if err == nil || !errors.Is(err, gpu.ErrOutOfMemory) || strings.Contains(err.Error(), "— remedy: ") {
		return err
	}
	return fmt.Errorf("%w — remedy: fewer or shorter windows per pass (smaller nb or t: the work buffers grow with nb·t; nvg distill --nb/--t, nvg eval --batch/--t), a smaller top-k (distill --k), fewer kept activations (distill --activation-budget-mib 0: every layer recomputed in the backward), a teacher streamed layer by layer (nvgkit.StreamLayers; distill --stream-teacher, eval --stream), or a GPU with more free memory", err)
}

// Bytes is the GPU bytes the work's buffers hold now (for a Student's work, see
// StudentWorkBytes for the formula).
func (w *Work) Bytes() uint64 {
	var n uint64
	if w.st != nil {
		n += w.st.bytes()
	}
	for _, b := range w.bufs {
		n += b.Bytes()
	}
	for _, b := range []*gpu.Buffer{w.topIDs, w.topLogp} {
		if b != nil {
			n += b.Bytes()
		}
	}
	return n
}

// topBuffers returns the head's top-k outputs for k, reallocating them when k changed.
func (w *Work) topBuffers(k int) (ids, logp *gpu.Buffer, err error) {
	if w.topK == k && w.topIDs != nil {
		return w.topIDs, w.topLogp, nil
	}
	w.topIDs.Release()
	w.topLogp.Release()
	w.topIDs, w.topLogp, w.topK = nil, nil, 0
	rows := w.NB * w.T
	if ids, err = w.dev.NewBuffer("work.topIDs", gpu.U32, rows, k); err != nil {
		return nil, nil, memRemedy(err)
	}
	if logp, err = w.dev.NewBuffer("work.topLogp", gpu.F32, rows, k); err != nil {
		ids.Release()
		return nil, nil, memRemedy(err)
	}
	w.topIDs, w.topLogp, w.topK = ids, logp, k
	return ids, logp, nil
}

// Release frees the work's GPU buffers; releasing twice is a no-op.
func (w *Work) Release() {
	if w == nil || w.released {
		return
	}
	w.released = true
	for _, b := range w.views {
		b.Release()
	}
	for _, b := range w.bufs {
		b.Release()
	}
	w.topIDs.Release()
	w.topLogp.Release()
	w.st.release()
}

// check reports whether w can serve net.
func (w *Work) check(op string, net *Net) error {
	if err := net.usable(op); err != nil {
		return err
	}
	if w == nil {
		return fmt.Errorf("nvgkit.%s: nil work", op)
	}
	if w.released {
		return fmt.Errorf("nvgkit.%s: the work has been released", op)
	}
	if w.dev != net.dev {
		return fmt.Errorf("nvgkit.%s: work and net live on different devices", op)
	}
	a, b := w.cfg, net.Config
	if a.HiddenSize != b.HiddenSize || a.IntermediateSize != b.IntermediateSize || a.VocabSize != b.VocabSize ||
		a.NumAttentionHeads != b.NumAttentionHeads || a.NumKeyValueHeads != b.NumKeyValueHeads || a.HeadDim != b.HeadDim ||
		a.LinearNumKeyHeads != b.LinearNumKeyHeads || a.LinearNumValueHeads != b.LinearNumValueHeads ||
		a.LinearKeyHeadDim != b.LinearKeyHeadDim || a.LinearValueHeadDim != b.LinearValueHeadDim ||
		a.NumHiddenLayers != b.NumHiddenLayers && w.st != nil ||
		w.st == nil && ((w.acts.q == nil && hasKind(b, true)) || (w.acts.mixed == nil && hasKind(b, false))) ||
		w.st != nil && (!sameLayerTypes(a, b) || a.TieWordEmbeddings != b.TieWordEmbeddings) {
		return fmt.Errorf("nvgkit.%s: the work was made for another architecture", op)
	}
	if (w.st != nil) != (net.Kind == Student) {
		kind := "teacher"
		if w.st != nil {
			kind = "student"
		}
		return fmt.Errorf("nvgkit.%s: the work was made for a %s net, not this %v net (NewWork with this net)", op, kind, net.Kind)
	}
	return nil
}

func sameLayerTypes(a, b arch.Config) bool {
	if len(a.LayerTypes) != len(b.LayerTypes) {
		return false
	}
	for i := range a.LayerTypes {
		if a.IsFullAttention(i) != b.IsFullAttention(i) {
			return false
		}
	}
	return true
}

func hasKind(c arch.Config, full bool) bool {
	for i := range c.LayerTypes {
		if c.IsFullAttention(i) == full {
			return true
		}
	}
	return false
}
