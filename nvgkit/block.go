package nvgkit

import (
	"fmt"

	"github.com/nvg-project/nvg/gpu"
)

// BlockStep runs one step of the block-wise reconstruction of decoder layer layer (DESIGN.md
// §6 "Block-wise reconstruction"; NanoQuant, arXiv 2602.06694: each block trained to
// reproduce the teacher block's output given the compressed model's own input) over ids —
// exactly work.NB windows of work.T tokens — against hs, the teacher's hidden states of
// those windows holding the output of layer (hs.Layers may hold more layers):
//
//  1. the forward through layers 0 … layer only, one submit per layer, keeping each
//     layer's input: layer reads the output of the student's own layers 0 … layer−1;
//  2. the per-token normalised MSE e_r = ‖s − t‖² / (‖t‖² + ε) of the layer's output s
//     against the teacher's t (gpu.HiddenLoss, the hidden-state loss's kernel), its gradient
//     — the per-token scale 1/(nb·t), or SetLossScale's, times ∂e/∂s — written into the
//     residual gradient at the layer's output;
//  3. in the same submit the layer's forward recomputed from its checkpoint (or, in a work
//     made with KeepActivations, its kept activations) and its backward, ACCUMULATING into
//     the gradients of the layer's own trainables only — its RMSNorm gains and the h, ℓ, g of
//     every path of its BLR projections (and, with sign learning, its sign scores). The
//     layers below and above, the final norm and the head get no gradient and are not run.
//
// The StepStats hold Loss = Hidden = the mean of e over the tokens (HiddenPerLayer its one
// value; KL 0, KLPerToken nil), Tokens and Finite (the loss and Σ g² finite). The step costs
// layer+1 layer forwards, one layer's recompute (none when kept) and one layer's backward:
// over a phase that walks every layer, on average (L+1)/2 forwards and one backward per step
// against a full Step's L forwards, L recomputes and backwards and the head over the whole
// vocabulary. host.Net.BlockLossGrad is its float64 reference. EmbedGrads has nothing after
// it (the gradient stops at the layer's input). Errors, before anything is submitted: those
// of Step for the net, work and ids (a number of windows other than work.NB included), a
// layer outside [0, num_hidden_layers), and hs missing, of other windows, T or hidden size,
// or without the layer; then any GPU error.
func BlockStep(net *Net, work *Work, ids [][]int, layer int, hs *HiddenStates) (_ StepStats, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "BlockStep"
	if err := work.check(op, net); err != nil {
		return StepStats{}, err
	}
	if len(ids) != work.NB {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %d windows, but a step takes exactly the work's nb = %d windows (nb·t must match the Work)", op, len(ids), work.NB)
	}
	flat, _, ha, err := net.prepareBlock(op, work, ids, layer, hs)
	if err != nil {
		return StepStats{}, err
	}
	net.st.ssValid = false // the gradients change from here on, even if the step fails
	s := work.st
	s.embed = nil
	own := s.acts
	defer func() { s.acts = own }() // the recompute's kept t1 and c die with the submit
	if err := net.studentForwardTo(work, flat, layer+1); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	// The queue writes the teacher's state before the submit that reads it.
	if err := work.uploadHidden(ha, layer); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d: %w", op, layer, err)
	}
	L, nb, t := net.layers[layer], work.NB, work.T
	r := net.dev.Begin()
	err = runSteps([]func() error{
		func() error { return gpu.Zero(r, s.d0) },
		func() error { return net.recordHiddenLoss(r, work, ha, layer, s.d0) },
		func() error {
			if k := s.keptActs(layer); k != nil {
				s.acts = *k
				return nil
			}
			return net.recordLayer(r, L, &s.acts, s.ckpt[layer], nil, nb, t, true)
		},
		func() error { return net.recordLayerBackward(r, L, s, s.ckpt[layer], s.d0, s.d1, nb, t) },
	})
	if err != nil {
		r.Discard()
		return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d: %w", op, layer, err)
	}
	err = r.Submit()
	s.acts = own
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d: %w", op, layer, err)
	}
	ss, err := net.gradSumSquares()
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	st := StepStats{Tokens: nb * t}
	if err := work.hiddenParts(ha, &st, nb); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	st.Finite = finite(st.Loss) && finite(ss)
	return st, nil
}

