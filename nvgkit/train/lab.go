package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

// Lab is the in-process implementation of session.Lab (see there for every method's
// contract): one teacher–student pair on one GPU device, stepped a primitive at a time with
// the same arithmetic as Trainer (the same windows, teacher top-k, schedule, clipping and
// Adam; Lab.Step(k) gives Trainer's first k losses bit for bit). Its state is a Trainer
// (windows, works, the teacher's top-k cache, the checkpoint metadata) that the Lab drives
// step by step instead of Trainer.Run.
//
// A Lab is driven by one goroutine at a time, like a Net (the session server runs every
// request on one worker goroutine); only Interrupt may be called from another goroutine
// while a call runs.
type Lab struct {
	dev    *gpu.Device
	ownDev bool // opened by Setup, closed by Close
	log    func(format string, a ...any)
	cache  string // the token cache directory ("": no cache)
	closed bool

	st *labState // nil before Setup

	// The call in progress: its cancel func (Interrupt calls it) and whether a PreOptimizer
	// hook is running (the calls a hook may not make check it).
	cancelMu sync.Mutex
	cancel   context.CancelFunc
	inHook   atomic.Bool
}

// labState is what Setup builds: the assembled run (Assemble) and the Lab's own records.
type labState struct {
	setup      session.Setup
	info       session.Info
	run        *Run
	student    *cmf.Model  // run.StudentModel
	tNet, sNet *nvgkit.Net // run.Teacher, run.Student
	tok        *tokenizer.Tokenizer
	tr         *Trainer // run.Trainer
	names      []string
	hist       []session.StepStats
	evals      []session.EvalResult
	teacherNLL map[int]float64 // the teacher's summed NLL on the first n eval windows
	snaps      map[string]*labSnapshot
	// The sign matrices (lab_signs.go): names in load order, shapes, and the captured ones.
	signNames []string
	signs     map[string]labSign
	captured  map[string]bool
	// pending is the step being assembled by the primitives since the last AdamStep.
	pending struct {
		fb, finite bool    // a ForwardBackward ran; its loss and Step's Finite were finite
		loss       float64 // its loss
		kl, hidden float64 // its loss's parts (with a hidden-state loss)
		haveNorm   bool    // norm is the gradients' norm before clipping (ClipGrads since fb)
		norm       float64
		t0         time.Time
	}
}

// labSnapshot is Lab.Snapshot's state.
type labSnapshot struct {
	snap  *nvgkit.TrainableSnapshot
	signs *signState // the sign bits and scores (TrainSigns), else nil
	meta  CheckpointMeta
	hist  []session.StepStats
	evals []session.EvalResult
}

var _ session.Lab = (*Lab)(nil)

// LabOption configures NewLab.
type LabOption func(*Lab)

// LabDevice makes the Lab use dev (Setup opens the default device otherwise); Close leaves a
// device given here open.
func LabDevice(dev *gpu.Device) LabOption { return func(l *Lab) { l.dev = dev } }

// LabLog sends one line per phase (as Trainer.Log) to logf.
func LabLog(logf func(format string, a ...any)) LabOption { return func(l *Lab) { l.log = logf } }

// LabTokenCache sets the directory of the corpus token cache (data.Corpus.Tokens); "" turns
// the cache off. The default is nvg's: $NVG_CACHE/tokens, else the user cache directory's
// nvg/tokens.
func LabTokenCache(dir string) LabOption { return func(l *Lab) { l.cache = dir } }

// TokenCacheDir is the token cache directory nvg's commands use: $NVG_CACHE/tokens when
// NVG_CACHE is set, else nvg/tokens in the user cache directory ("" when there is none).
func TokenCacheDir() string {
	if d := os.Getenv("NVG_CACHE"); d != "" {
		return filepath.Join(d, "tokens")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "nvg", "tokens")
	}
	return ""
}

// NewLab returns a Lab that is not set up yet (Setup loads everything). It opens nothing: the
// device is opened by the first Setup unless LabDevice gives one.
func NewLab(opts ...LabOption) (*Lab, error) {
	l := &Lab{cache: TokenCacheDir()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("train.NewLab: nil option")
		}
		o(l)
	}
	return l, nil
}

func (l *Lab) logf(format string, a ...any) {
	if l.log != nil {
		l.log(format, a...)
	}
}

