package nvgkit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"github.com/nvg-project/nvg/gpu"
)

// The kinds of HiddenLoss.
const (
	// HiddenMSE is the normalised squared error ‖h_S − h_T‖² / (‖h_T‖² + ε) per token.
	HiddenMSE = "mse"
	// HiddenCosine is the cosine distance 1 − cos(h_S, h_T) per token.
	HiddenCosine = "cosine"
)

// HiddenLoss selects the hidden-state term of a Student step (DESIGN.md §6 "Hidden-state
// loss"): with it the step's loss is
//
//	KL + Weight·L_hidden,   L_hidden = (1/|Layers|)·Σ_{l ∈ Layers} (1/rows)·Σ_r e_{l,r},
//
// where e_{l,r} compares token r of the student's residual stream after decoder layer l with
// the teacher's (HiddenStates): ‖h_S − h_T‖²/(‖h_T‖² + ε) for HiddenMSE, 1 − cos(h_S, h_T)
// for HiddenCosine (gpu.HiddenLoss, ε = gpu.HiddenLossEps). It is LittleBit's layer-to-layer
// loss (arXiv 2506.13771: KL + 10·Σ_l MSE(h_S^l, h_T^l), plain MSE over every layer)
// normalised per token by the teacher's norm, so that the layers count alike although the
// residual stream grows with depth. The zero value (Kind "") is no term.
type HiddenLoss struct {
	// Kind is HiddenMSE or HiddenCosine; "" turns the term off.
	Kind string
	// Weight is λ, finite and ≥ 0.
	Weight float64
	// Layers are the decoder layers whose outputs are matched: ascending, distinct, in
	// [0, num_hidden_layers) (ParseHiddenLayers reads them from a flag).
	Layers []int
}

// On reports whether h is a term (Kind not "").
func (h HiddenLoss) On() bool { return h.Kind != "" }

// Validate checks h for a net of numLayers decoder layers: Kind "" (then nothing else is
// checked), HiddenMSE or HiddenCosine; Weight finite and ≥ 0; at least one layer, ascending,
// distinct and in [0, numLayers). Errors name the field and the value.
func (h HiddenLoss) Validate(numLayers int) error {
	if !h.On() {
		return nil
	}
	if _, err := h.gpuKind(); err != nil {
		return err
	}
	if !(h.Weight >= 0) || math.IsInf(h.Weight, 0) {
		return fmt.Errorf("nvgkit: HiddenLoss.Weight = %g, want a finite value ≥ 0", h.Weight)
	}
	if len(h.Layers) == 0 {
		return fmt.Errorf("nvgkit: HiddenLoss.Layers is empty: name at least one decoder layer in [0, %d)", numLayers)
	}
	for i, l := range h.Layers {
		if l < 0 || l >= numLayers || (i > 0 && l <= h.Layers[i-1]) {
			return fmt.Errorf("nvgkit: HiddenLoss.Layers = %v: want ascending, distinct decoder layers in [0, %d)", h.Layers, numLayers)
		}
	}
	return nil
}

// gpuKind maps Kind onto the kernel's.
func (h HiddenLoss) gpuKind() (gpu.HiddenLossKind, error) {
	switch h.Kind {
	case HiddenMSE:
		return gpu.HiddenMSE, nil
	case HiddenCosine:
		return gpu.HiddenCosine, nil
	}
	return 0, fmt.Errorf("nvgkit: HiddenLoss.Kind = %q, want %q or %q (or \"\": no term)", h.Kind, HiddenMSE, HiddenCosine)
}