// BlockLoss is the forward half of BlockStep: over 1 ≤ len(ids) ≤ work.NB windows (fewer are
// computed as padding and dropped, as LossOnly), the mean normalised MSE of layer's output,
// computed from the student's own layers 0 … layer, against hs's (these windows' states,
// holding layer), in StepStats as BlockStep's. Gradients are not touched. Errors: BlockStep's
// (any number of windows from 1 to work.NB).
func BlockLoss(net *Net, work *Work, ids [][]int, layer int, hs *HiddenStates) (_ StepStats, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "BlockLoss"
	flat, nb, ha, err := net.prepareBlock(op, work, ids, layer, hs)
	if err != nil {
		return StepStats{}, err
	}
	if err := net.studentForwardTo(work, flat, layer+1); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if err := work.uploadHidden(ha, layer); err == nil {
		err = net.dev.Run(func(r *gpu.Recorder) error { return net.recordHiddenLoss(r, work, ha, layer, nil) })
	}
	if err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: layer %d: %w", op, layer, err)
	}
	st := StepStats{Tokens: nb * work.T}
	if err := work.hiddenParts(ha, &st, nb); err != nil {
		return StepStats{}, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	st.Finite = finite(st.Loss)
	return st, nil
}

// prepareBlock validates a block call — a Student, the windows, layer in range, hs holding
// it for these windows — and allocates the term's buffers: the flattened ids, the number of
// real windows and the one-layer normalised-MSE term.
func (n *Net) prepareBlock(op string, w *Work, ids [][]int, layer int, hs *HiddenStates) ([]int, int, *hiddenArgs, error) {
	if err := n.requireStudent(op); err != nil {
		return nil, 0, nil, err
	}
	flat, nb, err := n.windows(op, w, ids, 0, 0)
	if err != nil {
		return nil, 0, nil, err
	}
	if layer < 0 || layer >= len(n.layers) {
		return nil, 0, nil, fmt.Errorf("nvgkit.%s: layer %d is outside the student's decoder layers [0, %d)", op, layer, len(n.layers))
	}
	one, err := hs.Select([]int{layer})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	ha, err := n.hiddenTerm(op, w, HiddenLoss{Kind: HiddenMSE, Weight: 1, Layers: []int{layer}}, one, nb)
	if err != nil {
		return nil, 0, nil, err
	}
	return flat, nb, ha, nil
}

// ResetOptimizer zeroes a Student's optimizer state: the Adam moments (m, v) of every
// trainable and, once sign learning was enabled (EnableSigns), every sign score; the values,
// the gradients and the sign bits stay. A phase that starts its optimizer afresh calls it
// (the block-wise reconstruction before each layer and before the KL phase that follows,
// its Adam step count restarting at 1): with zero moments and zero gradients a value's Adam
// update is exactly 0 and a sign with a zero score never flips, so a step that computes the
// gradients of one layer alone moves that layer alone. One submit. Errors: a nil, released
// or Teacher net; a GPU error.
func ResetOptimizer(net *Net) error {
	if err := net.requireStudent("ResetOptimizer"); err != nil {
		return err
	}
	var bufs []*gpu.Buffer
	for _, a := range net.st.arenas {
		bufs = append(bufs, a.M, a.V)
	}
	for _, l := range net.st.blrs {
		if l.signs != nil {
			bufs = append(append(bufs, l.signs.su...), l.signs.sv...)
		}
	}
	err := net.dev.Run(func(r *gpu.Recorder) error {
		for _, b := range bufs {
			if err := gpu.Zero(r, b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nvgkit.ResetOptimizer: %w", err)
	}
	return nil
}