// begin starts a long call: it returns the call's context (cancelled by Interrupt or by
// the Context option) and the function that ends the call.
func (l *Lab) begin(o session.Options) (context.Context, func()) {
	parent := o.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	l.cancelMu.Lock()
	l.cancel = cancel
	l.cancelMu.Unlock()
	return ctx, func() {
		l.cancelMu.Lock()
		l.cancel = nil
		l.cancelMu.Unlock()
		cancel()
	}
}

// interrupted returns the error of a call stopped by ctx, wrapping session.ErrInterrupted and
// ErrInterrupted.
func interrupted(ctx context.Context, where string) error {
	return fmt.Errorf("%w %s (%w: %w)", session.ErrInterrupted, where, ErrInterrupted, context.Cause(ctx))
}

// Interrupt stops the call in progress at its next boundary (see session.Lab.Interrupt).
func (l *Lab) Interrupt() error {
	l.cancelMu.Lock()
	defer l.cancelMu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	return nil
}

// ready returns the state, or an error naming op when the Lab is closed or not set up.
func (l *Lab) ready(op string) (*labState, error) {
	if l.closed {
		return nil, fmt.Errorf("train.Lab.%s: the lab is closed", op)
	}
	if l.st == nil {
		return nil, fmt.Errorf("train.Lab.%s: the lab is not set up (call Setup first)", op)
	}
	return l.st, nil
}

// notInHook refuses op from a PreOptimizer hook.
func (l *Lab) notInHook(op string) error {
	if l.inHook.Load() {
		return fmt.Errorf("train.Lab.%s cannot be called from a PreOptimizer hook", op)
	}
	return nil
}

// Close releases the nets, works and models, and the device when Setup opened it.
func (l *Lab) Close() error {
	if err := l.notInHook("Close"); err != nil {
		return err
	}
	if l.closed {
		return nil
	}
	l.release()
	l.closed = true
	if l.ownDev && l.dev != nil {
		err := l.dev.Close()
		l.dev = nil
		return err
	}
	return nil
}

// release frees the state Setup built.
func (l *Lab) release() {
	if s := l.st; s != nil {
		s.release()
		l.st = nil
	}
}

func (s *labState) release() {
	if s.run != nil {
		s.run.Close()
	}
}

// Info returns the Lab's description (Ready false before Setup).
func (l *Lab) Info() (session.Info, error) {
	if l.closed {
		return session.Info{}, errors.New("train.Lab.Info: the lab is closed")
	}
	if l.st == nil {
		return session.Info{}, nil
	}
	return l.st.currentInfo(), nil
}

func (s *labState) currentInfo() session.Info {
	in := s.info
	m := s.tr.st
	in.Step, in.AdamStep, in.Skipped = m.Step, m.AdamStep, m.Skipped
	in.Snapshots = s.snapTags()
	in.LayerTypes = append([]string(nil), in.LayerTypes...)
	in.Compression = append([]session.TensorReport(nil), in.Compression...)
	in.Phases = append([]session.Phase(nil), in.Phases...)
	return in
}

