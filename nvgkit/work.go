package nvgkit

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"strings"

	"github.com/nvg-project/nvg/gpu"
)

// Work holds the activation buffers of one pass over nb windows of t tokens (rows = nb·t
// token rows), sized once by NewWork and reused by every TeacherTopK, Forward and NLL call.
// Each buffer is F32 and row-major [rows, width]:
//
//	x [rows, H] the residual stream;  xn [rows, H] norm outputs;  mix [rows, H] mixer/MLP output;
//	gate, up, act [rows, I] the MLP;
//	GatedDeltaNet (when the model has such layers): qa, ka [rows, Hk·dk], va [rows, Hv·dv]
//	(projections, later the normalised q and k), qb, kb [rows, Hk·dk], vb [rows, Hv·dv]
//	(conv outputs), z, core, normed [rows, Hv·dv], a, b, g, beta [rows, Hv];
//	attention (when the model has such layers): q, gate, qr, o, gated [rows, nh·hd],
//	k, v, kr [rows, nkv·hd], lse [rows, nh];
//	head: lse, tgt [rows], top-k ids (U32) and log-probs [rows, k] (allocated per k).
//
// A Work fits any net of the same architecture sizes. Release frees it.
type Work struct {
	// NB is the number of windows and T the tokens per window the buffers are sized for.
	NB, T int

	dev  *gpu.Device
	cfg  arch.Config
	bufs []*gpu.Buffer

	x, xn, mix      *gpu.Buffer
	gate, up, act   *gpu.Buffer
	qa, ka, va      *gpu.Buffer
	qb, kb, vb      *gpu.Buffer
	z, core, normed *gpu.Buffer
	a, b, g, beta   *gpu.Buffer
	q, agate, qr, o *gpu.Buffer
	gated           *gpu.Buffer
	k, v, kr, alse  *gpu.Buffer
	headLSE, tgt    *gpu.Buffer
	topIDs, topLogp *gpu.Buffer
	topK            int
	released        bool
	st              *stWork // a Student's buffers (NewWork for a Student net), else nil
}

