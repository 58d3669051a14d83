package train

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

// Setup is what a distillation run is built from (Assemble): which teacher, which student,
// which text, how it trains. It is the run's settings in one value — nvg distill's flags,
// its distill.json (RunFile; the JSON layout here) and, field by field under the same names,
// a Lab's session.Setup — so a new setting is one field here, read where Assemble builds the
// run, and a field of the same name in session.Setup (and a flag of nvg distill).
type Setup struct {
	// Teacher is the teacher model: an HF checkpoint directory, a .cmf file or a sharded CMF
	// directory; "" is the embedded default teacher (OpenModel).
	Teacher string `json:"teacher"`
	// Tokenizer is a tokenizer.json file, or a directory holding one; "" finds it beside the
	// teacher (TokenizerJSON).
	Tokenizer string `json:"tokenizer,omitempty"`
	// Student is a compressed student to train (a .cmf file); "" compresses the teacher at
	// BitsPerWeight with Paths, seeded by Train.Seed (float64 products on the CPU).
	Student string `json:"student,omitempty"`
	// TrainFiles and EvalFiles are the training and held-out corpus sources (files,
	// directories, globs, .jsonl corpora: data.ExpandSources); both nil is the Go standard
	// library with the embedded model card's split (data.StdlibCorpus). They go together.
	TrainFiles []string `json:"train_files,omitempty"`
	EvalFiles  []string `json:"eval_files,omitempty"`
	// BitsPerWeight is the compression's target, in (0, 32]; Paths its BLR path mode: "auto",
	// "1" or "2" (compress.ParsePathMode).
	BitsPerWeight float64 `json:"bits_per_weight_target"`
	Paths         string  `json:"paths"`
	// Init is the compression's initial factorisation (compress.ParseInit): "dual-svid"
	// (also "", as run files written before it was a setting) or "refine", which first runs
	// the calibration pass (Calibration) of the teacher on the GPU and refines the
	// factorisation in the metric of its statistics (DESIGN.md §5 "Data-aware
	// initialisation").
	Init string `json:"init,omitempty"`
	// Calibration sizes the calibration pass of Init "refine"; its zero value means
	// DefaultCalibration() (CalibrationConfig.Resolved).
	Calibration CalibrationConfig `json:"calibration,omitzero"`
	// Train is the training schedule and the optimizer (TrainConfig).
	Train TrainConfig `json:"config"`
	// Nets, when not nil, stands for the models and the corpus (nvg bench's synthetic nets):
	// its nets and token streams are the run's, and Teacher, Tokenizer, Student, the corpus
	// and the compression's fields are not used. It is not part of a run file.
	Nets NetSource `json:"-"`
	// Resume, when not "", is a checkpoint file, or a directory holding checkpoints (the
	// latest valid one is used), to continue from: its settings must train as Train does
	// (every field but where the outputs go, how many are kept, the evaluation and checkpoint
	// cadence and which activations are kept, which Train sets).
	Resume string `json:"-"`
}

// Compression returns the compressor's options of s: the library's defaults (float64
// products on the CPU) with s's bits per weight, paths, init and seed (Options.Calibration
// is the calibration pass's, which Assemble adds for InitRefine). Errors: a bad Paths or
// Init, a Calibration out of range.
func (s Setup) Compression() (compress.Options, error) {
	pm, err := compress.ParsePathMode(s.Paths)
	if err != nil {
		return compress.Options{}, err
	}
	init, err := compress.ParseInit(cmp.Or(s.Init, compress.InitDualSVID.String()))
	if err != nil {
		return compress.Options{}, err
	}
	if err := s.Calibration.Validate(); err != nil {
		return compress.Options{}, err
	}
	return compress.Options{BitsPerWeight: s.BitsPerWeight, Paths: pm, Seed: s.Train.Seed, Init: init}, nil
}

