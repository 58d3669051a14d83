package nvgkit

import (
	"context"
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// TopK is the teacher's top-k next-token distribution per token of nb windows of t tokens.
// Row ρ = b·T + τ is token τ of window b; per-token slices of K entries start at ρ·K.
type TopK struct {
	// NB windows of T tokens, K entries per token.
	NB, T, K int
	// IDs [NB·T·K]: the K most probable next-token ids per token, most probable first, ties
	// broken by the lower id.
	IDs []int32
	// Probs [NB·T·K]: their probabilities renormalised over the K (each token's K sum to 1):
	// p_j = exp(lp_j) / Σ_i exp(lp_i), computed in float64 and stored as float32.
	Probs []float32
	// LogProbs [NB·T·K]: their log-probabilities under the full-vocabulary softmax,
	// logit − LSE (natural log), before renormalisation.
	LogProbs []float32
	// LSE [NB·T]: log Σ_v exp(logit_v) over the whole vocabulary, per token.
	LSE []float32
}

// checkWindows validates nb ≤ w.NB windows of exactly w.T + extra tokens with ids in
// [0, vocab) and returns the inputs (the first w.T ids of each window) flattened and padded
// to w.NB windows by repeating the last window, and the number of real windows. Errors
// number the windows from first.
func (n *Net) checkWindows(op string, w *Work, ids [][]int, extra, first int) (flat []int, nb int, err error) {
	if err := n.usable(op); err != nil {
		return nil, 0, err
	}
	if n.Kind != Teacher {
		return nil, 0, fmt.Errorf("nvgkit.%s runs a Teacher net; this net is a %v (use LossOnly or Step)", op, n.Kind)
	}
	return n.windows(op, w, ids, extra, first)
}

// windows is checkWindows for any net kind.
func (n *Net) windows(op string, w *Work, ids [][]int, extra, first int) (flat []int, nb int, err error) {
	if err := w.check(op, n); err != nil {
		return nil, 0, err
	}
	if len(ids) == 0 {
		return nil, 0, fmt.Errorf("nvgkit.%s: no windows", op)
	}
	if len(ids) > w.NB {
		return nil, 0, fmt.Errorf("nvgkit.%s: %d windows, but the work holds at most %d", op, len(ids), w.NB)
	}
	want, V := w.T+extra, n.Config.VocabSize
	for b, win := range ids {
		if len(win) != want {
			if extra > 0 {
				return nil, 0, fmt.Errorf("nvgkit.%s: window %d has %d tokens, want t+1 = %d (t = %d inputs of the work, then the last target)", op, first+b, len(win), want, w.T)
			}
			return nil, 0, fmt.Errorf("nvgkit.%s: window %d has %d tokens, want t = %d (the work's window length)", op, first+b, len(win), want)
		}
		for i, id := range win {
			if id < 0 || id >= V {
				return nil, 0, fmt.Errorf("nvgkit.%s: token %d of window %d is %d, outside the vocabulary [0, %d)", op, i, first+b, id, V)
			}
		}
	}
	flat = make([]int, 0, w.NB*w.T)
	for b := 0; b < w.NB; b++ {
		win := ids[min(b, len(ids)-1)]
		flat = append(flat, win[:w.T]...)
	}
	return flat, len(ids), nil
}

func checkK(op string, k, vocab int) error {
	if k < 1 || k > gpu.MaxTopK || k > vocab {
		return fmt.Errorf("nvgkit.%s: k = %d must be in [1, min(%d, vocab %d)]", op, k, gpu.MaxTopK, vocab)
	}
	return nil
}

// TeacherTopK runs net over ids — 1 ≤ len(ids) ≤ work.NB windows of exactly work.T tokens
// each (positions 0…T−1 in every window, no state across windows) — and returns, per token,
// the top-k next-token ids with their probabilities renormalised over the k and the
// per-token log-sum-exp (see TopK for shapes). Fewer windows than work.NB are computed as
// padding (repeats of the last window) and dropped. Each decoder layer is one submit; only
// the head's outputs (lse, ids, log-probs: (2k+1)·4 bytes per token) are read back.
//
// Errors (before anything is submitted): a nil or released net or work, a work of another
// architecture or device, no windows, more windows than the work holds, a window whose
// length is not work.T, an id outside [0, vocab), or k outside [1, min(64, vocab)]; then any
// GPU error, naming the layer.
func TeacherTopK(net *Net, work *Work, ids [][]int, k int) (_ *TopK, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "TeacherTopK"
	flat, nb, err := net.checkWindows(op, work, ids, 0, 0)
	if err != nil {
		return nil, err
	}
	if err := checkK(op, k, net.Config.VocabSize); err != nil {
		return nil, err
	}
	if err := net.pass(work, flat, nil); err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	top, err := net.headTopK(work, nb, k)
	if err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return top, nil
}

// headTopK records the final norm and the top-k head on work.x, submits, and reads back the
// first nb windows' results.
func (n *Net) headTopK(w *Work, nb, k int) (*TopK, error) {
	idsB, logpB, err := w.topBuffers(k)
	if err != nil {
		return nil, err
	}
	if err := n.runHead(w, k, idsB, logpB, nil); err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	real := nb * w.T
	lse, ids, logp, err := n.readHead(w, idsB, logpB)
	if err != nil {
		return nil, err
	}
	top := &TopK{NB: nb, T: w.T, K: k, IDs: make([]int32, real*k), Probs: make([]float32, real*k),
		LogProbs: logp[: real*k : real*k], LSE: lse[:real:real]}
	for i, id := range ids[:real*k] {
		top.IDs[i] = int32(id)
	}
	for r := 0; r < real; r++ {
		lp := logp[r*k : (r+1)*k]
		m, s := maxSumExp(lp)
		for j, v := range lp {
			top.Probs[r*k+j] = float32(math.Exp(float64(v)-m) / s)
		}
	}
	return top, nil
}

// readHead reads back the top-k head's outputs: the work's log-sum-exp, and the ids and
// log-probabilities in idsB and logpB (Work.topBuffers).
func (n *Net) readHead(w *Work, idsB, logpB *gpu.Buffer) (lse []float32, ids []uint32, logp []float32, err error) {
	if lse, err = n.dev.ReadFloat32(w.headLSE); err != nil {
		return nil, nil, nil, err
	}
	if ids, err = n.dev.ReadUint32(idsB); err != nil {
		return nil, nil, nil, err
	}
	if logp, err = n.dev.ReadFloat32(logpB); err != nil {
		return nil, nil, nil, err
	}
	return lse, ids, logp, nil
}

// ForwardOptions selects the optional outputs of Forward.
type ForwardOptions struct {
	// TopK > 0 asks for the top-k head (Trace.TopK), 1 ≤ TopK ≤ min(64, vocab).
	TopK int
	// Logits0 asks for the full logits of window 0, Trace.Logits0 [T, vocab]. They are
	// computed one vocabulary slice at a time (as the top-k head does), so neither the head
	// nor the [T, vocab] f32 logits need to fit one storage binding.
	Logits0 bool
}

// Trace is what Forward returns for nb windows of t tokens.
type Trace struct {
	// NB windows of T tokens (the windows given, not the work's padding).
	NB, T int
	// Hidden[L], L = 0…num_layers, each [NB·T·H] f32 row-major: Hidden[0] the embeddings,
	// Hidden[L] the output of decoder layer L−1 (the residual stream), except the last,
	// Hidden[num_layers], which is the last layer's output after the final norm (the head's
	// input) — the schema of the HF fixtures and host.Trace.
	Hidden [][]float32
	// TopK is the head's top-k (with per-token LSE) when ForwardOptions.TopK > 0; else nil.
	TopK *TopK
	// LSE [NB·T] is the per-token log-sum-exp of the logits (also TopK.LSE when present).
	LSE []float32
	// Logits0 [T·vocab] f32, the logits of window 0, when ForwardOptions.Logits0; else nil.
	Logits0 []float32
}

// Forward runs net over ids like TeacherTopK and also reads back the hidden state after the
// embedding and after every layer (one readback of [nb·t, H] f32 per layer: for tests and
// `nvg trace`, not for speed). Errors as TeacherTopK, and opt.TopK outside [0, min(64, vocab)].
func Forward(net *Net, work *Work, ids [][]int, opt ForwardOptions) (_ *Trace, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "Forward"
	flat, nb, err := net.checkWindows(op, work, ids, 0, 0)
	if err != nil {
		return nil, err
	}
	c := net.Config
	if opt.TopK < 0 {
		return nil, fmt.Errorf("nvgkit.%s: TopK = %d is negative", op, opt.TopK)
	}
	if opt.TopK != 0 {
		if err := checkK(op, opt.TopK, c.VocabSize); err != nil {
			return nil, err
		}
	}
	H, real := c.HiddenSize, nb*work.T*c.HiddenSize
	tr := &Trace{NB: nb, T: work.T}
	readX := func(l int) error {
		x, err := net.dev.ReadFloat32(work.x)
		if err != nil {
			return err
		}
		tr.Hidden = append(tr.Hidden, x[:real:real])
		return nil
	}
	if err := net.pass(work, flat, readX); err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	k := max(opt.TopK, 1)
	top, err := net.headTopK(work, nb, k) // also leaves the final-normed hidden in work.xn
	if err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	tr.LSE = top.LSE
	if opt.TopK > 0 {
		tr.TopK = top
	}
	hf, err := net.dev.ReadFloat32(work.xn)
	if err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if len(tr.Hidden) > 0 {
		tr.Hidden = tr.Hidden[:len(tr.Hidden)-1] // the last layer's output is replaced by its final norm
	}
	tr.Hidden = append(tr.Hidden, hf[:real:real])
	if opt.Logits0 {
		if tr.Logits0, err = net.logits(hf[:work.T*H], work.T); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: logits of window 0: %w", op, err)
		}
	}
	return tr, nil
}

