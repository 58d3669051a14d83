package train

import (
	"context"
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/nvgkit"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// Eval evaluates the student (and the teacher, once per window count) on the first windows
// held-out windows (see session.Lab.Eval).
func (l *Lab) Eval(windows int, opts ...session.Option) (session.EvalResult, error) {
	s, err := l.ready("Eval")
	if err != nil {
		return session.EvalResult{}, err
	}
	n := len(s.tr.eval)
	if windows < 0 || windows > n {
		return session.EvalResult{}, fmt.Errorf("train.Lab.Eval: windows = %d, want 0 (all) … %d", windows, n)
	}
	if windows == 0 {
		windows = n
	}
	o := session.Apply(opts...)
	ctx, end := l.begin(o)
	defer end()
	start := time.Now()
	progress := s.phaseProgress(o.OnProgress, "eval", start)
	r, err := s.eval(ctx, windows, progress)
	if err != nil && ctx.Err() != nil {
		return r, interrupted(ctx, "during the evaluation")
	}
	if err == nil && windows == n {
		s.noteStepEval(r)
	}
	return r, err
}

// noteStepEval records an evaluation on all held-out windows as the EvalPPL of the history's
// last step when it directly follows that step (no evaluation of it yet), as Step with
// EvalEvery does; so a session client, which steps and evaluates in separate calls, leaves
// the same history as the in-process Lab.
func (s *labState) noteStepEval(r session.EvalResult) {
	if k := len(s.hist) - 1; k >= 0 && s.hist[k].Step == s.tr.st.Step && s.hist[k].EvalPPL == 0 {
		s.hist[k].EvalPPL = r.StudentPPL
	}
}

// eval evaluates on the first n held-out windows and appends the result to the history;
// ctx stops it between batches (nothing is appended then).
func (s *labState) eval(ctx context.Context, n int, progress func(done, total int)) (session.EvalResult, error) {
	tr := s.tr
	ws := tr.eval[:n]
	tsum, ok := s.teacherNLL[n]
	if !ok {
		sum, _, err := nvgkit.NLLContext(ctx, s.tNet, tr.tWork, ws, nil)
		if err != nil {
			return session.EvalResult{}, fmt.Errorf("train.Lab.Eval: teacher: %w", err)
		}
		tsum = sum
		s.teacherNLL[n] = sum
	}
	sum, count, err := nvgkit.StudentNLLContext(ctx, s.sNet, tr.sWork, ws, progress)
	if err != nil {
		return session.EvalResult{}, fmt.Errorf("train.Lab.Eval: student: %w", err)
	}
	if !finite(sum) {
		return session.EvalResult{}, s.nonFinite(ws, sum/float64(count))
	}
	r := session.EvalResult{Step: tr.st.Step, Windows: n, Tokens: count, StudentLoss: sum / float64(count), TeacherLoss: tsum / float64(count)}
	r.StudentPPL, r.TeacherPPL = math.Exp(r.StudentLoss), math.Exp(r.TeacherLoss)
	s.evals = append(s.evals, r)
	return r, nil
}

// nonFinite is Eval's error for a student whose held-out loss on ws is not finite: it names
// the first trained value that is NaN or ±Inf (nvgkit.FirstNonFiniteTrainable) or, when
// every value is finite, the first hidden state that is not (nvgkit.FirstNonFinite).
func (s *labState) nonFinite(ws [][]int, loss float64) error {
	name, i, v, err := nvgkit.FirstNonFiniteTrainable(s.sNet)
	if err != nil {
		return fmt.Errorf("train.Lab.Eval: the student's held-out loss is %v; looking for its first non-finite value: %w", loss, err)
	}
	if name != "" {
		return fmt.Errorf("train.Lab.Eval: the student's held-out loss is %v: its trained vector %s holds %v at index %d, the first non-finite parameter", loss, name, v, i)
	}
	nf, err := nvgkit.FirstNonFinite(s.sNet, s.tr.sWork, ws)
	switch {
	case err != nil:
		return fmt.Errorf("train.Lab.Eval: the student's held-out loss is %v; looking for its first non-finite hidden state: %w", loss, err)
	case nf != nil:
		return fmt.Errorf("train.Lab.Eval: the student's held-out loss is %v with every trained value finite: the first non-finite hidden state is the output of %v (a value too large for the layers' f32 arithmetic, such as a huge norm gain)", loss, nf)
	}
	return fmt.Errorf("train.Lab.Eval: the student's held-out loss is %v with every trained value and hidden state finite: the head's logits or the loss overflowed", loss)
}

// window resolves w: the input ids and, for a drawn window, the whole window (inputs and
// the last target) or, for given tokens, those tokens.
func (s *labState) window(op string, w session.Window) (ids, all []int, err error) {
	T := s.tr.Config.T
	V := s.sNet.Config.VocabSize
	if w.Tokens != nil {
		if len(w.Tokens) < 1 || len(w.Tokens) > T {
			return nil, nil, fmt.Errorf("train.Lab.%s: Window.Tokens has %d ids, want 1 … T = %d", op, len(w.Tokens), T)
		}
		for i, id := range w.Tokens {
			if id < 0 || id >= V {
				return nil, nil, fmt.Errorf("train.Lab.%s: Window.Tokens[%d] = %d is outside the vocabulary [0, %d)", op, i, id, V)
			}
		}
		return append([]int(nil), w.Tokens...), append([]int(nil), w.Tokens...), nil
	}
	list, what := s.tr.eval, "held-out"
	if w.Train {
		list, what = s.tr.windows, "training"
	}
	if w.Index < 0 || w.Index >= len(list) {
		return nil, nil, fmt.Errorf("train.Lab.%s: Window.Index = %d, want 0 … %d (%d %s windows)", op, w.Index, len(list)-1, len(list), what)
	}
	win := list[w.Index]
	return append([]int(nil), win[:T]...), append([]int(nil), win...), nil
}

// hidden returns every hidden state of ids in one net (layer 0 the embedding, …, L after
// the final norm; each [len(ids)·H]), with the Lab's work when the length is T and a work of
// one window of len(ids) tokens otherwise.
func (s *labState) hidden(op string, kind session.NetKind, ids []int) ([][]float32, error) {
	net, work := s.tNet, s.tr.tWork
	if kind == session.Student {
		net, work = s.sNet, s.tr.sWork
	}
	if len(ids) != work.T {
		w, err := nvgkit.NewWork(net.Device(), net, 1, len(ids))
		if err != nil {
			return nil, fmt.Errorf("train.Lab.%s: %w", op, err)
		}
		defer w.Release()
		work = w
	}
	if kind == session.Teacher {
		tr, err := nvgkit.Forward(net, work, [][]int{ids}, nvgkit.ForwardOptions{})
		if err != nil {
			return nil, fmt.Errorf("train.Lab.%s: %w", op, err)
		}
		return tr.Hidden, nil
	}
	h, err := nvgkit.StudentHidden(net, work, ids)
	if err != nil {
		return nil, fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return h, nil
}

func checkKind(op string, k session.NetKind) error {
	if !k.Valid() {
		return fmt.Errorf("train.Lab.%s: net = %v, want session.Teacher or session.Student", op, k)
	}
	return nil
}

// HiddenStates returns the hidden states of one window (see session.Lab.HiddenStates).
func (l *Lab) HiddenStates(kind session.NetKind, w session.Window, layers []int) (session.HiddenStates, error) {
	const op = "HiddenStates"
	s, err := l.ready(op)
	if err != nil {
		return session.HiddenStates{}, err
	}
	if err := checkKind(op, kind); err != nil {
		return session.HiddenStates{}, err
	}
	ids, _, err := s.window(op, w)
	if err != nil {
		return session.HiddenStates{}, err
	}
	L := s.sNet.Config.NumHiddenLayers
	if layers == nil {
		for i := 0; i <= L; i++ {
			layers = append(layers, i)
		}
	}
	for _, li := range layers {
		if li < 0 || li > L {
			return session.HiddenStates{}, fmt.Errorf("train.Lab.%s: layer %d, want 0 (the embedding) … %d (after the final norm)", op, li, L)
		}
	}
	h, err := s.hidden(op, kind, ids)
	if err != nil {
		return session.HiddenStates{}, err
	}
	out := session.HiddenStates{Net: kind, T: len(ids), H: s.sNet.Config.HiddenSize, Tokens: ids, Layers: append([]int(nil), layers...)}
	for _, li := range layers {
		out.States = append(out.States, append([]float32(nil), h[li]...))
	}
	return out, nil
}

// logitsAt returns the logits [vocab] of one net at position pos of window w, and the
// window's resolved tokens.
func (s *labState) logitsAt(op string, kind session.NetKind, w session.Window, pos int) (logits []float32, ids, all []int, err error) {
	if err := checkKind(op, kind); err != nil {
		return nil, nil, nil, err
	}
	if ids, all, err = s.window(op, w); err != nil {
		return nil, nil, nil, err
	}
	if pos < 0 || pos >= len(ids) {
		return nil, nil, nil, fmt.Errorf("train.Lab.%s: pos = %d, want 0 … %d (the window's %d tokens)", op, pos, len(ids)-1, len(ids))
	}
	h, err := s.hidden(op, kind, ids)
	if err != nil {
		return nil, nil, nil, err
	}
	net := s.tNet
	if kind == session.Student {
		net = s.sNet
	}
	H := net.Config.HiddenSize
	last := h[len(h)-1]
	if logits, err = net.Logits(last[pos*H:(pos+1)*H], 1); err != nil {
		return nil, nil, nil, fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return logits, ids, all, nil
}

// Logits returns one position's logits (see session.Lab.Logits).
func (l *Lab) Logits(kind session.NetKind, w session.Window, pos int) ([]float32, error) {
	s, err := l.ready("Logits")
	if err != nil {
		return nil, err
	}
	lg, _, _, err := s.logitsAt("Logits", kind, w, pos)
	return lg, err
}

// TopK returns one position's k most probable next tokens (see session.Lab.TopK).
func (l *Lab) TopK(kind session.NetKind, w session.Window, pos, k int) (session.TopKResult, error) {
	const op = "TopK"
	s, err := l.ready(op)
	if err != nil {
		return session.TopKResult{}, err
	}
	if err := nvgkit.CheckK("Lab.TopK", k, s.sNet.Config.VocabSize); err != nil {
		return session.TopKResult{}, err
	}
	lg, ids, all, err := s.logitsAt(op, kind, w, pos)
	if err != nil {
		return session.TopKResult{}, err
	}
	probs := softmax64(lg)
	order := make([]int, len(probs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	r := session.TopKResult{Net: kind, Pos: pos, Token: ids[pos], Next: -1, NextRank: -1}
	for _, id := range order[:k] {
		piece, _ := s.tok.Decode([]int{id})
		r.IDs, r.Probs, r.Pieces = append(r.IDs, id), append(r.Probs, probs[id]), append(r.Pieces, piece)
	}
	if pos+1 < len(all) {
		r.Next = all[pos+1]
		r.NextProb = probs[r.Next]
		for rank, id := range order {
			if id == r.Next {
				r.NextRank = rank
				break
			}
		}
	}
	return r, nil
}

// softmax64 is the softmax of f32 logits in float64 (max subtracted).
func softmax64(lg []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range lg {
		m = math.Max(m, float64(x))
	}
	p := make([]float64, len(lg))
	var sum float64
	for i, x := range lg {
		p[i] = math.Exp(float64(x) - m)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// Tokenize returns the ids of text.
func (l *Lab) Tokenize(text string) ([]int, error) {
	s, err := l.ready("Tokenize")
	if err != nil {
		return nil, err
	}
	return s.tok.Encode(text), nil
}

// Detokenize returns the text of ids.
func (l *Lab) Detokenize(ids []int) (string, error) {
	s, err := l.ready("Detokenize")
	if err != nil {
		return "", err
	}
	return s.tok.Decode(ids)
}

// GradCheckInput is what a GradChecker checks: a Student net holding the live values, the
// model it was loaded from (the host reference loads it and takes the live values from the
// net), one batch (IDs: Windows windows of T tokens) with its teacher top-k, and the resolved
// spec with its names. The checker may change the net's values and gradients freely: the Lab
// restores them after it.
type GradCheckInput struct {
	Student *nvgkit.Net
	Model   *cmf.Model
	IDs     [][]int
	Top     *nvgkit.TopK
	Spec    session.GradCheckSpec
	// Step is the Lab's step counter (GradCheckResult.Step).
	Step int
	// Context is cancelled by Interrupt; Progress, when not nil, is called with done of
	// total units: 0 at the start, then after the GPU gradient, each GPU finite difference,
	// the host gradient and each host finite difference.
	Context  context.Context
	Progress func(done, total int)
}

// GradChecker computes GradCheck's table. Package nvgkit/gradcheck registers the one that
// compares with the float64 host reference (package host, which production nvgkit does not
// import).
type GradChecker func(in GradCheckInput) (session.GradCheckResult, error)

var gradChecker struct {
	sync.Mutex
	f GradChecker
}

// RegisterGradChecker makes f the checker of Lab.GradCheck (nvgkit/gradcheck calls it from
// its init; import it, blank or not, to use GradCheck in-process).
func RegisterGradChecker(f GradChecker) {
	gradChecker.Lock()
	gradChecker.f = f
	gradChecker.Unlock()
}

// DefaultGradCheckNames returns notebook 02's coordinates for the architecture c, those of
// them in names: the h of in_proj_qkv p0, the ℓ of out_proj p0, the g of in_proj_z p1, the
// gated norm and the input norm of the first GatedDeltaNet layer; the h of q_proj p0, the ℓ
// of k_proj p1, the g of o_proj p0, q_norm and the post-attention norm of the first
// attention layer.
func DefaultGradCheckNames(c arch.Config, names []string) []string {
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	var out []string
	add := func(n string) {
		if have[n] {
			out = append(out, n)
		}
	}
	delta, attn := -1, -1
	for i, t := range c.LayerTypes {
		if t == arch.LinearAttention && delta < 0 {
			delta = i
		}
		if t == arch.FullAttention && attn < 0 {
			attn = i
		}
	}
	if delta >= 0 {
		p := arch.LayerPrefix(delta)
		add(arch.MetricName(p+"linear_attn.in_proj_qkv.weight", 0, "h"))
		add(arch.MetricName(p+"linear_attn.out_proj.weight", 0, "l"))
		add(arch.MetricName(p+"linear_attn.in_proj_z.weight", 1, "g"))
		add(p + "linear_attn.norm.weight")
		add(p + "input_layernorm.weight")
	}
	if attn >= 0 {
		p := arch.LayerPrefix(attn)
		add(arch.MetricName(p+"self_attn.q_proj.weight", 0, "h"))
		add(arch.MetricName(p+"self_attn.k_proj.weight", 1, "l"))
		add(arch.MetricName(p+"self_attn.o_proj.weight", 0, "g"))
		add(p + "self_attn.q_norm.weight")
		add(p + "post_attention_layernorm.weight")
	}
	return out
}

// CoopmatGradTol is GradCheck's default tolerance of one coordinate's GPU gradient against the
// host's on tensor cores (session.GradCheckSpec.TolGPUHostCoopmat) for a student of layers
// decoder layers: tolF32 (the f32 path's) + 2·√(2·(8·layers+1))·2⁻¹¹. f16 rounds each
// cooperative-matrix GEMM's activations with at most 2⁻¹¹ relative error; a BLR layer's
// forward has 8 such GEMMs in series (two per projection, two projections per sub-layer),
// the head 1, the backward as many again; independent roundings add in quadrature; a single
// coordinate, unlike a vector's relative L2, is doubled (DESIGN.md §8).
func CoopmatGradTol(tolF32 float64, layers int) float64 {
	return tolF32 + 2*math.Sqrt(float64(2*(8*layers+1)))*0x1p-11
}

// GradCheck checks the GPU gradient on the live state (see session.Lab.GradCheck); the
// state is restored after the check, whatever its outcome.
func (l *Lab) GradCheck(spec session.GradCheckSpec, opts ...session.Option) (_ session.GradCheckResult, err error) {
	const op = "GradCheck"
	s, err := l.ready(op)
	if err != nil {
		return session.GradCheckResult{}, err
	}
	if err := spec.Validate(); err != nil {
		return session.GradCheckResult{}, err
	}
	r := spec.Resolved()
	c := s.tr.Config
	if spec.Windows == 0 { // the default, within the Setup's batch
		r.Windows = min(r.Windows, c.NB)
	}
	if spec.T == 0 {
		r.T = min(r.T, c.T)
	}
	if r.Windows > c.NB || r.T > c.T {
		return session.GradCheckResult{}, fmt.Errorf("train.Lab.GradCheck: Windows = %d, T = %d; the batch has NB = %d windows of T = %d tokens", r.Windows, r.T, c.NB, c.T)
	}
	if r.Names == nil {
		r.Names = DefaultGradCheckNames(s.sNet.Config, s.names)
	}
	if r.TolGPUHostCoopmat == 0 {
		r.TolGPUHostCoopmat = CoopmatGradTol(r.TolGPUHost, s.sNet.Config.NumHiddenLayers)
	}
	if len(r.Names) == 0 {
		return session.GradCheckResult{}, errors.New("train.Lab.GradCheck: no names to check")
	}
	r.Names = append([]string(nil), r.Names...)
	for _, n := range r.Names {
		if err := s.trainable(op, n); err != nil {
			return session.GradCheckResult{}, err
		}
		size, err := s.sNet.TrainableLen(n)
		if err != nil {
			return session.GradCheckResult{}, fmt.Errorf("train.Lab.GradCheck: %w", err)
		}
		if r.Coords > size {
			return session.GradCheckResult{}, fmt.Errorf("train.Lab.GradCheck: Coords = %d but %s has %d values", r.Coords, n, size)
		}
	}
	gradChecker.Lock()
	check := gradChecker.f
	gradChecker.Unlock()
	if check == nil {
		return session.GradCheckResult{}, errors.New("train.Lab.GradCheck: no host reference linked in: import _ \"github.com/nvg-project/nvg/nvgkit/gradcheck\" (the session server does)")
	}
	ids, full, err := s.batch(s.tr.st.Step + 1)
	if err != nil {
		return session.GradCheckResult{}, err
	}
	ids, top := truncateBatch(ids, full, r.Windows, r.T)

	// The live state, put back after the check.
	saved, err := nvgkit.Snapshot(s.sNet)
	if err != nil {
		return session.GradCheckResult{}, err
	}
	grads, err := nvgkit.Grads(s.sNet)
	if err != nil {
		return session.GradCheckResult{}, err
	}
	resume, err := s.pauseSigns() // the check's backwards leave the sign scores and captures alone
	if err != nil {
		return session.GradCheckResult{}, err
	}
	defer func() {
		rerr := nvgkit.Restore(s.sNet, saved)
		if rerr == nil {
			rerr = nvgkit.SetGrads(s.sNet, grads)
		}
		rerr = errors.Join(rerr, resume())
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("train.Lab.GradCheck: restoring the state: %w", rerr))
		}
	}()
	o := session.Apply(opts...)
	ctx, end := l.begin(o)
	defer end()
	start := time.Now()
	progress := s.phaseProgress(o.OnProgress, "gradcheck", start)
	res, err := check(GradCheckInput{Student: s.sNet, Model: s.student, IDs: ids, Top: top, Spec: r, Step: s.tr.st.Step, Context: ctx, Progress: progress})
	if err != nil {
		if ctx.Err() != nil {
			return session.GradCheckResult{}, interrupted(ctx, "during GradCheck")
		}
		return session.GradCheckResult{}, err
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// truncateBatch keeps the first w windows of ids and their first t tokens, with the rows of
// top for those positions (the teacher is causal: its top-k at a position depends only on
// the tokens up to it).
func truncateBatch(ids [][]int, top *nvgkit.TopK, w, t int) ([][]int, *nvgkit.TopK) {
	out := make([][]int, w)
	K := top.K
	tt := &nvgkit.TopK{NB: w, T: t, K: K}
	for b := range w {
		out[b] = append([]int(nil), ids[b][:t]...)
		for tau := range t {
			r := b*top.T + tau
			tt.IDs = append(tt.IDs, top.IDs[r*K:(r+1)*K]...)
			tt.Probs = append(tt.Probs, top.Probs[r*K:(r+1)*K]...)
			if top.LogProbs != nil {
				tt.LogProbs = append(tt.LogProbs, top.LogProbs[r*K:(r+1)*K]...)
			}
			if top.LSE != nil {
				tt.LSE = append(tt.LSE, top.LSE[r])
			}
		}
	}
	return out, tt
}

// phaseProgress reports a call's progress, done of total units of phase since start, to
// report (nil: none, and phaseProgress returns nil).
func (s *labState) phaseProgress(report func(session.Progress), phase string, start time.Time) func(done, total int) {
	if report == nil {
		return nil
	}
	return func(done, total int) {
		report(session.Progress{Phase: phase, Done: done, Total: total, Step: s.tr.st.Step, Loss: math.NaN(), Elapsed: time.Since(start)})
	}
}