// CalibrationConfig sizes the calibration pass of Setup.Init "refine" (Calibrate): Windows
// windows of T tokens drawn from the training split (data.Sampler seeded with the run's
// seed; never held-out text), run through the teacher on the GPU once (nvgkit.Calibrate);
// every projection input gets its second moments, and those of at most GramMax features
// their Gram too (host memory 8·n² bytes each, n the input's features, per distinct input
// of every layer; GramMax 0: second moments only). Its zero value means
// DefaultCalibration().
type CalibrationConfig struct {
	Windows int `json:"windows"`
	T       int `json:"t"`
	GramMax int `json:"gram_max"`
}

// DefaultCalibration returns the calibration pass of nvg distill --init refine,
// session.DefaultCalibration's: 16 windows of 256 tokens (DESIGN.md §5: 64 × 256 changed
// nothing on the tiny teacher) and the Grams of inputs up to 4096 features (every input of
// the 0.8B geometry: 3.4 GiB of host memory; a 27B teacher's 5120-feature inputs get second
// moments only).
func DefaultCalibration() CalibrationConfig {
	return CalibrationConfig(session.DefaultCalibration())
}

// Resolved returns c, or DefaultCalibration() when c is the zero value.
func (c CalibrationConfig) Resolved() CalibrationConfig {
	return CalibrationConfig(session.CalibrationConfig(c).Resolved())
}

// Validate reports the first field of c (resolved) out of range: Windows or T < 1, GramMax
// < 0 (session.CalibrationConfig.Check, the one rule).
func (c CalibrationConfig) Validate() error {
	if err := session.CalibrationConfig(c).Check(); err != nil {
		return fmt.Errorf("train.Setup: %w", err)
	}
	return nil
}

// NetSource makes a run's nets and text itself instead of loading and compressing models
// (Setup.Nets).
type NetSource interface {
	// Nets makes the teacher (streaming its layers when streamTeacher) and the student on dev.
	Nets(dev *gpu.Device, streamTeacher bool) (teacher, student *nvgkit.Net, err error)
	// Tokens returns the training and held-out token streams (ids below the vocabulary).
	Tokens() (train, heldOut []int)
}

// Env is how Assemble builds a run — where it logs and reports, which device, which ranks —
// not what it computes: two Envs give the same run.
type Env struct {
	// Device is the GPU device to use (the caller's: Run.Close leaves it open); nil opens one
	// at the "gpu" phase (OpenDevice, else gpu.Open), which is the run's: Run.Close closes it.
	Device     *gpu.Device
	OpenDevice func() (*gpu.Device, error)
	// Log receives one line per phase (nil: none); Progress the corpus's and the
	// compression's progress, done of total units with a status (nil: none).
	Log      func(format string, a ...any)
	Progress func(phase string, done, total int, status string)
	// Phase, when not nil, is called at each phase boundary ("tokenizer", "corpus",
	// "load-student", or "compress" and "compressed", or "reuse-student"; "gpu", "trainer"),
	// before Assemble checks its context there.
	Phase func(name string)
	// TokenCache is the corpus token cache directory ("" none; nvg's: TokenCacheDir()).
	TokenCache string
	// Comm makes the run one rank of a data-parallel run (nil: one process; WithComm).
	Comm Comm
	// StreamTeacher keeps the teacher's layers on the host (nvgkit.StreamLayers).
	StreamTeacher bool
	// RunDir, when not "", is the run directory: the compressed student is written there
	// (CompressedStudentFile, CompressionFile) and trained from that file, as its resume is.
	RunDir string
	// Resume, when not nil, is the checkpoint to continue from, already checked against the
	// run directory (LoadResumePoint), instead of Setup.Resume; its reports, when not nil, let
	// the run directory's compressed student be reused without compressing again.
	Resume *ResumePoint
}

