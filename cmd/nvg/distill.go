package main

import (
	"context"
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
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
)

func init() {
	register(&command{
		name:    "distill",
		summary: "compress a teacher to ~1 bit/weight and distil the student against it (default: the embedded tiny teacher on the Go standard library)",
		usage:   "[--teacher MODEL] [--train-files a.go,…] [--eval-files b.go,…] [--bpw 1] [--paths auto] [--steps N] [--nb N] [--windows N] [--t N] [--k 32] [--lr X] [--warmup N] [--eval-every N] [--eval-windows N] [--seed N] [--clip X] [--checkpoint-every N] [--keep N] [--keep-final] [--keep-activations] [--activation-budget-mib 1024] [--train-signs [--sign-…] [--finish-steps N]] [--block-steps N] [--init refine|dual-svid [--calib-windows 16] [--calib-t 256] [--calib-gram-max 4096]] [--hidden-loss mse|cosine|none [--hidden-weight 1] [--hidden-layers every:4|all|3,7]] [--config RUN.json] [--tokenizer F] [-o DIR] [--topk-file F] [--stream-teacher] [--mem-log F.csv [--mem-log-every N]] | --resume DIR [--steps N] [--keep N] [--mem-log …] [--stream-teacher] [--keep-activations] [--activation-budget-mib N]",
		run:     runDistill,
	})
}

// maxStepTokens bounds nb·t before any work: every per-token GPU buffer is indexed in 32 bits,
// so rows × hidden_size (≥ 512 for any real model) must stay below 2³¹.
const maxStepTokens = 1 << 22

// distillOptions are how a run is carried out, not what it computes: they may differ
// between a run and its --resume.
type distillOptions struct {
	streamTeacher bool       // the teacher's layers streamed (train.Env.StreamTeacher)
	memLog        string     // CSV file of train.MemLogger samples ("" = none)
	memEvery      int        // steps between samples
	comm          train.Comm // the data-parallel ranks (startMPI; SingleProcess alone)
}

func runDistill(args []string) error {
	c := commands["distill"]
	f, cli, set, err := parseDistillFlags(c, args)
	if err != nil {
		return err
	}
	mr, err := startMPI()
	if err != nil {
		return err
	}
	defer mr.finish()
	cli.opts.comm = mr.comm
	if err := checkMemLogFlags(cli.opts); err != nil {
		return err
	}
	if cli.resume != "" {
		return resumeDistill(f, cli, set)
	}
	return newDistill(f, cli.opts)
}

// newDistill checks a new run's settings, makes its output directory and its distill.json,
// and runs it; a run that fails before its first checkpoint leaves no output behind.
func newDistill(f train.RunFile, opts distillOptions) error {
	if err := checkNewRun(&f.Setup); err != nil {
		return err
	}
	out, err := newRunDir(f.Train.OutDir, opts.comm)
	if err != nil {
		return err
	}
	// Every path of the settings is made absolute: --resume may run from another directory
	// and must find the same teacher, data and output (never the current directory's).
	s := &f.Setup
	for _, l := range [][]string{s.TrainFiles, s.EvalFiles} {
		for i := range l {
			l[i] = abs(l[i])
		}
	}
	if s.Train.TopKFile == "" {
		s.Train.TopKFile = filepath.Join(out, train.TopKFileName)
	}
	s.Teacher, s.Tokenizer, s.Train.OutDir, s.Train.TopKFile = abs(s.Teacher), abs(s.Tokenizer), abs(out), abs(s.Train.TopKFile)
	f.Started = time.Now().UTC().Format(time.RFC3339)
	f.Provenance = runProvenance(nil, f.Setup)
	created := !exists(out)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// distill.json: the effective settings (defaults, --config file, flags), which
	// --resume reads and --config accepts.
	err = train.WriteRunFile(out, f)
	if err == nil {
		err = distill(f, out, nil, opts)
	}
	if err != nil && !train.HasCheckpoint(out) {
		// Nothing to resume: remove what this run wrote (the directory was missing or
		// empty), so that the same command can be run again.
		removeRunOutput(out, created)
	}
	return err
}

