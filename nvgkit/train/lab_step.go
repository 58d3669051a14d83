package train

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/nvgkit"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/internal/nearest"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// batch returns the inputs and the cached teacher top-k of step s's windows (as
// Trainer.step).
func (s *labState) batch(step int) ([][]int, *nvgkit.TopK, error) {
	c := s.tr.Config
	i0 := (step - 1) * c.NB % c.Windows
	top, err := s.tr.cache.Get(i0, c.NB)
	if err != nil {
		return nil, nil, err
	}
	return s.tr.inputs(s.tr.windows[i0 : i0+c.NB]), top, nil
}

// ForwardBackward accumulates the gradients of the next step's batch (see
// session.Lab.ForwardBackward).
func (l *Lab) ForwardBackward() (session.StepStats, error) {
	s, err := l.ready("ForwardBackward")
	if err != nil {
		return session.StepStats{}, err
	}
	return s.forwardBackward()
}

func (s *labState) forwardBackward() (session.StepStats, error) {
	step := s.tr.st.Step + 1
	c := s.tr.Config
	ph := c.PhaseAt(step)
	out := session.StepStats{Step: step, Loss: math.NaN(), GradNorm: math.NaN(), Tokens: c.PhaseTokens(ph), Phase: ph.Kind, Layer: ph.Layer}
	if err := s.tr.enterPhase(ph); err != nil { // as Trainer.step: signs frozen in the finish
		return out, fmt.Errorf("train.Lab.ForwardBackward: step %d: %w", step, err)
	}
	p := &s.pending
	if !p.fb {
		p.t0 = time.Now()
	}
	stats, err := s.tr.stepBatch(step, (step-1)*c.NB%c.Windows, c.NB)
	if err != nil {
		// The gradients may hold part of the pass: the step cannot be ended with them.
		p.fb, p.finite, p.loss, p.haveNorm, p.kl, p.hidden = true, false, math.NaN(), false, 0, 0
		return out, fmt.Errorf("train.Lab.ForwardBackward: step %d: %w", step, err)
	}
	p.fb, p.finite, p.loss, p.haveNorm = true, stats.Finite && finite(stats.Loss), stats.Loss, false
	p.kl, p.hidden = 0, 0
	if s.tr.hidden.On() && ph.Kind != PhaseBlock {
		p.kl, p.hidden = stats.KL, stats.Hidden
	}
	out.Loss, out.Finite, out.KL, out.Hidden = stats.Loss, p.finite, p.kl, p.hidden
	return out, nil
}

// ClipGrads clips the gradients to the global norm maxNorm (see session.Lab.ClipGrads).
func (l *Lab) ClipGrads(maxNorm float64) (float64, error) {
	if !(maxNorm > 0) || math.IsInf(maxNorm, 0) {
		return 0, fmt.Errorf("train.Lab.ClipGrads: maxNorm = %g must be finite and > 0", maxNorm)
	}
	s, err := l.ready("ClipGrads")
	if err != nil {
		return 0, err
	}
	return s.clip(maxNorm)
}

// clip clips to maxNorm (> 0) or, with maxNorm 0, only computes the norm (Trainer.step).
func (s *labState) clip(maxNorm float64) (float64, error) {
	var gn float64
	var err error
	if maxNorm > 0 {
		gn, err = nvgkit.ClipGrads(s.sNet, maxNorm)
	} else {
		gn, err = nvgkit.GradNorm(s.sNet)
	}
	if err != nil {
		return gn, err
	}
	s.pending.norm, s.pending.haveNorm = gn, true
	return gn, nil
}

// AdamStep ends the step: Adam at the schedule's learning rate, or a skip (see
// session.Lab.AdamStep).
func (l *Lab) AdamStep() (session.StepStats, error) {
	s, err := l.ready("AdamStep")
	if err != nil {
		return session.StepStats{}, err
	}
	return s.adamStep()
}

