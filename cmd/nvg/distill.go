package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
)

func init() {
	register(&command{
		name:    "distill",
		summary: "compress a teacher to ~1 bit/weight and distil the student against it (default: the embedded tiny teacher on the Go standard library)",
		usage:   "[--teacher MODEL] [--train-files a.go,…] [--eval-files b.go,…] [--bpw 1] [--paths auto] [--steps N] [--nb N] [--windows N] [--t N] [--k 32] [--lr X] [--warmup N] [--eval-every N] [--eval-windows N] [--seed N] [--clip X] [--checkpoint-every N] [--keep N] [--keep-final] [--keep-activations] [--activation-budget-mib 1024] [--config RUN.json] [--tokenizer F] [-o DIR] [--topk-file F] [--stream-teacher] [--mem-log F.csv [--mem-log-every N]] | --resume DIR [--steps N] [--keep N] [--mem-log …] [--stream-teacher] [--keep-activations] [--activation-budget-mib N]",
		run:     runDistill,
	})
}

// distillSettings is what nvg distill needs, besides the checkpoint, to rebuild a run on
// --resume (saved as distill.json in the output directory; --config reads the same layout).

// maxStepTokens bounds nb·t before any work: every per-token GPU buffer is indexed in 32 bits,
// so rows × hidden_size (≥ 512 for any real model) must stay below 2³¹.
const maxStepTokens = 1 << 22

type distillSettings struct {
	Teacher    string            `json:"teacher"` // "" = the embedded tiny teacher
	Tokenizer  string            `json:"tokenizer,omitempty"`
	TrainFiles []string          `json:"train_files,omitempty"`
	EvalFiles  []string          `json:"eval_files,omitempty"`
	BPW        float64           `json:"bits_per_weight_target"`
	Paths      string            `json:"paths"`
	Seed       uint64            `json:"seed"`
	Config     train.TrainConfig `json:"config"`
	Started    string            `json:"started"`
	// Provenance of the session that started the run (the build; the adapter once the
	// device is open; the compression products). report.json has the finishing session's.
	Provenance *train.Provenance `json:"provenance,omitempty"`
}

const distillSettingsFile = "distill.json"