// runProvenance is the provenance of a run of s on dev (nil: before the device is open).
func runProvenance(dev *gpu.Device, s train.Setup) *train.Provenance {
	opts, _ := s.Compression()
	p := train.NewProvenance(dev, opts.Products)
	return &p
}

// abs is p made absolute ("" stays "").
func abs(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// checkNewRun checks what TrainConfig.Validate leaves to its caller and the files a new run
// reads, naming the flags; the corpus sources are expanded (distill.json keeps the files, so
// --resume reads the same corpus).
func checkNewRun(s *train.Setup) error {
	tc := s.Train
	switch {
	case !(s.BitsPerWeight > 0 && s.BitsPerWeight <= 32):
		return usagef("--bpw must be in (0, 32], got %g", s.BitsPerWeight)
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
	if err := tc.CheckMemory(); err != nil {
		return trainConfigUsage(err)
	}
	if int64(tc.NB)*int64(tc.T) > maxStepTokens {
		return usagef("--nb × --t = %d × %d tokens per step exceeds %d: GPU buffers are indexed in 32 bits (rows × hidden_size < 2³¹); use fewer or shorter windows",
			tc.NB, tc.T, maxStepTokens)
	}
	if _, err := compress.ParsePathMode(s.Paths); err != nil {
		return usagef("--%v", err)
	}
	var err error
	if s.TrainFiles, err = expandCorpus("train-files", s.TrainFiles); err != nil {
		return err
	}
	if s.EvalFiles, err = expandCorpus("eval-files", s.EvalFiles); err != nil {
		return err
	}
	if (s.TrainFiles == nil) != (s.EvalFiles == nil) {
		return usagef("--train-files and --eval-files go together")
	}
	if both := sharedFiles(s.TrainFiles, s.EvalFiles); len(both) > 0 {
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
	return nil
}

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

// newRunDir returns the output directory of a new run (out, else out/distill-<UTC time> of
// rank 0's clock; a rank beyond 0 its own, rankDir), refusing a file or a non-empty
// directory.
func newRunDir(out string, comm train.Comm) (string, error) {
	if out == "" {
		out = filepath.Join("out", "distill-"+time.Now().UTC().Format("20060102-150405"))
		var err error
		if out, err = bcastString(comm, out); err != nil { // rank 0's clock names the run
			return "", err
		}
	}
	out = rankDir(out, comm.Rank())
	if st, err := os.Stat(out); err == nil && !st.IsDir() {
		return "", usagef("-o %s is a file; the output is a directory", out)
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		if train.HasCheckpoint(out) {
			return "", usagef("output directory %s is not empty (pick another -o, or --resume it)", out)
		}
		return "", usagef("output directory %s is not empty and holds no checkpoint to resume (a run stopped before its first one?): remove it or pick another -o", out)
	}
	return out, nil
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
	"ClipNorm": "clip", "EvalWindows": "eval-windows", "Keep": "keep", "Warmup": "warmup", "EvalEvery": "eval-every",
	"CheckpointEvery": "checkpoint-every", "Seed": "seed", "KeepFinal": "keep-final", "TrainSigns": "train-signs", "FinishSteps": "finish-steps",
	"HiddenLoss": "hidden-loss", "HiddenWeight": "hidden-weight", "HiddenLayers": "hidden-layers", "BlockSteps": "block-steps"}

// flagTerms rewrites the TrainConfig field names in a TrainConfigError's range as flags.
var flagTerms = strings.NewReplacer("Steps·NB", "--steps × --nb", "NB =", "--nb =", "T =", "--t =", "K =", "--k =",
	"T·K", "--t × --k", "(Windows)", "(--windows N)", "TrainSigns", "--train-signs",
	"FinishSteps =", "--finish-steps =", "BlockSteps steps", "--block-steps steps", "Steps =", "--steps =", "out of Steps", "out of --steps", `or "" (off)`, "or none (off)")

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

// interrupt stops a run on SIGINT or SIGTERM: it cancels ctx and says what happens next.
type interrupt struct {
	ctx      context.Context
	cancel   context.CancelFunc
	sig      atomic.Int32
	training atomic.Bool
}

// catchInterrupts starts an interrupt; stop ends it.
func catchInterrupts() (in *interrupt, stop func()) {
	in = &interrupt{}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs) // a second Ctrl-C ends the process at once
			if n, ok := sig.(syscall.Signal); ok {
				in.sig.Store(int32(n))
			}
			in.cancel()
			if in.training.Load() {
				fmt.Fprintf(os.Stderr, "\nstopping after the current window group or step (a checkpoint follows once training has started; Ctrl-C again to abort without one)\n")
			} else {
				fmt.Fprintf(os.Stderr, "\nstopping before training (Ctrl-C again to abort at once)\n")
			}
		case <-in.ctx.Done():
		}
	}()
	return in, func() { signal.Stop(sigs); in.cancel() }
}