// ParseHiddenLayers reads a layer selection for HiddenLoss.Layers from spec, for a net of
// numLayers decoder layers: "all"; "every:K" (K ≥ 1: layers K−1, 2K−1, …, the outputs of
// every K-th layer, ending at the last when K divides numLayers; the last layer alone when
// numLayers < K, so that a default such as "every:4" fits any net); or a comma-separated list
// of layer indices ("3,7"), each in [0, numLayers), returned sorted. Errors name the spec
// and what is wrong (an empty selection, a bad number, a layer out of range or repeated).
func ParseHiddenLayers(spec string, numLayers int) ([]int, error) {
	bad := func(format string, a ...any) ([]int, error) {
		return nil, fmt.Errorf("nvgkit: hidden-state layers %q: "+format+" (want \"all\", \"every:K\" or a list such as \"3,7\")", append([]any{spec}, a...)...)
	}
	s := strings.TrimSpace(spec)
	var out []int
	switch {
	case s == "all":
		for l := range numLayers {
			out = append(out, l)
		}
	case strings.HasPrefix(s, "every:"):
		k, err := strconv.Atoi(strings.TrimPrefix(s, "every:"))
		if err != nil || k < 1 {
			return bad("K must be an integer ≥ 1")
		}
		for l := k - 1; l < numLayers; l += k {
			out = append(out, l)
		}
		if len(out) == 0 && numLayers > 0 {
			out = []int{numLayers - 1}
		}
	default:
		for _, f := range strings.Split(s, ",") {
			l, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return bad("%q is not a layer index", f)
			}
			if l < 0 || l >= numLayers {
				return bad("layer %d is outside [0, %d)", l, numLayers)
			}
			if slices.Contains(out, l) {
				return bad("layer %d is named twice", l)
			}
			out = append(out, l)
		}
		slices.Sort(out)
	}
	if len(out) == 0 {
		return bad("no layer of the %d selected", numLayers)
	}
	return out, nil
}

// HiddenStates holds a teacher's hidden states for NB windows of T tokens at the outputs of
// some decoder layers, as binary16: F16[i] [NB·T·H] (row = window·T + position) is the
// residual stream after decoder layer Layers[i] (TeacherTopKHidden captures them; a
// HiddenLoss step reads them).
type HiddenStates struct {
	NB, T, H int
	// Layers are the decoder layers, ascending.
	Layers []int
	// F16 holds one [NB·T·H] plane of binary16 bits per layer.
	F16 [][]uint16
}

// Select returns the states of hs at layers (each one of hs.Layers, ascending and distinct),
// sharing hs's planes (not copies): the targets of a HiddenLoss over fewer layers than a
// teacher pass kept, or of one layer's block-wise reconstruction (BlockStep). Errors: a nil
// hs, planes that do not match hs.Layers, a layer hs does not hold or layers out of order.
func (hs *HiddenStates) Select(layers []int) (*HiddenStates, error) {
	if hs == nil {
		return nil, errors.New("nvgkit.HiddenStates.Select: no teacher hidden states")
	}
	if len(hs.F16) != len(hs.Layers) {
		return nil, fmt.Errorf("nvgkit.HiddenStates.Select: %d planes for layers %v", len(hs.F16), hs.Layers)
	}
	out := &HiddenStates{NB: hs.NB, T: hs.T, H: hs.H}
	for i, l := range layers {
		j := slices.Index(hs.Layers, l)
		if j < 0 {
			return nil, fmt.Errorf("nvgkit.HiddenStates.Select: the teacher hidden states are of layers %v, not of layer %d", hs.Layers, l)
		}
		if i > 0 && l <= layers[i-1] {
			return nil, fmt.Errorf("nvgkit.HiddenStates.Select: layers %v, want them ascending and distinct", layers)
		}
		out.Layers, out.F16 = append(out.Layers, l), append(out.F16, hs.F16[j])
	}
	return out, nil
}

// HiddenStateBytes is the bytes of the teacher's hidden states a run with a hidden-state
// loss keeps per window of t tokens: 2·t·hidden_size per selected layer (binary16).
func HiddenStateBytes(hiddenSize, t, layers int) int64 {
	return 2 * int64(t) * int64(hiddenSize) * int64(layers)
}