// adamStep is Trainer.step's second half: the same tests, the same Adam configuration.
func (s *labState) adamStep() (session.StepStats, error) {
	tr, c, p := s.tr, s.tr.Config, &s.pending
	step := tr.st.Step + 1
	lr := c.LRAt(step)
	ph := c.PhaseAt(step)
	out := session.StepStats{Step: step, Loss: math.NaN(), GradNorm: math.NaN(), LR: lr, Tokens: c.PhaseTokens(ph), Phase: ph.Kind, Layer: ph.Layer}
	if !p.fb {
		p.t0, p.finite = time.Now(), true
	} else {
		out.Loss, out.KL, out.Hidden = p.loss, p.kl, p.hidden
	}
	ok := p.finite
	if ok {
		gn := p.norm
		if !p.haveNorm {
			var err error
			if gn, err = nvgkit.GradNorm(s.sNet); err != nil {
				return out, fmt.Errorf("train.Lab.AdamStep: step %d: %w", step, err)
			}
		}
		out.GradNorm = gn
		ok = finite(gn)
	}
	out.Finite = ok
	skipped, err := tr.finishStep(step, lr, out.Loss, out.GradNorm, ok)
	if err != nil {
		return out, fmt.Errorf("train.Lab.AdamStep: step %d: %w", step, err)
	}
	flips, err := tr.signStep(step, ok) // a TrainSigns setup flips as Trainer.step does
	if err != nil {
		return out, fmt.Errorf("train.Lab.AdamStep: step %d: %w", step, err)
	}
	if err := tr.endPhase(step); err != nil { // the next phase's fresh optimizer, as Trainer.step
		return out, fmt.Errorf("train.Lab.AdamStep: %w", err)
	}
	if tr.trainsSigns(ph) && flips == nil { // a skipped step flips nothing
		flips = make([]int, s.sNet.Config.NumHiddenLayers)
	}
	out.SignFlips = flips
	out.Skipped = skipped
	if span := c.ScheduleSteps; step == span+1 { // c is resolved: ScheduleSteps ≥ 1
		out.Note = fmt.Sprintf("step %d is past the %d steps the learning-rate schedule was planned for (Setup.Train.Steps): the cosine decay has ended and the learning rate stays at its floor, %.3g (MinLRFrac·LR), from here on",
			step, span, lr)
		tr.logf("%s", out.Note)
	}
	out.Seconds = time.Since(p.t0).Seconds()
	rec := out
	rec.SignFlips = slices.Clone(flips) // the history's own: the caller may change out's
	s.hist = append(s.hist, rec)
	s.pending.fb, s.pending.haveNorm = false, false
	return out, nil
}

// ZeroGrads clears every gradient, the captured sign gradients included.
func (l *Lab) ZeroGrads() error {
	s, err := l.ready("ZeroGrads")
	if err != nil {
		return err
	}
	return s.zeroGrads()
}

// zeroGrads clears the gradients and the captured sign gradients (CaptureSignGrad).
func (s *labState) zeroGrads() error {
	s.pending.haveNorm = false
	if err := nvgkit.ZeroGrads(s.sNet); err != nil {
		return err
	}
	if len(s.captured) > 0 {
		return nvgkit.ZeroSignGrads(s.sNet)
	}
	return nil
}

// Step runs n full steps as Trainer does (see session.Lab.Step).
func (l *Lab) Step(n int, opts ...session.Option) ([]session.StepStats, error) {
	s, err := l.ready("Step")
	if err != nil {
		return nil, err
	}
	if err := l.notInHook("Step"); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("train.Lab.Step: n = %d, want ≥ 1", n)
	}
	o := session.Apply(opts...)
	if o.EvalEvery < 0 {
		return nil, fmt.Errorf("train.Lab.Step: EvalEvery = %d, want ≥ 0", o.EvalEvery)
	}
	ctx, end := l.begin(o)
	defer end()
	c := s.tr.Config
	start := time.Now()
	var done []session.StepStats
	for i := range n {
		if ctx.Err() != nil {
			return done, interrupted(ctx, fmt.Sprintf("after step %d (%d of %d done)", s.tr.st.Step, i, n))
		}
		if err := s.zeroGrads(); err != nil {
			return done, err
		}
		fb, err := s.forwardBackward()
		if err != nil {
			return done, err
		}
		if o.PreOptimizer != nil && s.pending.finite {
			l.inHook.Store(true)
			err := o.PreOptimizer(l, fb)
			l.inHook.Store(false)
			if err != nil {
				return done, fmt.Errorf("train.Lab.Step: step %d: pre-optimizer hook: %w", fb.Step, err)
			}
		}
		if s.pending.finite {
			if _, err := s.clip(max(c.ClipNorm, 0)); err != nil {
				return done, fmt.Errorf("train.Lab.Step: step %d: %w", fb.Step, err)
			}
		}
		st, err := s.adamStep()
		if err != nil {
			return done, err
		}
		if o.EvalEvery > 0 && (i+1)%o.EvalEvery == 0 {
			ev, err := s.eval(ctx, len(s.tr.eval), nil)
			if err != nil && ctx.Err() != nil { // the step is done; its evaluation stopped
				return append(done, st), interrupted(ctx, fmt.Sprintf("during the evaluation after step %d", st.Step))
			}
			if err != nil {
				return done, fmt.Errorf("train.Lab.Step: evaluation after step %d: %w", st.Step, err)
			}
			st.EvalPPL = ev.StudentPPL
			s.noteStepEval(ev)
		}
		done = append(done, st)
		if o.OnProgress != nil {
			o.OnProgress(session.Progress{Phase: "step", Done: i + 1, Total: n, Step: st.Step, Loss: st.Loss, EvalPPL: st.EvalPPL, Note: st.Note, Elapsed: time.Since(start)})
		}
	}
	return done, nil
}