// Run is an assembled run: the models, the tokenizer, the token streams' sizes, the nets on
// the device and the Trainer that steps them (Trainer.Run trains it to the end; a Lab steps
// it a call at a time). Close releases it.
type Run struct {
	Setup  Setup
	Device *gpu.Device
	// Tokenizer is the run's tokenizer; TrainTokens and HeldOutTokens the lengths of the
	// token streams the windows were drawn from.
	Tokenizer                  *tokenizer.Tokenizer
	TrainTokens, HeldOutTokens int
	// TeacherModel and StudentModel are the models the nets were loaded from.
	TeacherModel, StudentModel *cmf.Model
	// Reports are the compression's per-tensor reports (nil for a student file), and
	// BitsPerWeight the student's overall bits per weight (0: unknown).
	Reports       []compress.TensorReport
	BitsPerWeight float64
	// Teacher and Student are the nets; Trainer drives them (its BitsPerWeight, TeacherID
	// and StudentFile set).
	Teacher, Student *nvgkit.Net
	Trainer          *Trainer

	ownDev    bool
	keepModel bool // the teacher model is held by an abandoned compression (Close leaves it)
}

// ReleaseTeacher releases the teacher net and its work: the run can still step (TrainStep)
// once its top-k is prepared, but no longer evaluate or prepare (nvg bench frees the teacher
// before it measures the student's step).
func (r *Run) ReleaseTeacher() {
	if r.Trainer != nil {
		r.Trainer.tWork.Release()
	}
	r.Teacher.Release()
}

// Close releases the trainer's works, the nets and the models, and the device when Assemble
// opened it. It may be called on a half-built run.
func (r *Run) Close() error {
	if r.Trainer != nil {
		r.Trainer.Close()
	}
	r.Student.Release()
	r.Teacher.Release()
	if r.StudentModel != nil {
		r.StudentModel.Close()
	}
	if r.TeacherModel != nil && !r.keepModel {
		r.TeacherModel.Close()
	}
	if r.ownDev && r.Device != nil {
		return r.Device.Close()
	}
	return nil
}