// logits returns h·headᵀ [rows, vocab] for h [rows, H] given on the host, one vocabulary
// slice at a time (gpu.LinearRows into a [rows, slice] buffer, read back into its columns),
// so neither the head nor the logits need to fit one storage binding: the same values as one
// Linear over the whole head. Slices are multiples of 128 rows, each within the binding limit
// and 64 MiB of logits; a streamed net uploads each slice's rows of its head (headRows).
func (n *Net) logits(h []float32, rows int) ([]float32, error) {
	c := n.Config
	H, V := c.HiddenSize, c.VocabSize
	maxBind := n.dev.Info().MaxStorageBindingSize
	slice := min(maxBind/(uint64(H)*2), min(maxBind, 64<<20)/(uint64(rows)*4)) / 128 * 128 // the head is f16
	if slice == 0 {
		return nil, fmt.Errorf("%d rows × hidden %d leave no room for a 128-row vocabulary slice in one storage binding (%d bytes)", rows, H, maxBind)
	}
	hb, err := n.dev.UploadFloat32("logits input", h, rows, H)
	if err != nil {
		return nil, err
	}
	defer hb.Release()
	out := make([]float32, rows*V)
	for v0 := 0; v0 < V; v0 += int(slice) {
		cols := min(int(slice), V-v0)
		sb, err := n.dev.NewBuffer("logits slice", gpu.F32, rows, cols)
		if err != nil {
			return nil, err
		}
		e, o0, eRows, owned, err := n.headRows(v0, cols)
		if err != nil {
			sb.Release()
			return nil, err
		}
		err = n.dev.Run(func(r *gpu.Recorder) error { return gpu.LinearRows(r, hb, e, sb, rows, H, eRows, o0, cols) })
		if owned {
			e.Release()
		}
		var part []float32
		if err == nil {
			part, err = n.dev.ReadFloat32(sb)
		}
		sb.Release()
		if err != nil {
			return nil, fmt.Errorf("vocabulary rows [%d, %d): %w", v0, v0+cols, err)
		}
		for r := range rows {
			copy(out[r*V+v0:r*V+v0+cols], part[r*cols:(r+1)*cols])
		}
	}
	return out, nil
}