// sharedFiles returns the files of eval that are also in train (the same file, however
// named), in eval's order.
func sharedFiles(train, eval []string) []string {
	var out []string
	for _, e := range eval {
		es, err := os.Stat(e)
		if err != nil {
			continue
		}
		for _, t := range train {
			if ts, err := os.Stat(t); err == nil && os.SameFile(es, ts) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

func runDistill(args []string) error {
	c := commands["distill"]
	s, cli, set, err := parseDistillFlags(c, args)
	if err != nil {
		return err
	}
	opts, out := cli.opts, s.Config.OutDir
	mr, err := startMPI()
	if err != nil {
		return err
	}
	defer mr.finish()
	opts.comm = mr.comm
	if opts.memEvery < 1 {
		return usagef("--mem-log-every must be ≥ 1, got %d", opts.memEvery)
	}
	if opts.memLog != "" {
		if err := checkMemLog(opts.memLog); err != nil {
			return err
		}
		if st, err := os.Stat(filepath.Dir(opts.memLog)); err != nil || !st.IsDir() {
			return usagef("--mem-log %s: directory %s does not exist", opts.memLog, filepath.Dir(opts.memLog))
		}
	}

	var res *resumePoint
	if cli.resume != "" {
		// What the flags said, before distill.json replaces s.
		flagSteps, flagKeep, flagKeepActs, flagBudget := s.Config.Steps, s.Config.Keep, s.Config.KeepActivations, s.Config.ActivationBudget
		for name := range set {
			if name == "config" {
				return usagef("--resume takes the run's settings from %s; --config cannot be given with it", filepath.Join(cli.resume, distillSettingsFile))
			}
			if name != "resume" && name != "o" && name != "out" && name != "mem-log" && name != "mem-log-every" && name != "stream-teacher" && name != "steps" && name != "keep" && name != "keep-activations" && name != "activation-budget-mib" {
				return usagef("--resume takes the run's settings from %s; --%s cannot be changed", filepath.Join(cli.resume, distillSettingsFile), name)
			}
		}
		if out != "" && filepath.Clean(out) != filepath.Clean(cli.resume) {
			return usagef("--resume %s writes into that directory; -o %s differs", cli.resume, out)
		}
		b, err := os.ReadFile(filepath.Join(cli.resume, distillSettingsFile))
		if err != nil {
			return usagef("--resume %s: %v (not an nvg distill output directory?)", cli.resume, err)
		}
		s = distillSettings{Config: train.TrainConfig{Settings: optim.Default()}} // a file written before the Adam moments were recorded trained with the defaults
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("--resume: %s: %w", distillSettingsFile, err)
		}
		if !hasCheckpoint(cli.resume) {
			return usagef("--resume %s: no checkpoint there (the run stopped before its first checkpoint: nothing to resume; remove %s and start it again)", cli.resume, cli.resume)
		}
		out = cli.resume
		// The checkpoint is checked before anything expensive (compression, teacher pass).
		if res, err = loadResumePoint(out, s); err != nil {
			return err
		}
		cfg := &res.ck.Meta.Config
		if set["keep"] {
			if flagKeep < 0 {
				return usagef("--keep must be ≥ 0, got %d", flagKeep)
			}
			cfg.Keep = flagKeep
		}
		if set["keep-activations"] {
			cfg.KeepActivations, s.Config.KeepActivations = flagKeepActs, flagKeepActs
		}
		if set["activation-budget-mib"] {
			cfg.ActivationBudget, s.Config.ActivationBudget = flagBudget, flagBudget
		}
		if set["steps"] {
			if err := res.ck.Extend(flagSteps); err != nil {
				return usagef("--resume %s --steps %d: %v", out, flagSteps, err)
			}
			fmt.Fprintf(os.Stderr, "extending the run to %d steps (the learning-rate schedule spans its first %d; the steps after run at %.3g)\n",
				cfg.Steps, cfg.ScheduleSteps, cfg.LRAt(cfg.Steps))
		} else if rep, err := train.LoadReport(filepath.Join(out, "report.json")); err == nil && !rep.Interrupted && rep.Steps >= cfg.Steps &&
			res.ck.Meta.Step >= cfg.Steps && exists(filepath.Join(out, "student.cmf")) {
			// Nothing left to do: no teacher pass, no export again.
			fmt.Printf("the run in %s is complete (%d of %d steps): student %s, held-out perplexity %.3f (teacher %.3f, compressed %.3f, %.1f %% of the log-perplexity gap closed); --steps N extends it\n",
				out, rep.Steps, cfg.Steps, filepath.Join(out, "student.cmf"), rep.DistilledPPL, rep.TeacherPPL, rep.CompressedPPL, 100*rep.GapClosed)
			return nil
		}
	} else {
		tc := s.Config
		switch { // what TrainConfig.Validate leaves to its caller
		case !(s.BPW > 0 && s.BPW <= 32):
			return usagef("--bpw must be in (0, 32], got %g", s.BPW)
		case tc.Warmup < 0:
			return usagef("--warmup must be ≥ 0, got %d", tc.Warmup)
		case tc.EvalEvery < 0:
			return usagef("--eval-every must be ≥ 0, got %d", tc.EvalEvery)
		case tc.CheckpointEvery < 0:
			return usagef("--checkpoint-every must be ≥ 0, got %d", tc.CheckpointEvery)
		case !(tc.ClipNorm >= 0) || math.IsInf(tc.ClipNorm, 0):
			return usagef("--clip must be finite and ≥ 0, got %g", tc.ClipNorm)
		}
		if err := tc.Validate(); err != nil {
			return trainConfigUsage(err)
		}
		if int64(tc.NB)*int64(tc.T) > maxStepTokens {
			return usagef("--nb × --t = %d × %d tokens per step exceeds %d: GPU buffers are indexed in 32 bits (rows × hidden_size < 2³¹); use fewer or shorter windows",
				tc.NB, tc.T, maxStepTokens)
		}
		if _, err := compress.ParsePathMode(s.Paths); err != nil {
			return usagef("--%v", err)
		}
		tf, err := expandCorpus("train-files", s.TrainFiles)
		if err != nil {
			return err
		}
		ef, err := expandCorpus("eval-files", s.EvalFiles)
		if err != nil {
			return err
		}
		s.TrainFiles, s.EvalFiles = tf, ef // distill.json keeps the expanded files, so --resume reads the same corpus
		if (tf == nil) != (ef == nil) {
			return usagef("--train-files and --eval-files go together")
		}
		if both := sharedFiles(tf, ef); len(both) > 0 {
			fmt.Fprintf(os.Stderr, "warning: %d of the --eval-files are also --train-files (%s): the held-out perplexity will be measured on training text\n",
				len(both), strings.Join(both, ", "))
		}
		if s.Teacher != "" && !exists(s.Teacher) {
			return usagef("--teacher %s: no such file or directory", s.Teacher)
		}
		if tc.TopKFile != "" {
			if st, err := os.Stat(filepath.Dir(tc.TopKFile)); err != nil || !st.IsDir() {
				return usagef("--topk-file %s: directory %s does not exist", tc.TopKFile, filepath.Dir(tc.TopKFile))
			}
		}
		if out == "" {
			out = filepath.Join("out", "distill-"+time.Now().UTC().Format("20060102-150405"))
			if out, err = bcastString(mr.comm, out); err != nil { // rank 0's clock names the run
				return err
			}
		}
		out = rankDir(out, mr.comm.Rank())
		if st, err := os.Stat(out); err == nil && !st.IsDir() {
			return usagef("-o %s is a file; the output is a directory", out)
		}
		if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
			if hasCheckpoint(out) {
				return usagef("output directory %s is not empty (pick another -o, or --resume it)", out)
			}
			return usagef("output directory %s is not empty and holds no checkpoint to resume (a run stopped before its first one?): remove it or pick another -o", out)
		}
		// Every path of the settings is made absolute: --resume may run from another directory
		// and must find the same teacher, data and output (never the current directory's).
		abs := func(p string) string {
			if p == "" {
				return ""
			}
			if a, err := filepath.Abs(p); err == nil {
				return a
			}
			return p
		}
		for i := range tf {
			tf[i] = abs(tf[i])
		}
		for i := range ef {
			ef[i] = abs(ef[i])
		}
		if tc.TopKFile == "" {
			tc.TopKFile = filepath.Join(out, distillTopKFile)
		}
		s.Teacher, s.Tokenizer, s.Config.OutDir, s.Config.TopKFile = abs(s.Teacher), abs(s.Tokenizer), abs(out), abs(tc.TopKFile)
		s.Started = time.Now().UTC().Format(time.RFC3339)
		prov := train.NewProvenance(nil, distillCompressOptions(s).Products)
		s.Provenance = &prov
		created := !exists(out)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		// distill.json: the effective settings (defaults, --config file, flags), which
		// --resume reads and --config accepts.
		err = writeDistillSettings(out, s)
		if err == nil {
			err = distill(s, out, nil, opts)
		}
		if err != nil && !hasCheckpoint(out) {
			// Nothing to resume: remove what this run wrote (the directory was missing or
			// empty), so that the same command can be run again.
			removeRunOutput(out, created)
		}
		return err
	}
	return distill(s, out, res, opts)
}

// distillCompressOptions are the compression options of the run s: the library defaults
// (float64 products on the CPU, as compress.Options' zero value) with its bits per weight,
// paths and seed (s.Paths already checked).
func distillCompressOptions(s distillSettings) compress.Options {
	pm, _ := compress.ParsePathMode(s.Paths)
	return compress.Options{BitsPerWeight: s.BPW, Paths: pm, Seed: s.Seed}
}

// writeDistillSettings writes s as out's distill.json (atomically).
func writeDistillSettings(out string, s distillSettings) error {
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(out, distillSettingsFile), append(b, '\n'))
}