// History returns the steps and evaluations so far.
func (l *Lab) History() (session.History, error) {
	s, err := l.ready("History")
	if err != nil {
		return session.History{}, err
	}
	steps := append([]session.StepStats(nil), s.hist...)
	for i := range steps {
		steps[i].SignFlips = append([]int(nil), steps[i].SignFlips...)
	}
	return session.History{Steps: steps, Evals: append([]session.EvalResult(nil), s.evals...), TeacherPPL: s.tr.st.TeacherPPL}, nil
}

// Names returns the trained vectors' names in load order.
func (l *Lab) Names() ([]string, error) {
	s, err := l.ready("Names")
	if err != nil {
		return nil, err
	}
	return append([]string(nil), s.names...), nil
}

// trainable checks that the named trained vector exists, or returns an error listing the
// nearest names.
func (s *labState) trainable(op, name string) error {
	if s.sNet.HasTrainable(name) {
		return nil
	}
	return fmt.Errorf("train.Lab.%s: no trained vector %q (nearest: %s; Names lists all %d)", op, name, strings.Join(nearest.Names(name, s.names, 4), ", "), len(s.names))
}

// Param returns a copy of the named trained vector.
func (l *Lab) Param(name string) ([]float32, error) {
	return l.readVec("Param", name, false)
}

// Grad returns a copy of the named vector's gradient.
func (l *Lab) Grad(name string) ([]float32, error) {
	return l.readVec("Grad", name, true)
}

// readVec reads the named vector's values, or its gradient when grad.
func (l *Lab) readVec(op, name string, grad bool) ([]float32, error) {
	s, err := l.ready(op)
	if err != nil {
		return nil, err
	}
	if err := s.trainable(op, name); err != nil {
		return nil, err
	}
	v, err := s.sNet.ReadTrainable(name, grad)
	if err != nil {
		return nil, fmt.Errorf("train.Lab.%s %s: %w", op, name, err)
	}
	return v, nil
}

// SetParam writes the named trained vector.
func (l *Lab) SetParam(name string, v []float32) error { return l.writeVec("SetParam", name, v, false) }

// SetGrad writes the named vector's gradient.
func (l *Lab) SetGrad(name string, v []float32) error { return l.writeVec("SetGrad", name, v, true) }

// writeVec checks v (length, finite values, zeros in masked rank padding) before it writes.
func (l *Lab) writeVec(op, name string, v []float32, grad bool) error {
	s, err := l.ready(op)
	if err != nil {
		return err
	}
	if err := s.trainable(op, name); err != nil {
		return err
	}
	n, err := s.sNet.TrainableLen(name)
	if err != nil {
		return fmt.Errorf("train.Lab.%s %s: %w", op, name, err)
	}
	if len(v) != n {
		return fmt.Errorf("train.Lab.%s %s: %d values, want %d", op, name, len(v), n)
	}
	for i, x := range v {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("train.Lab.%s %s: value %d is %v (want finite values)", op, name, i, x)
		}
	}
	if !grad { // a value its storage cannot hold (a metric scale beyond f16) poisons every later step
		limit, err := s.sNet.TrainableLimit(name)
		if err != nil {
			return fmt.Errorf("train.Lab.%s %s: %w", op, name, err)
		}
		for i, x := range v {
			if math.Abs(float64(x)) > limit {
				return fmt.Errorf("train.Lab.%s %s: value %d is %g, beyond %g: a BLR metric scale must be finite in f16 (the student's .cmf stores it as f16, and the tensor-core GEMMs round their operands to f16), or the next step's loss is NaN",
					op, name, i, x, limit)
			}
		}
	}
	mask, err := s.sNet.TrainableMask(name) // nil: no masked rank padding
	if err != nil {
		return fmt.Errorf("train.Lab.%s %s: %w", op, name, err)
	}
	for i, m := range mask {
		if m == 0 && v[i] != 0 {
			return fmt.Errorf("train.Lab.%s %s: value %d is %v but rank %d is masked padding (it must stay 0)", op, name, i, v[i], i)
		}
	}
	if grad {
		s.pending.haveNorm = false // WriteTrainable drops the net's cached Σ g²
	}
	if err := s.sNet.WriteTrainable(name, v, grad); err != nil {
		return fmt.Errorf("train.Lab.%s %s: %w", op, name, err)
	}
	return nil
}