// check validates hs for the term h over nb windows of the work (its T, the net's H).
func (hs *HiddenStates) check(op string, h HiddenLoss, nb, t, H int) error {
	if hs == nil {
		return fmt.Errorf("nvgkit.%s: the hidden-state loss is on but no teacher hidden states were given", op)
	}
	if hs.NB != nb || hs.T != t || hs.H != H {
		return fmt.Errorf("nvgkit.%s: the teacher hidden states are for %d windows × %d tokens × hidden %d, the step has %d × %d × %d", op, hs.NB, hs.T, hs.H, nb, t, H)
	}
	if !slices.Equal(hs.Layers, h.Layers) {
		return fmt.Errorf("nvgkit.%s: the teacher hidden states are of layers %v, the loss matches layers %v", op, hs.Layers, h.Layers)
	}
	if len(hs.F16) != len(hs.Layers) {
		return fmt.Errorf("nvgkit.%s: %d teacher hidden-state planes for %d layers", op, len(hs.F16), len(hs.Layers))
	}
	for i, p := range hs.F16 {
		if len(p) != nb*t*H {
			return fmt.Errorf("nvgkit.%s: the teacher hidden state of layer %d has %d values, want NB·T·H = %d", op, hs.Layers[i], len(p), nb*t*H)
		}
	}
	return nil
}

// toF16 converts a hidden state to binary16 bits. Errors: a value that is not finite or
// beyond binary16's range (±65504), naming layer l, the token row and the value.
func toF16(x []float32, H, l int) ([]uint16, error) {
	out := make([]uint16, len(x))
	for i, v := range x {
		if !(math.Abs(float64(v)) <= 65504) {
			return nil, fmt.Errorf("the teacher's hidden state after layer %d, token row %d, is %g: not finite or beyond binary16's range ±65504, which the hidden-state cache stores", l, i/H, v)
		}
		out[i] = float16.Fromfloat32(v).Bits()
	}
	return out, nil
}