func (s *labState) snapTags() []string {
	tags := make([]string, 0, len(s.snaps))
	for t := range s.snaps {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	return tags
}

// Setup loads, compresses, prepares the windows, runs the teacher pass and evaluates (see
// session.Lab.Setup).
func (l *Lab) Setup(s session.Setup, opts ...session.Option) (session.Info, error) {
	if l.closed {
		return session.Info{}, errors.New("train.Lab.Setup: the lab is closed")
	}
	if err := l.notInHook("Setup"); err != nil {
		return session.Info{}, err
	}
	if err := s.Validate(); err != nil {
		return session.Info{}, err
	}
	rs, err := labRunSetup(s)
	if err != nil {
		return session.Info{}, err
	}
	if err := rs.Train.Validate(); err != nil {
		return session.Info{}, err
	}
	if l.st != nil {
		if l.st.setup.Equal(s) {
			return l.st.currentInfo(), nil
		}
		if !s.Replace {
			return session.Info{}, fmt.Errorf("train.Lab.Setup: the lab is set up with another Setup (%s); set Setup.Replace to replace it", setupDiff(l.st.setup, s))
		}
	}
	o := session.Apply(opts...)
	ctx, end := l.begin(o)
	defer end()
	start := time.Now()
	st, err := l.build(ctx, s, o, start)
	if err != nil {
		return session.Info{}, err
	}
	l.release()
	l.st = st
	st.info.SetupSeconds = time.Since(start).Seconds()
	return st.currentInfo(), nil
}

// setupDiff names the first field where a and b differ.
func setupDiff(a, b session.Setup) string {
	switch {
	case a.Teacher != b.Teacher:
		return fmt.Sprintf("Teacher %q ≠ %q", a.Teacher, b.Teacher)
	case a.Student != b.Student:
		return fmt.Sprintf("Student %q ≠ %q", a.Student, b.Student)
	case a.Train != b.Train:
		return fmt.Sprintf("Train %+v ≠ %+v", a.Train, b.Train)
	case a.Init != b.Init || a.Calibration != b.Calibration:
		return fmt.Sprintf("Init %q %+v ≠ %q %+v", a.Init, a.Calibration, b.Init, b.Calibration)
	}
	return "compression, tokenizer, corpus or resume settings differ"
}

// build makes the state of s (Assemble on the Lab's device, then the teacher pass and the
// first evaluations). The Lab is not changed but for its device, opened by the first Setup:
// with Replace, the old state is released only once the new one is complete, so a failing
// Setup leaves the Lab as it was.
func (l *Lab) build(ctx context.Context, s session.Setup, o session.Options, start time.Time) (_ *labState, err error) {
	st := &labState{setup: s, teacherNLL: map[int]float64{}, snaps: map[string]*labSnapshot{}}
	defer func() {
		if err != nil {
			st.release()
		}
	}()
	report := func(phase string, done, total int) {
		if o.OnProgress != nil {
			o.OnProgress(session.Progress{Phase: phase, Done: done, Total: total, Loss: math.NaN(), Elapsed: time.Since(start)})
		}
	}
	report("load", 0, 2)
	if l.dev == nil { // the Lab keeps the device it opens across Setups (Close closes it)
		if l.dev, err = gpu.Open(); err != nil {
			return nil, fmt.Errorf("train.Lab.Setup: %w", err)
		}
		l.ownDev = true
	}
	env := Env{Device: l.dev, Log: l.log, TokenCache: l.cache,
		Progress: func(phase string, done, total int, _ string) { report(phase, done, total) }}
	rs, err := labRunSetup(s)
	if err != nil {
		return nil, err
	}
	if st.run, err = Assemble(ctx, rs, env); err != nil {
		if errors.Is(err, ErrInterrupted) {
			return nil, err
		}
		return nil, fmt.Errorf("train.Lab.Setup: %w", err)
	}
	r := st.run
	st.student, st.tNet, st.sNet, st.tok, st.tr = r.StudentModel, r.Teacher, r.Student, r.Tokenizer, r.Trainer
	st.info.Teacher, st.info.Student = ModelName(s.Teacher), s.Student
	if s.Student == "" {
		pm, _ := rs.Compression()
		st.info.BitsPerWeight, st.info.Compression = r.BitsPerWeight, SessionReports(r.Reports)
		st.info.Student = fmt.Sprintf("compressed from the teacher (%g bits/weight, paths %s, init %s, seed %d)", s.BitsPerWeight, pm.Paths, pm.Init, s.Train.Seed)
	}
	st.info.Phases = SessionPhases(st.tr.Config.Phases())
	st.info.TrainTokens, st.info.EvalTokens = r.TrainTokens, r.HeldOutTokens
	st.info.Device, st.info.TensorCores = r.Device.Info().String(), r.Device.TensorCores().String()
	if err := st.initSigns(); err != nil {
		return nil, err
	}
	report("load", 2, 2)
	if err := st.prepare(ctx, l.log, o.OnProgress); err != nil {
		return nil, err
	}
	return st, st.evalSetup(ctx, s, report)
}

// prepare runs the teacher pass (Trainer.Prepare), reporting phase "teacher".
func (st *labState) prepare(ctx context.Context, log func(string, ...any), onProgress func(session.Progress)) error {
	tr := st.tr
	if log != nil {
		tr.Log = logWriter(log)
	}
	tr.Progress = &labProgress{phase: "teacher", report: onProgress, start: time.Now()}
	t0 := time.Now()
	if err := tr.Prepare(ctx); err != nil {
		if errors.Is(err, ErrInterrupted) {
			return interrupted(ctx, "during the teacher pass")
		}
		return err
	}
	tr.Progress = nil
	st.info.TeacherSeconds = time.Since(t0).Seconds()
	st.info.Activations = tr.Activations()
	return nil
}

// evalSetup evaluates the teacher and the untrained student (as Trainer.Run starts), or
// takes a resumed run's evaluations and steps from its checkpoint, and fills the Info.
func (st *labState) evalSetup(ctx context.Context, s session.Setup, report func(string, int, int)) error {
	tr := st.tr
	c := tr.Config
	st.info.Ready, st.info.Setup = true, s
	st.info.Layers, st.info.Hidden, st.info.Vocab = c2(st.sNet)
	st.info.LayerTypes = append([]string(nil), st.sNet.Config.LayerTypes...)
	st.names = st.sNet.Trainables()
	st.info.Trainables, st.info.TrainedValues = len(st.names), st.sNet.TrainableCount()
	st.info.TrainWindows, st.info.EvalWindows = len(tr.windows), len(tr.eval)
	report("eval", 0, 2)
	n := len(tr.eval)
	tsum, count, err := nvgkit.NLLContext(ctx, st.tNet, tr.tWork, tr.eval, nil)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, "during the teacher's evaluation")
		}
		return fmt.Errorf("train.Lab.Setup: teacher evaluation: %w", err)
	}
	st.teacherNLL[n] = tsum
	tl := tsum / float64(count)
	report("eval", 1, 2)
	if len(tr.st.Evals) == 0 {
		tr.st.TeacherPPL = math.Exp(tl) // as Trainer.Evaluate
		ev, err := st.eval(ctx, n, nil)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, "during the student's evaluation")
			}
			return fmt.Errorf("train.Lab.Setup: student evaluation: %w", err)
		}
		tr.st.Evals = append(tr.st.Evals, EvalPoint{Step: 0, Loss: ev.StudentLoss, Perplexity: ev.StudentPPL})
		tr.st.BestStep, tr.st.BestPPL = 0, ev.StudentPPL
	} else { // resumed: the history of the checkpoint
		for _, e := range tr.st.Evals {
			st.evals = append(st.evals, session.EvalResult{Step: e.Step, Windows: n, Tokens: count,
				StudentLoss: e.Loss, StudentPPL: e.Perplexity, TeacherLoss: tl, TeacherPPL: math.Exp(tl)})
		}
	}
	report("eval", 2, 2)
	st.info.TeacherPPL = tr.st.TeacherPPL
	st.info.CompressedPPL = tr.st.Evals[0].Perplexity
	for i := range tr.st.Loss { // a resumed run's steps
		s := i + 1
		gn := math.NaN()
		if i < len(tr.st.GradNorm) {
			gn = tr.st.GradNorm[i]
		}
		ph := c.PhaseAt(s)
		st.hist = append(st.hist, session.StepStats{Step: s, Loss: tr.st.Loss[i], GradNorm: gn, LR: c.LRAt(s),
			Skipped: !finite(tr.st.Loss[i]) || !finite(gn), Tokens: c.PhaseTokens(ph), Phase: ph.Kind, Layer: ph.Layer})
	}
	return nil
}