// distillOptions are how a run is carried out, not what it computes: they may differ
// between a run and its --resume.
type distillOptions struct {
	streamTeacher bool       // LoadNet(…, StreamLayers()) for the teacher
	memLog        string     // CSV file of train.MemLogger samples ("" = none)
	memEvery      int        // steps between samples
	comm          train.Comm // the data-parallel ranks (startMPI; SingleProcess alone)
}

// openMemLog opens (appending) the memory log of a run of tokensPerStep tokens a step on
// dev; a new or empty file gets the header line first.
// checkMemLog refuses a --mem-log path that exists and is not a memory log (appending, as a
// resumed run does, must never go onto another file), or that is a directory.
func checkMemLog(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return usagef("--mem-log %s: %v", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return usagef("--mem-log %s is a directory; give a file", path)
	}
	head := make([]byte, len(train.MemLogHeader)+1)
	n, _ := io.ReadFull(f, head)
	if n > 0 && string(head[:n]) != train.MemLogHeader+"\n" {
		return usagef("--mem-log %s exists and is not a memory log (its first line is not %q): give a new file", path, train.MemLogHeader)
	}
	return nil
}

func openMemLog(path string, dev *gpu.Device, tokensPerStep int) (*os.File, *train.MemLogger, error) {
	if err := checkMemLog(path); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("--mem-log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("--mem-log: %w", err)
	}
	ml, err := train.NewMemLogger(f, dev, tokensPerStep, st.Size() == 0)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("--mem-log %s: %w", path, err)
	}
	return f, ml, nil
}