// GradNorms returns the per-layer gradient norms of the gradient buffers now.
func (l *Lab) GradNorms() (session.GradNorms, error) {
	s, err := l.ready("GradNorms")
	if err != nil {
		return session.GradNorms{}, err
	}
	g, err := nvgkit.Grads(s.sNet)
	if err != nil {
		return session.GradNorms{}, err
	}
	layers, kinds, norms, err := nvgkit.LayerNorms(g, s.sNet.Config.NumHiddenLayers)
	if err != nil {
		return session.GradNorms{}, err
	}
	var ss float64
	for _, name := range s.names {
		for _, x := range g[name] {
			ss += float64(x) * float64(x)
		}
	}
	return session.GradNorms{Step: s.tr.st.Step, Layers: layers, Kinds: kinds, Norms: norms, Total: math.Sqrt(ss)}, nil
}

// copyMeta is a deep copy of the slices of m that steps append to.
func copyMeta(m CheckpointMeta) CheckpointMeta {
	m.Loss = append([]float64(nil), m.Loss...)
	m.GradNorm = append([]float64(nil), m.GradNorm...)
	m.Evals = append([]EvalPoint(nil), m.Evals...)
	return m
}

// Snapshot stores the state under tag.
func (l *Lab) Snapshot(tag string) error {
	s, err := l.ready("Snapshot")
	if err != nil {
		return err
	}
	if tag == "" {
		return errors.New("train.Lab.Snapshot: empty tag")
	}
	snap, err := nvgkit.Snapshot(s.sNet)
	if err != nil {
		return err
	}
	signs, err := s.readSignState()
	if err != nil {
		return fmt.Errorf("train.Lab.Snapshot: %w", err)
	}
	s.snaps[tag] = &labSnapshot{snap: snap, signs: signs, meta: copyMeta(s.tr.st), hist: append([]session.StepStats(nil), s.hist...),
		evals: append([]session.EvalResult(nil), s.evals...)}
	return nil
}

// Restore returns to the state of Snapshot(tag).
func (l *Lab) Restore(tag string) error {
	s, err := l.ready("Restore")
	if err != nil {
		return err
	}
	if err := l.notInHook("Restore"); err != nil {
		return err
	}
	sn := s.snaps[tag]
	if sn == nil {
		return fmt.Errorf("train.Lab.Restore: no snapshot %q (there are: %s)", tag, strings.Join(quoted(s.snapTags()), ", "))
	}
	if err := nvgkit.Restore(s.sNet, sn.snap); err != nil {
		return err
	}
	if err := s.writeSignState(sn.signs, sn.meta.Step); err != nil {
		return fmt.Errorf("train.Lab.Restore: %w", err)
	}
	s.tr.st = copyMeta(sn.meta)
	s.hist = append([]session.StepStats(nil), sn.hist...)
	s.evals = append([]session.EvalResult(nil), sn.evals...)
	s.pending.fb, s.pending.haveNorm = false, false
	return nil
}

func quoted(v []string) []string {
	if len(v) == 0 {
		return []string{"none"}
	}
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// Snapshots returns the snapshot tags, sorted.
func (l *Lab) Snapshots() ([]string, error) {
	s, err := l.ready("Snapshots")
	if err != nil {
		return nil, err
	}
	return s.snapTags(), nil
}

// Checkpoint writes the state to dir/CheckpointName(step) and returns the path.
func (l *Lab) Checkpoint(dir string) (string, error) {
	s, err := l.ready("Checkpoint")
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", errors.New("train.Lab.Checkpoint: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("train.Lab.Checkpoint: %w", err)
	}
	path := filepath.Join(dir, CheckpointName(s.tr.st.Step))
	if err := s.tr.Checkpoint(path); err != nil {
		return "", err
	}
	return path, nil
}

// Export writes the student as it is now to path (.cmf, metric scales rounded to f16).
func (l *Lab) Export(path string) error {
	s, err := l.ready("Export")
	if err != nil {
		return err
	}
	if path == "" {
		return errors.New("train.Lab.Export: empty path")
	}
	m, err := nvgkit.Export(s.sNet, s.student)
	if err != nil {
		return err
	}
	return cmf.WriteCMF(path, m)
}