// c2 returns a net's layer count, hidden size and vocabulary size.
func c2(n *nvgkit.Net) (int, int, int) {
	return n.Config.NumHiddenLayers, n.Config.HiddenSize, n.Config.VocabSize
}

// logWriter adapts a printf-style logger to the io.Writer Trainer.Log takes.
type logWriter func(format string, a ...any)

func (w logWriter) Write(b []byte) (int, error) {
	w("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// labProgress adapts the Trainer's Progress (the teacher pass) to session.Progress.
type labProgress struct {
	phase  string
	report func(session.Progress)
	start  time.Time
}

func (p *labProgress) Update(done, total int, status string) {
	if p.report != nil {
		p.report(session.Progress{Phase: p.phase, Done: done, Total: total, Loss: math.NaN(), Elapsed: time.Since(p.start)})
	}
}

func (p *labProgress) Finish(string) {}

// SessionReports converts the compressor's per-tensor reports to the session's plain form
// (what Info.Compression holds and ui.PlotReconstruction draws).
func SessionReports(reports []compress.TensorReport) []session.TensorReport {
	out := make([]session.TensorReport, len(reports))
	for i, r := range reports {
		out[i] = session.TensorReport{Name: r.Name, Kind: r.Kind, Layer: tensorLayer(r.Name), Shape: append([]int(nil), r.Shape...),
			Rank: r.Rank, Paths: r.Paths, BitsPerWeight: r.BitsPerWeight, RelErr: r.RelErr,
			WeightedRelErr: r.WeightedRelErr, InitRelErr: r.InitRelErr, InitWeightedRelErr: r.InitWeightedRelErr}
	}
	return out
}

// tensorLayer is the decoder layer of a checkpoint tensor name ("model.layers.3.…" is 3),
// or −1.
func tensorLayer(name string) int {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return -1
	}
	l, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
	if err != nil {
		return -1
	}
	return l
}