// err is the interruptedError of the signal that stopped the run (SIGINT if none).
func (in *interrupt) err() error {
	sig := syscall.Signal(in.sig.Load())
	if sig == 0 {
		sig = syscall.SIGINT
	}
	return interruptedError{sig}
}

// notTrained says that nothing was trained and returns the interruptedError.
func (in *interrupt) notTrained() error {
	fmt.Fprintf(os.Stderr, "interrupted before training started: nothing was trained yet\n")
	return in.err()
}

// logf prints a line of the run's log to stderr.
func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

// bars shows train.Env.Progress's calibration and compression phases as progress bars on
// stderr (one after the other).
func bars() func(phase string, done, total int, status string) {
	var mu sync.Mutex
	var bar train.Progress
	return func(phase string, done, total int, status string) {
		if phase != "compress" && phase != "calibrate" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = train.NewProgress(os.Stderr, phase)
		}
		bar.Update(done, total, status)
		if done == total {
			bar.Finish("")
			bar = nil
		}
	}
}

// distill runs (or resumes) the run of f into out: it assembles it (train.Assemble), trains
// it and writes the outputs. SIGINT or SIGTERM at any point stops it at the next phase
// boundary, progress callback or step, and it returns an interruptedError.
func distill(f train.RunFile, out string, res *train.ResumePoint, opts distillOptions) error {
	start := time.Now()
	in, stop := catchInterrupts()
	defer stop()
	run, err := train.Assemble(in.ctx, f.Setup, train.Env{OpenDevice: openDevice, Log: logf, Progress: bars(), Phase: distillPhaseHook,
		TokenCache: train.TokenCacheDir(), Comm: opts.comm, StreamTeacher: opts.streamTeacher, RunDir: out, Resume: res})
	if errors.Is(err, train.ErrInterrupted) {
		return in.notTrained()
	}
	if ce := (*train.TrainConfigError)(nil); errors.As(err, &ce) {
		return trainConfigUsage(err) // a setting out of range once the model is known (--block-steps)
	}
	if err != nil {
		return err
	}
	defer run.Close()
	// Named once the models are read: a run that fails before leaves no directory behind.
	fmt.Printf("output directory: %s\n", out)
	if res == nil && f.Provenance != nil {
		f.Provenance.SetDevice(run.Device)
		if err := train.WriteRunFile(out, f); err != nil {
			return err
		}
	}
	tr := run.Trainer
	if tr.Rank() == 0 { // the other ranks of a data-parallel run train silently
		tr.Log = os.Stderr
		tr.Progress = train.NewProgress(os.Stderr, "distill")
	}
	cfg := tr.Config
	fmt.Fprintf(os.Stderr, "distilling: %d steps × %d windows × %d tokens, top-%d, lr %g, held-out %d windows × %d tokens\n",
		cfg.Steps, cfg.NB, cfg.T, cfg.K, cfg.LR, cfg.EvalWindows, cfg.T)
	if ps := cfg.Phases(); len(ps) > 1 {
		fmt.Fprintf(os.Stderr, "phases: %s\n", phaseList(ps))
	}
	if hasInitErrors(run.Reports) && tr.Rank() == 0 {
		fmt.Println("reconstruction error per layer (mean over its tensors; the refinement's Dual-SVID start and the student):")
		if err := ui.WriteLayerReconstruction(os.Stdout, train.SessionReports(run.Reports)); err != nil {
			return err
		}
	}
	if res != nil {
		fmt.Fprintf(os.Stderr, "resuming after step %d of %d\n", tr.Step(), cfg.Steps)
	}
	if distillPhaseHook != nil {
		distillPhaseHook("train")
	}
	if in.ctx.Err() != nil {
		return in.notTrained()
	}
	rep, err := trainRun(run, out, opts, in)
	if err != nil || tr.Rank() != 0 {
		return err // rank 0 exports
	}
	return writeOutputs(run, out, rep, start, res != nil)
}