// removeRunOutput removes the output directory out of a run that failed before its first
// checkpoint: out itself when the run created it, else its contents (it was empty).
func removeRunOutput(out string, created bool) {
	if created {
		os.RemoveAll(out)
		return
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(out, e.Name()))
	}
}

// trainConfigFlags names the distill flag of each TrainConfig field that has one (the
// others come only from a --config file).
var trainConfigFlags = map[string]string{"Steps": "steps", "NB": "nb", "T": "t", "Windows": "windows", "K": "k", "LR": "lr",
	"ClipNorm": "clip", "EvalWindows": "eval-windows", "Keep": "keep"}

// flagTerms rewrites the TrainConfig field names in a TrainConfigError's range as flags.
var flagTerms = strings.NewReplacer("Steps·NB", "--steps × --nb", "NB =", "--nb =")

// trainConfigUsage is the usage error of a TrainConfig.Validate error, naming the flag of
// the field: "--steps must be ≥ 1, got 0".
func trainConfigUsage(err error) error {
	var ce *train.TrainConfigError
	if errors.As(err, &ce) {
		if f, ok := trainConfigFlags[ce.Field]; ok {
			return usagef("--%s must be %s, got %v", f, flagTerms.Replace(ce.Want), ce.Value)
		}
	}
	return usagef("%v", err) // a --config file's field without a flag (min_lr_frac, schedule_steps)
}

// distillPhaseHook, when not nil, is called at each phase boundary of distill before it
// checks for an interrupt (tests use it to send a signal at a known point).
var distillPhaseHook func(phase string)