// Assemble builds everything a run needs from s (the one assembly of nvg distill, a Lab, the
// session server and nvg bench's runs): it opens the teacher (OpenModel) and the tokenizer
// (TokenizerJSON), tokenizes the corpus, compresses the teacher (or opens Setup.Student),
// opens the device, loads the student and the teacher nets and makes the Trainer (NewTrainer,
// or ResumeCheckpoint from Setup.Resume or env.Resume). Nothing is computed on the GPU yet
// (the teacher pass is Trainer.Prepare). ctx, checked at every phase boundary (and during
// the compression, which an interrupt leaves running behind), stops it with an error
// wrapping ErrInterrupted. Errors: s out of range (TrainConfig.Validate and CheckMemory, a bad Paths or
// BitsPerWeight), bad paths (*InputError), and every phase's errors; nothing is left open.
func Assemble(ctx context.Context, s Setup, env Env) (_ *Run, err error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	a := &assembly{ctx: ctx, env: env, log: orDiscard(env.Log), run: &Run{Setup: s}}
	defer func() {
		if err != nil {
			a.run.Close()
		}
	}()
	// The checkpoint to continue from is read, and compared with s, before any work.
	if a.res, err = a.resumePoint(); err != nil {
		return nil, err
	}
	steps := []func() error{a.models, a.corpus, a.student, a.device, a.nets, a.trainer}
	if s.Nets != nil {
		steps = []func() error{a.device, a.sourceNets, a.trainer}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return a.run, nil
}

// validate checks what the phases cannot check later without having done work.
func (s Setup) validate() error {
	if err := s.Train.Validate(); err != nil {
		return err
	}
	if err := s.Train.CheckMemory(); err != nil {
		return err
	}
	if s.Nets != nil {
		return nil
	}
	if s.Student == "" {
		if !(s.BitsPerWeight > 0 && s.BitsPerWeight <= 32) {
			return fmt.Errorf("train.Setup: BitsPerWeight = %g, want a value in (0, 32]", s.BitsPerWeight)
		}
		if _, err := s.Compression(); err != nil {
			return fmt.Errorf("train.Setup: %w", err)
		}
	}
	if (s.TrainFiles == nil) != (s.EvalFiles == nil) {
		return errors.New("train.Setup: TrainFiles and EvalFiles go together (both nil: the embedded corpus)")
	}
	return nil
}

// assembly is Assemble's state between its phases.
type assembly struct {
	ctx         context.Context
	env         Env
	log         func(format string, a ...any)
	run         *Run
	train, held []int
	studentFile *FileDigest
	res         *ResumePoint // the checkpoint the run continues from (resumePoint), or nil
}

// phase calls Env.Phase and stops the assembly when ctx is done.
func (a *assembly) phase(name string) error {
	if a.env.Phase != nil {
		a.env.Phase(name)
	}
	if a.ctx.Err() != nil {
		return interrupted(a.ctx, "before the "+name+" phase")
	}
	return nil
}

func (a *assembly) progress(phase string, done, total int, status string) {
	if a.env.Progress != nil {
		a.env.Progress(phase, done, total, status)
	}
}

// models opens the teacher and the tokenizer.
func (a *assembly) models() error {
	s, r := a.run.Setup, a.run
	var err error
	if r.TeacherModel, err = OpenModel(s.Teacher); err != nil {
		return err
	}
	if s.Train.BlockSteps > 0 { // the block phase's budget, known now, before any work
		c := s.Train
		c.BlockLayers = r.TeacherModel.Config.NumHiddenLayers
		if err := c.Validate(); err != nil {
			return err
		}
	}
	if err := a.phase("tokenizer"); err != nil {
		return err
	}
	r.Tokenizer, err = OpenTokenizer(s.Tokenizer, s.Teacher, r.TeacherModel.Config, a.log)
	return err
}

// corpus tokenizes the training and held-out streams (through the token cache).
func (a *assembly) corpus() error {
	s, r := a.run.Setup, a.run
	var corpus *data.Corpus
	what := "the Go standard library (model card split)"
	if s.TrainFiles != nil {
		tf, err := data.ExpandSources(s.TrainFiles)
		if err != nil {
			return inputf("TrainFiles: %v", err)
		}
		ef, err := data.ExpandSources(s.EvalFiles)
		if err != nil {
			return inputf("EvalFiles: %v", err)
		}
		if corpus, err = data.FilesCorpus(tf, ef); err != nil {
			return err
		}
		what = fmt.Sprintf("%d training and %d held-out files", len(tf), len(ef))
	} else {
		var err error
		if corpus, err = data.StdlibCorpus(); err != nil {
			return err
		}
	}
	if err := a.phase("corpus"); err != nil {
		return err
	}
	t0 := time.Now()
	a.progress("corpus", 0, 2, "")
	var err error
	if a.train, err = corpus.Tokens(r.Tokenizer, data.Train, a.env.TokenCache); err != nil {
		return fmt.Errorf("training corpus: %w", err)
	}
	if err := a.phase("corpus"); err != nil {
		return err
	}
	a.progress("corpus", 1, 2, "")
	if a.held, err = corpus.Tokens(r.Tokenizer, data.HeldOut, a.env.TokenCache); err != nil {
		return fmt.Errorf("held-out corpus: %w", err)
	}
	a.progress("corpus", 2, 2, "")
	r.TrainTokens, r.HeldOutTokens = len(a.train), len(a.held)
	a.log("corpus: %s: %d training and %d held-out tokens (%.1fs)", what, len(a.train), len(a.held), time.Since(t0).Seconds())
	return nil
}

// student opens Setup.Student, reuses the run directory's compressed student (Env.Resume's
// reports), or compresses the teacher (saving it in the run directory, and training from
// that file, when there is one).
func (a *assembly) student() error {
	s, r, res := a.run.Setup, a.run, a.env.Resume
	switch {
	case s.Student != "":
		if err := a.phase("load-student"); err != nil {
			return err
		}
		var err error
		r.StudentModel, err = OpenModel(s.Student)
		return err
	case res != nil && res.Reports != nil && a.env.RunDir != "":
		if err := a.phase("reuse-student"); err != nil {
			return err
		}
		r.Reports, a.studentFile = res.Reports, res.Checkpoint.Meta.Student
		a.log("student: reusing %s (size and SHA-256 match the checkpoint; no compression)", filepath.Join(a.env.RunDir, CompressedStudentFile))
	default:
		opts, _ := s.Compression() // checked by validate
		if err := a.calibrate(&opts); err != nil {
			return err
		}
		if err := a.phase("compress"); err != nil {
			return err
		}
		if err := a.compress(opts); err != nil {
			return err
		}
	}
	r.BitsPerWeight = compress.OverallBitsPerWeight(r.Reports)
	if a.env.RunDir == "" || s.Student != "" {
		return nil
	}
	m, err := cmf.Open(filepath.Join(a.env.RunDir, CompressedStudentFile))
	if err != nil {
		return err
	}
	if r.StudentModel != nil {
		r.StudentModel.Close()
	}
	r.StudentModel = m
	return nil
}

// calibrate runs the calibration pass of InitRefine (Calibrate) and puts its statistics in
// opts: it opens the device and loads the teacher net first (the run's: nets then loads only
// the student). Other inits need nothing.
func (a *assembly) calibrate(opts *compress.Options) error {
	if opts.Init != compress.InitRefine {
		return nil
	}
	if err := a.device(); err != nil {
		return err
	}
	if err := a.teacherNet(); err != nil {
		return err
	}
	if err := a.phase("calibrate"); err != nil {
		return err
	}
	s, r := a.run.Setup, a.run
	c := s.Calibration.Resolved()
	t0 := time.Now()
	cal, err := Calibrate(a.ctx, r.Teacher, a.train, c, s.Train.Seed, func(done, total int) { a.progress("calibrate", done, total, "") })
	if err != nil {
		if a.ctx.Err() != nil {
			return interrupted(a.ctx, "during the calibration pass")
		}
		return err
	}
	a.log("calibration: %d training windows × %d tokens through the teacher, Grams of inputs of at most %d features (%.1fs)", c.Windows, c.T, c.GramMax, time.Since(t0).Seconds())
	opts.Calibration = cal
	return nil
}

// compress compresses the teacher with opts in a goroutine, which an interrupt leaves
// behind (it then closes the teacher model itself when it ends).
func (a *assembly) compress(opts compress.Options) error {
	s, r := a.run.Setup, a.run
	a.log("compressing %s at %g bits/weight, paths %s, init %s", ModelName(s.Teacher), s.BitsPerWeight, opts.Paths, opts.Init)
	t0 := time.Now()
	type result struct {
		m   *cmf.Model
		r   []compress.TensorReport
		err error
	}
	done := make(chan result, 1)
	abandoned := make(chan struct{})
	teacher := r.TeacherModel
	go func() {
		m, reports, err := compress.Model(teacher, opts, func(done, total int, name string) {
			select {
			case <-abandoned:
			default:
				a.progress("compress", done, total, name)
			}
		})
		done <- result{m, reports, err}
		select {
		case <-abandoned:
			teacher.Close()
		default:
		}
	}()
	var res result
	select {
	case res = <-done:
	case <-a.ctx.Done():
		r.keepModel = true
		close(abandoned)
	}
	if err := a.phase("compressed"); err != nil {
		return err
	}
	if res.err != nil {
		return res.err
	}
	r.StudentModel, r.Reports = res.m, res.r
	bpw := compress.OverallBitsPerWeight(res.r)
	a.log("compressed %d tensors to %.4f bits/weight (%.1fs)", len(res.r), bpw, time.Since(t0).Seconds())
	if opts.Init == compress.InitRefine {
		var start, end float64
		for _, t := range res.r {
			start += t.InitWeightedRelErr / float64(len(res.r))
			end += t.WeightedRelErr / float64(len(res.r))
		}
		a.log("refined: mean input-weighted relative error %.4f at the Dual-SVID start, %.4f after", start, end)
	}
	if math.Abs(bpw-s.BitsPerWeight) > 0.1*s.BitsPerWeight {
		a.log("warning: the student has %.4f bits/weight, not the %g asked for (ranks are whole, at least 8 and at most the matrix's full rank)", bpw, s.BitsPerWeight)
	}
	if a.env.RunDir == "" {
		return nil
	}
	d, err := saveCompressedStudent(a.env.RunDir, res.m, res.r, a.env.Resume)
	if err != nil {
		return err
	}
	a.studentFile = &d
	return nil
}

// device opens the device unless Env gives one (once: the calibration pass may have opened
// it already).
func (a *assembly) device() error {
	if a.run.Device != nil {
		return nil
	}
	if err := a.phase("gpu"); err != nil {
		return err
	}
	r := a.run
	if r.Device = a.env.Device; r.Device != nil {
		return nil
	}
	open := a.env.OpenDevice
	if open == nil {
		open = gpu.Open
	}
	var err error
	if r.Device, err = open(); err != nil {
		return err
	}
	r.ownDev = true
	return nil
}

// nets loads the student (first: a resumed run checks it against the checkpoint before the
// teacher is loaded) and the teacher, unless the calibration pass loaded it.
func (a *assembly) nets() error {
	r := a.run
	var err error
	if r.Student, err = nvgkit.LoadNet(r.Device, r.StudentModel, nvgkit.Student); err != nil {
		return err
	}
	if res := a.env.Resume; res != nil {
		if err := res.Checkpoint.CheckStudent(r.Student); err != nil {
			return fmt.Errorf("--resume %s: %w", res.Path, err)
		}
	}
	return a.teacherNet()
}

// teacherNet loads the teacher net (streamed with Env.StreamTeacher) unless it is loaded.
func (a *assembly) teacherNet() error {
	r := a.run
	if r.Teacher != nil {
		return nil
	}
	var opts []nvgkit.LoadOption
	if a.env.StreamTeacher {
		opts = append(opts, nvgkit.StreamLayers())
	}
	var err error
	r.Teacher, err = nvgkit.LoadNet(r.Device, r.TeacherModel, nvgkit.Teacher, opts...)
	return err
}

// sourceNets makes Setup.Nets's nets and token streams.
func (a *assembly) sourceNets() error {
	r := a.run
	var err error
	r.Teacher, r.Student, err = r.Setup.Nets.Nets(r.Device, a.env.StreamTeacher)
	if err != nil {
		return err
	}
	a.train, a.held = r.Setup.Nets.Tokens()
	r.TrainTokens, r.HeldOutTokens = len(a.train), len(a.held)
	return nil
}

// trainer makes the Trainer: a new one, or one that continues a checkpoint.
func (a *assembly) trainer() error {
	if err := a.phase("trainer"); err != nil {
		return err
	}
	s, r, res := a.run.Setup, a.run, a.res
	var err error
	opts := []Option{WithComm(a.env.Comm)}
	if res != nil {
		r.Trainer, err = ResumeCheckpoint(r.Teacher, r.Student, a.train, a.held, res.Checkpoint, res.Path, opts...)
	} else {
		r.Trainer, err = NewTrainer(r.Teacher, r.Student, a.train, a.held, s.Train, opts...)
	}
	if err != nil {
		return err
	}
	tr := r.Trainer
	tr.BitsPerWeight, tr.TeacherID = r.BitsPerWeight, ModelName(s.Teacher)
	if s.Nets != nil {
		tr.TeacherID = fmt.Sprintf("%T", s.Nets)
	}
	if a.studentFile != nil {
		tr.StudentFile = a.studentFile
	}
	if k := s.compressionKey(); k != nil {
		tr.Compression = k
	}
	tr.Setup = &a.run.Setup
	return nil
}

// resumePoint is the checkpoint the run continues from (Env.Resume, else Setup.Resume's, or
// nil) with Setup.Train's settings of where the outputs go and what is kept: the settings it
// was trained with must be the Setup's (compareSettings, resumeFree; a *SettingMismatch
// names the first that differs).
func (a *assembly) resumePoint() (*ResumePoint, error) {
	s, res := a.run.Setup, a.env.Resume
	if res == nil && s.Resume != "" {
		res = &ResumePoint{Path: s.Resume}
		var err error
		if dir, serr := statDir(s.Resume); serr == nil && dir {
			res.Checkpoint, res.Path, err = LatestCheckpoint(s.Resume, func(e error) { a.log("warning: %v; using an earlier checkpoint", e) })
		} else {
			res.Checkpoint, err = LoadCheckpoint(s.Resume)
		}
		if err != nil {
			return nil, fmt.Errorf("Resume: %w", err)
		}
	}
	if res == nil {
		return nil, nil
	}
	if err := compareSettings(res.Path, res.Checkpoint, s, "the Setup", resumeFree); err != nil {
		return nil, fmt.Errorf("Resume: %w", err)
	}
	if k, want := res.Checkpoint.Meta.Compression, s.compressionKey(); k != nil && want != nil && !k.equal(*want) {
		return nil, fmt.Errorf("Resume %s: the checkpoint's student was compressed with %s, this Setup compresses with %s", res.Path, k, want)
	}
	c := &res.Checkpoint.Meta.Config
	t := s.Train
	c.OutDir, c.TopKFile, c.Keep, c.EvalEvery, c.CheckpointEvery = t.OutDir, t.TopKFile, t.Keep, t.EvalEvery, t.CheckpointEvery
	c.KeepFinal, c.KeepActivations, c.ActivationBudget = t.KeepFinal, t.KeepActivations, t.ActivationBudget
	*c = c.Resolved()
	return res, nil
}

// resumeFree zeroes what a Setup may change when it resumes a checkpoint: where the outputs go,
// how many are kept, the evaluation and checkpoint cadence, KeepFinal and which activations
// are kept (bit-identical either way).
func resumeFree(c *TrainConfig) {
	c.OutDir, c.TopKFile, c.Keep, c.EvalEvery, c.CheckpointEvery, c.KeepFinal, c.KeepActivations, c.ActivationBudget = "", "", 0, 0, 0, false, false, 0
}

// CompressionKey names how a run's student was compressed from its teacher (Setup's bits per
// weight, paths, init and, for "refine", the calibration pass): checkpoints record it
// (CheckpointMeta.Compression) and a resume whose Setup compresses otherwise is refused,
// since the sign bits it would train from are not the checkpoint's (the compressed.cmf
// digest, CheckpointMeta.Student, checks the file itself where there is one).
type CompressionKey struct {
	BitsPerWeight float64            `json:"bits_per_weight_target"`
	Paths         string             `json:"paths"`
	Init          string             `json:"init"`
	Calibration   *CalibrationConfig `json:"calibration,omitempty"`
}

// compressionKey is the CompressionKey of a Setup that compresses the teacher (nil when it
// loads a student or makes its nets); Init "" reads as "dual-svid", a zero Calibration as
// the default, which it stands for.
func (s Setup) compressionKey() *CompressionKey {
	if s.Student != "" || s.Nets != nil {
		return nil
	}
	opts, err := s.Compression()
	if err != nil {
		return nil
	}
	k := &CompressionKey{BitsPerWeight: s.BitsPerWeight, Paths: opts.Paths.String(), Init: opts.Init.String()}
	if opts.Init == compress.InitRefine {
		c := s.Calibration.Resolved()
		k.Calibration = &c
	}
	return k
}

func (k CompressionKey) equal(o CompressionKey) bool {
	if (k.Calibration == nil) != (o.Calibration == nil) || k.Calibration != nil && *k.Calibration != *o.Calibration {
		return false
	}
	k.Calibration, o.Calibration = nil, nil
	return k == o
}

// String formats k as "1 bits/weight, paths auto, init refine (calibration 16 × 256 tokens,
// Grams ≤ 4096)".
func (k *CompressionKey) String() string {
	out := fmt.Sprintf("%g bits/weight, paths %s, init %s", k.BitsPerWeight, k.Paths, k.Init)
	if c := k.Calibration; c != nil {
		out += fmt.Sprintf(" (calibration %d × %d tokens, Grams ≤ %d)", c.Windows, c.T, c.GramMax)
	}
	return out
}