// NLL returns the summed next-token negative log-likelihood (natural log) of net over
// windows of work.T+1 tokens each (inputs w[:T], targets w[1:]) and the number of predicted
// tokens (len(windows)·work.T), so perplexity = exp(sum/count). Per token it is
// lse − logit[target], both on the GPU (LogitsTopK's running log-sum-exp and TargetLogits),
// summed in float64 on the host. Windows go work.NB at a time (the last group padded);
// progress, when not nil, is called after each group with the windows done and the total.
// Errors (before anything is submitted): no windows, a window whose length is not work.T+1,
// an id outside [0, vocab), a nil/released/mismatched net or work; then any GPU error.
// A NaN or infinite hidden state gives a NaN or infinite sum, not an error:
// FirstNonFinite(net, work, windows) then names the layer where it starts (`nvg eval` does).
func NLL(net *Net, work *Work, windows [][]int, progress func(done, total int)) (sum float64, count int, err error) {
	return NLLContext(context.Background(), net, work, windows, progress)
}

// NLLContext is NLL stopped by ctx: before each group of work.NB windows it returns, when
// ctx is done, an error wrapping context.Cause(ctx) (the sum so far is dropped).
func NLLContext(ctx context.Context, net *Net, work *Work, windows [][]int, progress func(done, total int)) (sum float64, count int, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "NLL"
	if err := work.check(op, net); err != nil {
		return 0, 0, err
	}
	if net.Kind != Teacher {
		return 0, 0, fmt.Errorf("nvgkit.%s runs a Teacher net; this net is a %v (use LossOnly)", op, net.Kind)
	}
	if len(windows) == 0 {
		return 0, 0, fmt.Errorf("nvgkit.%s: no windows", op)
	}
	// Validate every window up front: nothing is submitted for a bad batch.
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if _, _, err := net.checkWindows(op, work, windows[g0:min(g0+work.NB, len(windows))], 1, g0); err != nil {
			return 0, 0, err
		}
	}
	rows := work.NB * work.T
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("nvgkit.%s: stopped after %d of %d windows: %w", op, g0, len(windows), context.Cause(ctx))
		}
		group := windows[g0:min(g0+work.NB, len(windows))]
		flat, nb, _ := net.checkWindows(op, work, group, 1, g0)
		targets := make([]int, 0, rows)
		for b := 0; b < work.NB; b++ {
			targets = append(targets, group[min(b, nb-1)][1:]...)
		}
		if err := net.pass(work, flat, nil); err != nil {
			return 0, 0, fmt.Errorf("nvgkit.%s: windows %d…: %w", op, g0, err)
		}
		idsB, logpB, err := work.topBuffers(1)
		if err != nil {
			return 0, 0, err
		}
		release := func() {}
		err = net.runHead(work, 1, idsB, logpB, func(r *gpu.Recorder) (err error) {
			release, err = net.targetLogits(r, work.xn, targets, work.tgt)
			return err
		})
		release()
		if err != nil {
			return 0, 0, fmt.Errorf("nvgkit.%s: head: %w", op, err)
		}
		lse, err := net.dev.ReadFloat32(work.headLSE)
		if err != nil {
			return 0, 0, err
		}
		tgt, err := net.dev.ReadFloat32(work.tgt)
		if err != nil {
			return 0, 0, err
		}
		for i := 0; i < nb*work.T; i++ {
			sum += float64(lse[i]) - float64(tgt[i])
		}
		count += nb * work.T
		if progress != nil {
			progress(g0+nb, len(windows))
		}
	}
	return sum, count, nil
}