// distill runs (or resumes) the distillation described by s into out. SIGINT or SIGTERM
// at any point stops it at the next phase boundary, progress callback or step, and it
// returns an interruptedError.
func distill(s distillSettings, out string, res *resumePoint, opts distillOptions) error {
	resumed := res != nil
	var studentFile *train.FileDigest
	if resumed {
		studentFile = res.ck.Meta.Student
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var sigNum atomic.Int32
	var training atomic.Bool
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs) // a second Ctrl-C ends the process at once
			if n, ok := sig.(syscall.Signal); ok {
				sigNum.Store(int32(n))
			}
			cancel()
			if training.Load() {
				fmt.Fprintf(os.Stderr, "\nstopping after the current window group or step (a checkpoint follows once training has started; Ctrl-C again to abort without one)\n")
			} else {
				fmt.Fprintf(os.Stderr, "\nstopping before training (Ctrl-C again to abort at once)\n")
			}
		case <-ctx.Done():
		}
	}()
	interrupted := func() error {
		sig := syscall.Signal(sigNum.Load())
		if sig == 0 {
			sig = syscall.SIGINT
		}
		return interruptedError{sig}
	}
	notTrained := func() error {
		fmt.Fprintf(os.Stderr, "interrupted before training started: nothing was trained yet\n")
		return interrupted()
	}
	phase := func(name string) error {
		if distillPhaseHook != nil {
			distillPhaseHook(name)
		}
		if ctx.Err() != nil {
			return notTrained()
		}
		return nil
	}

	fmt.Printf("output directory: %s\n", out)
	teacherModel, err := openModel(s.Teacher)
	if err != nil {
		return err
	}
	closeTeacher := true
	defer func() {
		if closeTeacher {
			teacherModel.Close()
		}
	}()
	if err := phase("tokenizer"); err != nil {
		return err
	}

	// Token streams.
	raw, err := tokenizerJSON(s.Tokenizer, s.Teacher, &teacherModel.Config)
	if err != nil {
		return err
	}
	tok, err := tokenizer.FromJSON(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", tokenizerName(s.Tokenizer), err)
	}
	if tok.VocabSize() > teacherModel.Config.VocabSize {
		return fmt.Errorf("tokenizer has %d tokens but the teacher's vocab_size is %d", tok.VocabSize(), teacherModel.Config.VocabSize)
	}
	var corpus *data.Corpus
	what := "the Go standard library (model card split)"
	if s.TrainFiles != nil {
		corpus, err = data.FilesCorpus(s.TrainFiles, s.EvalFiles)
		what = fmt.Sprintf("%d training and %d held-out files", len(s.TrainFiles), len(s.EvalFiles))
	} else {
		corpus, err = data.StdlibCorpus()
	}
	if err != nil {
		return err
	}
	if err := phase("corpus"); err != nil {
		return err
	}
	t0 := time.Now()
	trainIDs, err := corpus.Tokens(tok, data.Train, train.TokenCacheDir())
	if err != nil {
		return err
	}
	if err := phase("corpus"); err != nil {
		return err
	}
	heldOut, err := corpus.Tokens(tok, data.HeldOut, train.TokenCacheDir())
	if err != nil {
		return err
	}
	reuse := res != nil && res.reports != nil
	if err := phase(map[bool]string{false: "compress", true: "reuse-student"}[reuse]); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "corpus: %s: %d training and %d held-out tokens (%.1fs)\n", what, len(trainIDs), len(heldOut), time.Since(t0).Seconds())

	// Compression, unless the run's compressed student is reused (checked by loadResumePoint).
	var studentModel *cmf.Model
	var reports []compress.TensorReport
	if reuse {
		reports = res.reports
		fmt.Fprintf(os.Stderr, "student: reusing %s (size and SHA-256 match the checkpoint; no compression)\n", filepath.Join(out, compressedStudentFile))
	} else {
		pm, err := compress.ParsePathMode(s.Paths)
		if err != nil {
			return usagef("--%v", err)
		}
		fmt.Fprintf(os.Stderr, "compressing %s at %g bits/weight, paths %s\n", modelName(s.Teacher), s.BPW, pm)
		bar := train.NewProgress(os.Stderr, "compress")
		var barMu sync.Mutex
		t0 = time.Now()
		// compress.Model cannot be cancelled: it runs in a goroutine that an interrupt leaves behind
		// (the process ends right after; the teacher stays open for it).
		type compressed struct {
			m   *cmf.Model
			r   []compress.TensorReport
			err error
		}
		done := make(chan compressed, 1)
		go func() {
			m, r, err := compress.Model(teacherModel, distillCompressOptions(s),
				func(done, total int, name string) {
					barMu.Lock()
					defer barMu.Unlock()
					if ctx.Err() != nil {
						return
					}
					bar.Update(done, total, name)
				})
			done <- compressed{m, r, err}
		}()
		var cres compressed
		select {
		case cres = <-done:
		case <-ctx.Done():
			closeTeacher = false
		}
		barMu.Lock()
		bar.Finish("")
		barMu.Unlock()
		if err := phase("compressed"); err != nil {
			return err
		}
		studentModel, reports, err = cres.m, cres.r, cres.err
		if err != nil {
			return err
		}
		bpwGot := compress.OverallBitsPerWeight(reports)
		fmt.Fprintf(os.Stderr, "compressed %d tensors to %.4f bits/weight (%.1fs)\n", len(reports), bpwGot, time.Since(t0).Seconds())
		bpwMissWarning(s.BPW, bpwGot)
		// The student is trained from the file (a new run and its resume read the same bytes).
		digest, err := saveCompressedStudent(out, studentModel, reports, res)
		if err != nil {
			return err
		}
		studentFile = &digest
	}
	bpwGot := compress.OverallBitsPerWeight(reports)
	studentModel, err = cmf.Open(filepath.Join(out, compressedStudentFile))
	if err != nil {
		return err
	}
	defer studentModel.Close()

	// GPU.
	if err := phase("gpu"); err != nil {
		return err
	}
	dev, err := openDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	if !resumed && s.Provenance != nil {
		s.Provenance.SetDevice(dev)
		if err := writeDistillSettings(out, s); err != nil {
			return err
		}
	}
	var teacherOpts []nvgkit.LoadOption
	if opts.streamTeacher {
		teacherOpts = append(teacherOpts, nvgkit.StreamLayers())
	}
	// The student first: a resumed run checks it against the checkpoint before the teacher
	// is loaded.
	student, err := nvgkit.LoadNet(dev, studentModel, nvgkit.Student)
	if err != nil {
		return err
	}
	defer student.Release()
	if resumed {
		if err := res.ck.CheckStudent(student); err != nil {
			return fmt.Errorf("--resume %s: %w", res.path, err)
		}
	}
	teacher, err := nvgkit.LoadNet(dev, teacherModel, nvgkit.Teacher, teacherOpts...)
	if err != nil {
		return err
	}
	defer teacher.Release()
	var tr *train.Trainer
	if err := phase("trainer"); err != nil {
		return err
	}
	if resumed {
		tr, err = train.ResumeCheckpoint(teacher, student, trainIDs, heldOut, res.ck, res.path, train.WithComm(opts.comm))
	} else {
		tr, err = train.NewTrainer(teacher, student, trainIDs, heldOut, s.Config, train.WithComm(opts.comm))
	}
	if err != nil {
		return err
	}
	defer tr.Close()
	tr.BitsPerWeight = bpwGot
	tr.StudentFile = studentFile
	tr.TeacherID = modelName(s.Teacher)
	if tr.Rank() == 0 { // the other ranks of a data-parallel run train silently
		tr.Log = os.Stderr
		tr.Progress = train.NewProgress(os.Stderr, "distill")
	}
	cfg := tr.Config
	fmt.Fprintf(os.Stderr, "distilling: %d steps × %d windows × %d tokens, top-%d, lr %g, held-out %d windows × %d tokens\n",
		cfg.Steps, cfg.NB, cfg.T, cfg.K, cfg.LR, cfg.EvalWindows, cfg.T)
	if resumed {
		fmt.Fprintf(os.Stderr, "resuming after step %d of %d\n", tr.Step(), cfg.Steps)
	}

	if err := phase("train"); err != nil {
		return err
	}
	if opts.memLog != "" {
		f, ml, err := openMemLog(opts.memLog, dev, cfg.NB*cfg.T)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := ml.Sample(tr.Step()); err != nil {
			return err
		}
		failed := false
		tr.OnStep = func(i train.StepInfo) {
			if failed || (i.Step%opts.memEvery != 0 && i.Step != cfg.Steps) {
				return
			}
			if _, err := ml.Sample(i.Step); err != nil {
				failed = true // a full disk must not stop the training: say so once
				fmt.Fprintf(os.Stderr, "\n%v; memory logging stopped\n", err)
			}
		}
		fmt.Fprintf(os.Stderr, "memory log: %s (every %d steps)\n", opts.memLog, opts.memEvery)
	}
	training.Store(tr.Step() < cfg.Steps)
	rep, err := tr.Run(ctx)
	if errors.Is(err, train.ErrInterrupted) {
		if hasCheckpoint(out) {
			fmt.Fprintf(os.Stderr, "interrupted after step %d of %d: checkpoint in %s; continue with: nvg distill --resume %s\n", tr.Step(), cfg.Steps, out, out)
			return interrupted()
		}
		return notTrained()
	}
	if err != nil {
		return err
	}
	if tr.Rank() != 0 {
		return nil // rank 0 exports
	}

	// Outputs: the student, the report, the plots.
	exported, err := nvgkit.Export(student, studentModel)
	if err != nil {
		return err
	}
	studentPath := filepath.Join(out, "student.cmf")
	if err := cmf.WriteCMF(studentPath, exported); err != nil {
		return err
	}
	prov := train.NewProvenance(dev, distillCompressOptions(s).Products)
	rep.Provenance = &prov
	if err := rep.Save(filepath.Join(out, "report.json")); err != nil {
		return err
	}
	if err := writeDistillPlots(out, tr, student, reports); err != nil {
		return err
	}
	fmt.Printf("teacher      held-out perplexity %10.3f\n", rep.TeacherPPL)
	fmt.Printf("compressed   held-out perplexity %10.3f  (%.4f bits/weight, before training)\n", rep.CompressedPPL, bpwGot)
	fmt.Printf("distilled    held-out perplexity %10.3f  (%s)\n", rep.DistilledPPL, rep.Exported)
	// rep.WallSeconds sums the training of all sessions of a resumed run; this process's
	// total covers only this session, so it is labelled as such.
	times := fmt.Sprintf("training %.0fs, total %.0fs", rep.WallSeconds, time.Since(start).Seconds())
	if resumed {
		times = fmt.Sprintf("training %.0fs over all sessions; this session %.0fs in all", rep.WallSeconds, time.Since(start).Seconds())
	}
	fmt.Printf("log-perplexity gap closed: %.1f %%  (%d steps, %d tokens, %d skipped; %s)\n",
		100*rep.GapClosed, rep.Steps, rep.Tokens, rep.Skipped, times)
	fmt.Printf("wrote %s, %s and plots in %s\n", studentPath, filepath.Join(out, "report.json"), out)
	return nil
}