// trainRun trains run to its end (with the memory log when asked) and returns its report; an
// interrupt returns the interruptedError after saying how to continue.
func trainRun(run *train.Run, out string, opts distillOptions, in *interrupt) (*train.Report, error) {
	tr, cfg := run.Trainer, run.Trainer.Config
	if opts.memLog != "" {
		f, err := startMemLog(opts, run.Device, tr)
		if err != nil {
			return nil, err
		}
		defer f.Close()
	}
	in.training.Store(tr.Step() < cfg.Steps)
	rep, err := tr.Run(in.ctx)
	if errors.Is(err, train.ErrInterrupted) {
		if train.HasCheckpoint(out) {
			fmt.Fprintf(os.Stderr, "interrupted after step %d of %d: checkpoint in %s; continue with: nvg distill --resume %s\n", tr.Step(), cfg.Steps, out, out)
			return nil, in.err()
		}
		return nil, in.notTrained()
	}
	return rep, err
}

// writeOutputs writes the student, the report and the plots of a finished run and prints its
// summary.
func writeOutputs(run *train.Run, out string, rep *train.Report, start time.Time, resumed bool) error {
	exported, err := nvgkit.Export(run.Student, run.StudentModel)
	if err != nil {
		return err
	}
	studentPath := filepath.Join(out, "student.cmf")
	if err := cmf.WriteCMF(studentPath, exported); err != nil {
		return err
	}
	rep.Provenance = runProvenance(run.Device, run.Setup)
	if err := rep.Save(filepath.Join(out, "report.json")); err != nil {
		return err
	}
	if err := writeDistillPlots(out, run.Trainer, run.Student, run.Reports); err != nil {
		return err
	}
	fmt.Printf("teacher      held-out perplexity %10.3f\n", rep.TeacherPPL)
	fmt.Printf("compressed   held-out perplexity %10.3f  (%.4f bits/weight, before training)\n", rep.CompressedPPL, run.BitsPerWeight)
	fmt.Printf("distilled    held-out perplexity %10.3f  (%s)\n", rep.DistilledPPL, rep.Exported)
	// rep.WallSeconds sums the training of all sessions of a resumed run; this process's
	// total covers only this session, so it is labelled as such.
	times := fmt.Sprintf("training %.0fs, total %.0fs", rep.WallSeconds, time.Since(start).Seconds())
	if resumed {
		times = fmt.Sprintf("training %.0fs over all sessions; this session %.0fs in all", rep.WallSeconds, time.Since(start).Seconds())
	}
	fmt.Printf("log-perplexity gap closed: %.1f %%  (%d steps, %d tokens, %d skipped; %s)\n",
		100*rep.GapClosed, rep.Steps, rep.Tokens, rep.Skipped, times)
	if len(rep.Phases) > 1 {
		fmt.Printf("phases: %s\n", phaseReportList(rep.Phases))
	}
	fmt.Printf("wrote %s, %s and plots in %s\n", studentPath, filepath.Join(out, "report.json"), out)
	return nil
}

// checkMemLogFlags checks --mem-log and --mem-log-every before any work.
func checkMemLogFlags(o distillOptions) error {
	if o.memEvery < 1 {
		return usagef("--mem-log-every must be ≥ 1, got %d", o.memEvery)
	}
	if o.memLog == "" {
		return nil
	}
	if err := checkMemLog(o.memLog); err != nil {
		return err
	}
	if st, err := os.Stat(filepath.Dir(o.memLog)); err != nil || !st.IsDir() {
		return usagef("--mem-log %s: directory %s does not exist", o.memLog, filepath.Dir(o.memLog))
	}
	return nil
}

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