// NewWork allocates the activation buffers for nb windows of t tokens of net's
// architecture on dev. For a Student net it allocates the step's buffers instead (Step,
// LossOnly): (layers+1) checkpoints of [nb·t, H] f32 (every layer's input and the last
// output), one layer's activations (recomputed per layer in the backward), the head's, and the
// gradient scratch — StudentWorkBytes(net.Config, nb, t) bytes, given there as a formula
// (Work.Bytes reports them, plus the top-k buffers once a Step or LossOnly has run). Every buffer is checked against the device before anything is
// allocated: none may exceed maxStorageBufferBindingSize (each is bound whole by one
// kernel), and the head's per-slice logits scratch (≥ nb·t·128·4 bytes) must fit one binding
// and 64 MiB, i.e. nb·t ≤ 131072 tokens per pass. Errors: a nil device or net, a net on
// another device, nb or t < 1, nb·t·width beyond 2³¹ elements, a buffer over the binding
// limit (named, with its bytes and the limit), or an allocation failure (nothing stays
// allocated then).
func NewWork(dev *gpu.Device, net *Net, nb, t int) (*Work, error) {
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
	c := net.Config
	rows := nb * t
	if net.Kind == Student {
		return newStudentWork(dev, net, nb, t)
	}
	H, I := c.HiddenSize, c.IntermediateSize
	hasAttn, hasDelta := false, false
	for i := range c.LayerTypes {
		if c.IsFullAttention(i) {
			hasAttn = true
		} else {
			hasDelta = true
		}
	}
	w := &Work{NB: nb, T: t, dev: dev, cfg: c}
	type spec struct {
		dst   **gpu.Buffer
		label string
		width int
	}
	specs := []spec{
		{&w.x, "work.x (residual stream)", H}, {&w.xn, "work.xn (norm output)", H}, {&w.mix, "work.mix (mixer/MLP output)", H},
		{&w.gate, "work.gate (mlp gate_proj)", I}, {&w.up, "work.up (mlp up_proj)", I}, {&w.act, "work.act (SwiGLU)", I},
		{&w.headLSE, "work.headLSE (logsumexp)", 1}, {&w.tgt, "work.tgt (target logits)", 1},
	}
	if hasDelta {
		QK, VV, hv := c.LinearNumKeyHeads*c.LinearKeyHeadDim, c.LinearNumValueHeads*c.LinearValueHeadDim, c.LinearNumValueHeads
		specs = append(specs,
			spec{&w.qa, "work.qa (delta q)", QK}, spec{&w.ka, "work.ka (delta k)", QK}, spec{&w.va, "work.va (delta v proj)", VV},
			spec{&w.qb, "work.qb (delta q conv)", QK}, spec{&w.kb, "work.kb (delta k conv)", QK}, spec{&w.vb, "work.vb (delta v conv)", VV},
			spec{&w.z, "work.z (delta in_proj_z)", VV}, spec{&w.core, "work.core (delta rule output)", VV},
			spec{&w.normed, "work.normed (gated norm output)", VV},
			spec{&w.a, "work.a (delta in_proj_a)", hv}, spec{&w.b, "work.b (delta in_proj_b)", hv},
			spec{&w.g, "work.g (delta log decay)", hv}, spec{&w.beta, "work.beta (delta beta)", hv})
	}
	if hasAttn {
		Q, KV := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
		specs = append(specs,
			spec{&w.q, "work.q (attention query)", Q}, spec{&w.agate, "work.agate (attention gate)", Q},
			spec{&w.qr, "work.qr (query after norm+RoPE)", Q}, spec{&w.o, "work.o (attention output)", Q},
			spec{&w.gated, "work.gated (gated attention output)", Q},
			spec{&w.k, "work.k (attention key)", KV}, spec{&w.v, "work.v (attention value)", KV},
			spec{&w.kr, "work.kr (key after norm+RoPE)", KV}, spec{&w.alse, "work.alse (attention logsumexp)", c.NumAttentionHeads})
	}
	maxBind := dev.Info().MaxStorageBindingSize
	// gpu.LogitsTopK needs a logits scratch of at least [rows, 128] f32 within one binding
	// and its 64 MiB cap: refuse here rather than after every layer has run.
	if need := uint64(rows) * 128 * 4; need > min(maxBind, 64<<20) {
		return nil, fmt.Errorf("nvgkit.NewWork: the head's logits scratch for %d rows needs at least %d bytes (a 128-entry vocabulary slice), above min(maxStorageBufferBindingSize %d, 64 MiB); use at most %d tokens per pass",
			rows, need, maxBind, min(maxBind, 64<<20)/512)
	}
	for _, s := range specs {
		n := uint64(rows) * uint64(s.width)
		if n > 1<<31-1 {
			return nil, fmt.Errorf("nvgkit.NewWork: %s needs %d×%d = %d elements, beyond the 2³¹ index range; use fewer or shorter windows",
				s.label, rows, s.width, n)
		}
		if 4*n > maxBind {
			return nil, fmt.Errorf("nvgkit.NewWork: %s [%d×%d] f32 needs %d bytes, above the device's maxStorageBufferBindingSize %d; use fewer or shorter windows (nb = %d, t = %d)",
				s.label, rows, s.width, 4*n, maxBind, nb, t)
		}
	}
	for _, s := range specs {
		b, err := dev.NewBuffer(s.label, gpu.F32, rows, s.width)
		if err != nil {
			w.Release()
			return nil, memRemedy(fmt.Errorf("nvgkit.NewWork: %w", err))
		}
		*s.dst = b
		w.bufs = append(w.bufs, b)
	}
	return w, nil
}

// memRemedy appends what to do to an allocation error that wraps gpu.ErrOutOfMemory (a
// buffer above maxBufferSize, beyond the NVG_GPU_MEMORY budget, or refused by the driver);
// other errors are returned as they are.
func memRemedy(err error) error {
	if err == nil || !errors.Is(err, gpu.ErrOutOfMemory) || strings.Contains(err.Error(), "— remedy: ") {
		return err
	}
	return fmt.Errorf("%w — remedy: fewer or shorter windows per pass (smaller nb or t: the work buffers grow with nb·t; nvg distill --nb/--t, nvg eval --batch/--t), a smaller top-k (distill --k), a teacher streamed layer by layer (nvgkit.StreamLayers; distill --stream-teacher, eval --stream), or a GPU with more free memory", err)
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
		w.st == nil && ((w.q == nil && hasKind(b, true)) || (w.qa == nil && hasKind(b, false))) ||
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