// TeacherTopKHidden is TeacherTopK that also returns the teacher's hidden states after the
// decoder layers given (ascending, distinct, in range), read back after each of those layers
// in the same pass and rounded to binary16 (for a HiddenLoss step). Errors: TeacherTopK's,
// bad layers, and a hidden value that is not finite or beyond binary16's range (naming the
// layer and the token).
func TeacherTopKHidden(net *Net, work *Work, ids [][]int, k int, layers []int) (_ *TopK, _ *HiddenStates, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "TeacherTopKHidden"
	flat, nb, err := net.checkWindows(op, work, ids, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := checkK(op, k, net.Config.VocabSize); err != nil {
		return nil, nil, err
	}
	if err := (HiddenLoss{Kind: HiddenMSE, Layers: layers}).Validate(len(net.layers)); err != nil {
		return nil, nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	H := net.Config.HiddenSize
	real := nb * work.T * H
	hs := &HiddenStates{NB: nb, T: work.T, H: H, Layers: slices.Clone(layers)}
	keep := func(l int) error {
		if l == 0 || !slices.Contains(layers, l-1) {
			return nil
		}
		x, err := net.dev.ReadFloat32(work.x)
		if err != nil {
			return err
		}
		p, err := toF16(x[:real], H, l-1)
		if err != nil {
			return err
		}
		hs.F16 = append(hs.F16, p)
		return nil
	}
	if err := net.pass(work, flat, keep); err != nil {
		return nil, nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	top, err := net.headTopK(work, nb, k)
	if err != nil {
		return nil, nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return top, hs, nil
}

// hiddenArgs is a Student call's hidden-state term: the settings, the teacher's states and
// the kernel's kind (nil: no term).
type hiddenArgs struct {
	h    HiddenLoss
	hs   *HiddenStates
	kind gpu.HiddenLossKind
	sel  map[int]int // decoder layer → its index in h.Layers
}

// hiddenTerm validates a Student call's term for nb windows of the work and allocates its
// buffers: nil when h is off.
func (n *Net) hiddenTerm(op string, w *Work, h HiddenLoss, hs *HiddenStates, nb int) (*hiddenArgs, error) {
	if !h.On() {
		return nil, nil
	}
	if err := h.Validate(len(n.layers)); err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if err := hs.check(op, h, nb, w.T, n.Config.HiddenSize); err != nil {
		return nil, err
	}
	kind, _ := h.gpuKind()
	a := &hiddenArgs{h: h, hs: hs, kind: kind, sel: map[int]int{}}
	for i, l := range h.Layers {
		a.sel[l] = i
	}
	if err := w.hiddenBuffers(len(h.Layers)); err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return a, nil
}

// hiddenBuffers allocates the teacher-state plane (F16 [rows, H], one layer's at a time) and
// the per-token losses (F32 [layers·rows]) of a Student's work, reallocating the losses when
// the number of layers changed.
func (w *Work) hiddenBuffers(layers int) error {
	s, rows, H := w.st, w.NB*w.T, w.cfg.HiddenSize
	var err error
	if s.hidT == nil {
		if s.hidT, err = w.dev.NewBuffer("work.hidT (teacher hidden state)", gpu.F16, rows, H); err != nil {
			return memRemedy(err)
		}
	}
	if s.hidLoss != nil && s.hidLoss.Len() != layers*rows {
		s.hidLoss.Release()
		s.hidLoss = nil
	}
	if s.hidLoss == nil {
		if s.hidLoss, err = w.dev.NewBuffer("work.hidLoss (hidden-state loss per layer and token)", gpu.F32, layers, rows); err != nil {
			return memRemedy(err)
		}
	}
	return nil
}

// uploadHidden writes the teacher's hidden state of decoder layer l (selected) into the
// work's plane, padded to the work's windows by repeating the last window's rows.
func (w *Work) uploadHidden(a *hiddenArgs, l int) error {
	p := a.hs.F16[a.sel[l]]
	size := w.NB * w.T * w.cfg.HiddenSize
	if len(p) == size {
		return w.dev.WriteF16(w.st.hidT, p)
	}
	full := make([]uint16, size)
	n := copy(full, p)
	last := p[len(p)-w.T*w.cfg.HiddenSize:]
	for n < size {
		n += copy(full[n:], last)
	}
	return w.dev.WriteF16(w.st.hidT, full)
}

// recordHiddenLoss records the per-token loss of layer l (selected; its teacher state
// uploaded by uploadHidden) into the work's losses and, when dh is not nil, adds its gradient
// (λ/|Layers| times the KL's per-token scale) to dh, the residual gradient at layer l's output.
func (n *Net) recordHiddenLoss(r *gpu.Recorder, w *Work, a *hiddenArgs, l int, dh *gpu.Buffer) error {
	i := a.sel[l]
	rows := w.NB * w.T
	scale := a.h.Weight / float64(len(a.h.Layers)) * w.klScale()
	return gpu.HiddenLoss(r, w.st.ckpt[l+1], w.st.hidT, dh, w.st.hidLoss,
		gpu.HiddenLossDims{Rows: rows, Hidden: n.Config.HiddenSize, Offset: i * rows}, a.kind, scale)
}

// hiddenParts reads the per-token losses back and fills st's hidden-state parts over the
// first nb windows: HiddenPerLayer, Hidden and Loss = KL + λ·Hidden.
func (w *Work) hiddenParts(a *hiddenArgs, st *StepStats, nb int) error {
	v, err := w.dev.ReadFloat32(w.st.hidLoss)
	if err != nil {
		return err
	}
	rows, real := w.NB*w.T, nb*w.T
	st.HiddenPerLayer = make([]float64, len(a.h.Layers))
	st.Hidden = 0
	for i := range st.HiddenPerLayer {
		st.HiddenPerLayer[i] = meanF64(v[i*rows : i*rows+real])
		st.Hidden += st.HiddenPerLayer[i] / float64(len(st.HiddenPerLayer))
	}
	st.Loss = st.KL + a.h.Weight*st.Hidden
	return nil
}

// selects reports whether the term matches decoder layer l's output, and its index in
// h.Layers (false for a nil term).
func (a *hiddenArgs) selects(l int) (int, bool) {
	if a == nil {
		return 0, false
	}
	i, ok := a.sel[l]
	return i, ok
}