// startMemLog opens (appending) the memory log of the run tr on dev, takes its first sample
// and samples it every o.memEvery steps and after the last (Trainer.OnStep); a new or empty
// file gets the header line first.
func startMemLog(o distillOptions, dev *gpu.Device, tr *train.Trainer) (*os.File, error) {
	f, err := os.OpenFile(o.memLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--mem-log: %w", err)
	}
	st, err := f.Stat()
	var ml *train.MemLogger
	if err == nil {
		ml, err = train.NewMemLogger(f, dev, tr.Config.NB*tr.Config.T, st.Size() == 0)
	}
	if err == nil {
		_, err = ml.Sample(tr.Step())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--mem-log %s: %w", o.memLog, err)
	}
	failed, steps := false, tr.Config.Steps
	tr.OnStep = func(i train.StepInfo) {
		if failed || (i.Step%o.memEvery != 0 && i.Step != steps) {
			return
		}
		if _, err := ml.Sample(i.Step); err != nil {
			failed = true // a full disk must not stop the training: say so once
			fmt.Fprintf(os.Stderr, "\n%v; memory logging stopped\n", err)
		}
	}
	fmt.Fprintf(os.Stderr, "memory log: %s (every %d steps)\n", o.memLog, o.memEvery)
	return f, nil
}

// writeDistillPlots writes training.png (its phases marked), grad_norms.png,
// metric_hist.png, reconstruction.png, reconstruction_layers.png and, for a --train-signs
// run, sign_flips.png into out.
// The training curves are drawn from the run's metrics.jsonl (all sessions of a resumed run).
func writeDistillPlots(out string, tr *train.Trainer, student *nvgkit.Net, reports []compress.TensorReport) error {
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		return err
	}
	steps, loss, es, ep, tppl := train.TrainingSeries(recs)
	fig, err := ui.PlotTraining(ui.TrainingCurves{Steps: steps, Loss: loss, EvalSteps: es, EvalPPL: ep, TeacherPPL: tppl, Phases: train.PhaseSeries(recs)})
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
	if err := writeMetricHist(out, student); err != nil {
		return err
	}
	p, err := ui.PlotReconstruction(train.SessionReports(reports))
	if err != nil {
		return err
	}
	if err := ui.SavePlot(filepath.Join(out, "reconstruction.png"), p, 900, 600); err != nil {
		return err
	}
	lp, err := ui.PlotLayerReconstruction(train.SessionReports(reports))
	if err != nil {
		return err
	}
	return ui.SavePlot(filepath.Join(out, "reconstruction_layers.png"), lp, 900, 600)
}

// hasInitErrors reports whether a compression report has the errors of InitRefine's start
// (a refined student).
func hasInitErrors(reports []compress.TensorReport) bool {
	for _, r := range reports {
		if r.InitRelErr != 0 {
			return true
		}
	}
	return false
}

// phaseList formats a run's phases: "block 0 steps 1…4, …, kl steps 33…500, finish steps
// 501…600 (signs frozen)".
func phaseList(ps []train.Phase) string {
	var parts []string
	for _, p := range ps {
		s := fmt.Sprintf("%s steps %d…%d", p.Name(), p.First, p.Last)
		if p.Kind == train.PhaseFinish {
			s += " (signs frozen)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// phaseReportList formats a report's phases: "block 0 4 steps (131072 tokens), …, kl 468
// steps (15335424 tokens), finish 100 steps (3276800 tokens)".
func phaseReportList(ps []train.PhaseReport) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %d steps (%d tokens)", p.Name(), p.StepsDone, p.Tokens))
	}
	return strings.Join(parts, ", ")
}

// writeMetricHist writes metric_hist.png: the histogram of log10 |h|, |ℓ|, |g| of the
// student's BLR metric scales.
func writeMetricHist(out string, student *nvgkit.Net) error {
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
	if len(vals) == 0 {
		return nil
	}
	p, err := ui.PlotHistogram("BLR metric scales after distillation, log10 |h|, |ℓ|, |g|", vals, 80)
	if err != nil {
		return err
	}
	return ui.SavePlot(filepath.Join(out, "metric_hist.png"), p, 900, 600)
}