// writeDistillPlots writes training.png, grad_norms.png, metric_hist.png,
// reconstruction.png and, for a --train-signs run, sign_flips.png into out.
// The training curves are drawn from the run's metrics.jsonl (all sessions of a resumed run).
func writeDistillPlots(out string, tr *train.Trainer, student *nvgkit.Net, reports []compress.TensorReport) error {
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		return err
	}
	steps, loss, es, ep, tppl := train.TrainingSeries(recs)
	fig, err := ui.PlotTraining(ui.TrainingCurves{Steps: steps, Loss: loss, EvalSteps: es, EvalPPL: ep, TeacherPPL: tppl})
	if err != nil {
		return err
	}
	if err := ui.SavePlot(filepath.Join(out, "training.png"), fig, 900, 700); err != nil {
		return err
	}
	if fs, flips := train.SignFlipSeries(recs); len(fs) > 0 {
		p, err := ui.PlotSignFlips(fs, flips)
		if err != nil {
			return err
		}
		if err := ui.SavePlot(filepath.Join(out, "sign_flips.png"), p, 1000, 600); err != nil {
			return err
		}
	}
	if layers, kinds, norms, err := tr.LayerGradNorms(); err == nil {
		p, err := ui.PlotLayerGradNorms(layers, kinds, norms)
		if err != nil {
			return err
		}
		p.Title.Text = "Gradient L2 norm per layer (last step)"
		if err := ui.SavePlot(filepath.Join(out, "grad_norms.png"), p, 1000, 600); err != nil {
			return err
		}
	}
	params, err := nvgkit.Params(student)
	if err != nil {
		return err
	}
	var vals []float64
	for name, v := range params {
		if i := strings.LastIndex(name, ".p"); i < 0 || !(strings.HasSuffix(name, ".h") || strings.HasSuffix(name, ".l") || strings.HasSuffix(name, ".g")) {
			continue
		}
		for _, x := range v {
			if x != 0 {
				vals = append(vals, math.Log10(math.Abs(float64(x))))
			}
		}
	}
	if len(vals) > 0 {
		p, err := ui.PlotHistogram("BLR metric scales after distillation, log10 |h|, |ℓ|, |g|", vals, 80)
		if err != nil {
			return err
		}
		if err := ui.SavePlot(filepath.Join(out, "metric_hist.png"), p, 900, 600); err != nil {
			return err
		}
	}
	p, err := ui.PlotReconstruction(train.SessionReports(reports))
	if err != nil {
		return err
	}
	return ui.SavePlot(filepath.Join(out, "reconstruction.png"), p, 900, 600)
}
