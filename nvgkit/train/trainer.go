package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
)

// ErrInterrupted is returned (wrapped with the context's error) by Trainer.Run when its
// context was cancelled between steps; the checkpoint (when OutDir is set) was written first.
var ErrInterrupted = errors.New("nvgkit: training interrupted")

// Trainer distils a Student net against a Teacher net (DESIGN.md §6) with the step
// primitives: per step ZeroGrads, Step on NB windows against the teacher's cached top-k,
// ClipGrads, Adam at LRAt(step) with Config's optimizer settings. The run's training windows — Config.Windows (0:
// Steps·NB) windows of T+1 tokens drawn by a data.Sampler seeded with Config.Seed, used in
// order and cycled when fewer than Steps·NB — are drawn once at NewTrainer, and
// the teacher's top-k for all of them is computed once (Prepare) and held in host memory
// (4·T·(3K+1) bytes per window) or a TopKCache file. A step whose loss or gradient norm is
// not finite is skipped: its gradients are cleared, no update is made, and it is counted.
// The student is evaluated on fixed held-out windows (NLL → perplexity) before the first
// step, every EvalEvery steps and after the last; the snapshot with the lowest perplexity is
// kept and restored at the end (unless Config.KeepFinal). Checkpoints (every
// CheckpointEvery steps, after the last and on interruption; CheckpointName(step) in OutDir,
// the Config.Keep latest kept) hold everything Resume needs to continue with the same
// windows and the same losses. Every step and evaluation is logged as a MetricsRecord line
// to OutDir's metrics.jsonl (MetricsFile; cut back to the checkpoint's step on Resume, so a
// resumed run appends without duplicates) and to every writer given to AddMetricsWriter.
//
// A Trainer owns two works (student and teacher, NB windows of T tokens each); Close
// releases them. It is driven by one goroutine.
type Trainer struct {
	// Config is the run's configuration, with Windows and CheckpointEvery resolved (their 0
	// replaced by the number it stands for). Do not change it after NewTrainer.
	Config TrainConfig
	// OnStep, when not nil, is called after every step (from Run's goroutine).
	OnStep func(StepInfo)
	// OnGradients, when not nil, is called on every rank after step s's gradients are
	// complete (summed over the ranks of a data-parallel run) and before clipping and Adam,
	// with the run's Comm: the point where state derived from the gradients (sign-training
	// scores) is kept consistent across ranks (DESIGN.md "Data parallelism"). An error stops
	// the run.
	OnGradients func(c Comm, s int) error
	// Progress, when not nil, shows the teacher pass and the steps with the loss and ETA
	// (see NewProgress).
	Progress Progress
	// Log, when not nil, receives one line per phase (teacher pass, evaluations, checkpoints);
	// a Progress with a Clear method (the terminal bar) is cleared before each line.
	Log io.Writer
	// BitsPerWeight of the student, copied into the report (0: unknown).
	BitsPerWeight float64
	// TeacherID names the teacher's weights in the key of the top-k file (TopKKey; nvg
	// distill sets the teacher's path): a file made with another teacher is refused.
	TeacherID string
	// StudentFile, when not nil, names the compressed student file the run started from; it
	// is recorded in every checkpoint (CheckpointMeta.Student) for a resume to reuse.
	StudentFile *FileDigest
	// Compression, when not nil, is how the student was compressed (Setup's settings, set by
	// Assemble); it is recorded in every checkpoint (CheckpointMeta.Compression), which a
	// resume compares with its Setup.
	Compression *CompressionKey
	// Setup, when not nil, is the run's settings (Assemble sets it): its fields but Train are
	// recorded in every checkpoint (CheckpointMeta.Setup) for a resume to compare.
	Setup *Setup

	teacher, student *nvgkit.Net
	sWork, tWork     *nvgkit.Work
	windows          [][]int // Steps·NB windows of T+1 tokens
	eval             [][]int // EvalWindows held-out windows of T+1 tokens
	cache            *TopKCache
	st               CheckpointMeta
	best             *nvgkit.TrainableSnapshot
	lastGrads        map[string][]float32
	interrupted      bool
	savedPath        string // the last checkpoint written, and after which step
	savedStep        int
	metrics          []*metricsSink // metrics.jsonl during Run (first), then AddMetricsWriter's
	wallBase         float64        // WallSeconds when Run started, and when
	wallStart        time.Time
	notes            []string          // Resume's warnings and the activations line, logged when Run starts
	activations      string            // what the student's step keeps for its backward (Activations)
	comm             Comm              // the data-parallel ranks (WithComm; SingleProcess)
	hidden           nvgkit.HiddenLoss // the hidden-state term (Config.HiddenLoss; off: zero)
	hcache           *HiddenCache      // the teacher's hidden states of the windows (with hidden)
	blocks           *blockTargets     // the teacher's layer outputs of the block steps left (BlockSteps)
	micro            int               // micro-batches per rank (WithMicroBatches; 1)
}

// NewTrainer checks cfg (Validate; start from DefaultTrainConfig), draws the run's training windows from train
// (a token stream, data.Sampler with cfg.Seed) and the held-out windows from heldOut
// (data.EvalWindows), and allocates the works. teacher must be a Teacher and student a
// Student net of the same architecture and device. opts (WithComm, WithMicroBatches) make
// it one rank of a data-parallel run or split its steps into micro-batches; the works then
// hold NB/(ranks·micro-batches) windows.
//
// Errors: a bad config (Validate, CheckMemory), an NB that the options cannot split evenly, nil or released nets, nets of the wrong kind or of different
// vocabularies or devices, K > vocab, streams too short for one window of T+1 tokens, and
// NewWork's errors.
func NewTrainer(teacher, student *nvgkit.Net, train, heldOut []int, cfg TrainConfig, opts ...Option) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckMemory(); err != nil {
		return nil, err
	}
	cfg = cfg.Resolved()
	if err := teacher.Usable("NewTrainer"); err != nil {
		return nil, err
	}
	if err := student.RequireStudent("NewTrainer"); err != nil {
		return nil, err
	}
	if teacher.Kind != nvgkit.Teacher {
		return nil, fmt.Errorf("train.NewTrainer: the teacher net is a %v", teacher.Kind)
	}
	if teacher.Device() != student.Device() {
		return nil, errors.New("train.NewTrainer: the teacher and the student are on different devices")
	}
	if teacher.Config.VocabSize != student.Config.VocabSize || teacher.Config.HiddenSize != student.Config.HiddenSize {
		return nil, fmt.Errorf("train.NewTrainer: teacher (vocab %d, hidden %d) and student (vocab %d, hidden %d) differ",
			teacher.Config.VocabSize, teacher.Config.HiddenSize, student.Config.VocabSize, student.Config.HiddenSize)
	}
	if err := nvgkit.CheckK("NewTrainer", cfg.K, teacher.Config.VocabSize); err != nil {
		return nil, err
	}
	sampler, err := data.NewSampler(train, cfg.T, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("train.NewTrainer: training stream: %w", err)
	}
	windows := make([][]int, 0, cfg.Windows)
	for range cfg.Windows / cfg.NB {
		w, err := sampler.Sample(cfg.NB)
		if err != nil {
			return nil, err
		}
		windows = append(windows, w...)
	}
	eval, err := data.EvalWindows(heldOut, cfg.EvalWindows, cfg.T, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("train.NewTrainer: held-out stream: %w", err)
	}
	hidden, err := cfg.hiddenLoss(student.Config.NumHiddenLayers)
	if err != nil {
		return nil, err
	}
	if hidden.On() && teacher.Config.NumHiddenLayers != student.Config.NumHiddenLayers {
		return nil, fmt.Errorf("train.NewTrainer: the hidden-state loss matches layer outputs, but the teacher has %d decoder layers and the student %d",
			teacher.Config.NumHiddenLayers, student.Config.NumHiddenLayers)
	}
	if cfg, err = blockLayers(cfg, teacher, student); err != nil {
		return nil, err
	}
	tr := &Trainer{Config: cfg, teacher: teacher, student: student, windows: windows, eval: eval, hidden: hidden}
	tr.st = CheckpointMeta{Version: ckptVersion, Config: cfg, WindowsHash: HashWindows(windows)}
	nbp, err := tr.applyOptions(opts)
	if err != nil {
		return nil, err
	}
	keep, note := activationOptions(cfg, student, nbp)
	tr.notes, tr.activations = append(tr.notes, note), note
	if tr.sWork, err = nvgkit.NewWork(student.Device(), student, nbp, cfg.T, keep...); err != nil {
		return nil, err
	}
	if tr.tWork, err = nvgkit.NewWork(teacher.Device(), teacher, nbp, cfg.T); err != nil {
		tr.sWork.Release()
		return nil, err
	}
	if err := tr.initSigns(); err != nil {
		tr.Close()
		return nil, err
	}
	return tr, nil
}

// blockLayers returns cfg with BlockLayers set to the student's decoder layers when it has a
// block phase (BlockSteps > 0), checked again with them (Validate: the phase must leave a KL
// step). Errors: a BlockLayers set to another count, a teacher with other layers, a
// BlockSteps too large for the layers (a *TrainConfigError naming BlockSteps).
func blockLayers(cfg TrainConfig, teacher, student *nvgkit.Net) (TrainConfig, error) {
	if cfg.BlockSteps == 0 {
		return cfg, nil
	}
	L := student.Config.NumHiddenLayers
	if cfg.BlockLayers != 0 && cfg.BlockLayers != L {
		return cfg, &TrainConfigError{"BlockLayers", cfg.BlockLayers, fmt.Sprintf("0 or the student's %d decoder layers", L)}
	}
	if teacher.Config.NumHiddenLayers != L {
		return cfg, fmt.Errorf("train.NewTrainer: the block-wise reconstruction matches layer outputs, but the teacher has %d decoder layers and the student %d",
			teacher.Config.NumHiddenLayers, L)
	}
	cfg.BlockLayers = L
	return cfg, cfg.Validate()
}

// Resume loads the checkpoint at path — a file, or a directory holding checkpoints, whose
// latest valid one is used (LatestCheckpoint: a newer truncated or corrupt one is passed
// over, and the Trainer's Log says so when Run starts) — and returns ResumeCheckpoint's
// Trainer. Errors: LatestCheckpoint's or LoadCheckpoint's, and ResumeCheckpoint's.
func Resume(teacher, student *nvgkit.Net, train, heldOut []int, path string, opts ...Option) (*Trainer, error) {
	var notes []string
	var ck *Checkpoint
	var err error
	if st, serr := statDir(path); serr == nil && st {
		ck, path, err = LatestCheckpoint(path, func(e error) { notes = append(notes, fmt.Sprintf("warning: %v; using an earlier checkpoint", e)) })
	} else {
		ck, err = LoadCheckpoint(path)
	}
	if err != nil {
		return nil, err
	}
	tr, err := ResumeCheckpoint(teacher, student, train, heldOut, ck, path, opts...)
	if err != nil {
		return nil, err
	}
	tr.notes = append(notes, tr.notes...)
	return tr, nil
}

// ResumeCheckpoint returns a Trainer that continues the run of ck, loaded from path: same
// configuration (OutDir, when set, becomes the directory holding path, so a moved run or
// another working directory never writes elsewhere; a TopKFile that was inside the old
// OutDir moves with it), same remaining windows (drawn again from the seed and checked
// against the checkpoint's hash), the student's trainables and Adam state, the best
// snapshot and the histories. train and heldOut must be the streams of the original run.
// The teacher's top-k is not part of the checkpoint: Run computes it again (the same
// values) unless Config.TopKFile holds it. The student is checked against ck
// (Checkpoint.CheckStudent) before anything else. Errors: CheckStudent's, NewTrainer's,
// windows that differ from the checkpoint's (another corpus or tokenizer), Restore's.
func ResumeCheckpoint(teacher, student *nvgkit.Net, train, heldOut []int, ck *Checkpoint, path string, opts ...Option) (*Trainer, error) {
	if err := ck.CheckStudent(student); err != nil {
		return nil, fmt.Errorf("train.Resume %s: %w", path, err)
	}
	cfg := ck.Meta.Config
	if cfg.OutDir != "" {
		// The run continues where its checkpoint is, wherever the directory was moved or
		// whatever the current directory (a relative OutDir would otherwise write elsewhere).
		dir := filepath.Dir(path)
		if rel, err := filepath.Rel(cfg.OutDir, cfg.TopKFile); cfg.TopKFile != "" && err == nil && !strings.HasPrefix(rel, "..") {
			cfg.TopKFile = filepath.Join(dir, rel)
		}
		cfg.OutDir = dir
	}
	tr, err := NewTrainer(teacher, student, train, heldOut, cfg, opts...)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Trainer, error) {
		tr.Close()
		return nil, err
	}
	if tr.st.WindowsHash != ck.Meta.WindowsHash {
		return fail(fmt.Errorf("train.Resume %s: the training windows drawn now differ from the checkpoint's: the corpus or the tokenizer is not the one it was trained on (their files changed, or another corpus or seed was given)", path))
	}
	cur, err := snapshotFromTensors(student, ck.Tensors, "state/")
	if err != nil {
		return fail(fmt.Errorf("train.Resume %s: %w", path, err))
	}
	if err := nvgkit.Restore(student, cur); err != nil {
		return fail(err)
	}
	tr.best = cur
	if hasPrefix(ck.Tensors, "best/") {
		if tr.best, err = snapshotFromTensors(student, ck.Tensors, "best/"); err != nil {
			return fail(fmt.Errorf("train.Resume %s: %w", path, err))
		}
	}
	tr.st = ck.Meta
	tr.st.Config = cfg
	tr.StudentFile, tr.Compression = ck.Meta.Student, ck.Meta.Compression
	if err := tr.restoreSigns(ck.Tensors); err != nil {
		return fail(fmt.Errorf("train.Resume %s: %w", path, err))
	}
	return tr, nil
}

// Close releases the works (the nets stay loaded) and closes the hidden-state file.
func (tr *Trainer) Close() {
	tr.sWork.Release()
	tr.tWork.Release()
	tr.hcache.Close()
}

// Works returns the teacher's and the student's work buffers (NB windows of T tokens each, NB
// this rank's share of a data-parallel step), for measuring a pass on them (nvg bench).
func (tr *Trainer) Works() (teacher, student *nvgkit.Work) { return tr.tWork, tr.sWork }

// TrainStep runs the next optimizer step as Run does — the step's batch from the cached
// teacher top-k, the forward and backward (summed over the ranks), clipping, Adam at LRAt,
// the sign flips — without evaluations, checkpoints, metrics or progress (nvg bench times
// it). Prepare must have run. Errors: no top-k yet, and the step's errors.
func (tr *Trainer) TrainStep() (StepInfo, error) {
	if tr.cache == nil {
		return StepInfo{}, errors.New("train.Trainer.TrainStep: the teacher's top-k is not there yet (call Prepare first)")
	}
	return tr.step(tr.st.Step + 1)
}

// Step returns the number of optimizer steps done.
func (tr *Trainer) Step() int { return tr.st.Step }

// Activations says what the student's step keeps for its backward, and its GPU bytes, as
// KeepActivations and ActivationBudget decided (the line Run logs first), e.g.
// "activations: kept for the backward with every BLR path's c (95.5 MiB, within the
// budget of 1024.0 MiB)".
func (tr *Trainer) Activations() string { return tr.activations }

// Windows returns the run's training windows (Config.Windows windows of T+1 tokens; step s
// uses windows i0 … i0+NB−1 with i0 = (s−1)·NB mod Config.Windows). Do not modify.
func (tr *Trainer) Windows() [][]int { return tr.windows }

// EvalWindows returns the held-out windows (T+1 tokens each). Do not modify.
func (tr *Trainer) EvalWindows() [][]int { return tr.eval }

// Losses returns the per-step training losses so far (NaN for skipped steps).
func (tr *Trainer) Losses() []float64 { return append([]float64(nil), tr.st.Loss...) }

// Evals returns the held-out evaluations so far.
func (tr *Trainer) Evals() []EvalPoint { return append([]EvalPoint(nil), tr.st.Evals...) }

func (tr *Trainer) logf(format string, a ...any) {
	if tr.Log != nil {
		if c, ok := tr.Progress.(interface{ Clear() }); ok {
			c.Clear()
		}
		fmt.Fprintf(tr.Log, format+"\n", a...)
	}
}

// inputs returns the first T tokens of each window.
func (tr *Trainer) inputs(ws [][]int) [][]int {
	out := make([][]int, len(ws))
	for i, w := range ws {
		out[i] = w[:tr.Config.T]
	}
	return out
}

// Prepare computes the teacher's top-k for all the run's windows (or loads it from
// Config.TopKFile when that file exists and was made for these windows, T, K and teacher —
// TopKKey of the windows, the teacher's architecture and TeacherID; a new file is written
// there otherwise). With a hidden-state loss (Config.HiddenLoss) the same pass also keeps the
// teacher's hidden states at the selected layers (HiddenCache: in memory, or in
// TopKFile + ".hidden", reused like the top-k file; a missing one runs the pass again).
// With block steps left (Config.BlockSteps) it also keeps, for each window of those steps,
// the teacher's output of the step's layer (in host memory): in the same pass, or, when the
// top-k comes from TopKFile, in a pass of the teacher over those windows alone.
// Run calls it when needed. Errors: a TopKFile or hidden-state file made for other windows or
// settings (it is left as it is), TeacherTopK's errors, ctx's error.
func (tr *Trainer) Prepare(ctx context.Context) error {
	if tr.cache != nil {
		return nil
	}
	c := tr.Config
	start := time.Now()
	n := len(tr.windows)
	blk := tr.newBlockTargets(tr.st.Step + 1)
	key := TopKKey(tr.st.WindowsHash, tr.teacher.Config, tr.TeacherID)
	c.TopKFile = tr.topKFile()
	var loaded *TopKCache
	if c.TopKFile != "" {
		if ok, _ := statFile(c.TopKFile); ok {
			cache, err := LoadTopKCache(c.TopKFile)
			if err != nil {
				return err
			}
			if cache.N != n || cache.T != c.T || cache.K != c.K || cache.Windows != key {
				return fmt.Errorf("nvgkit: top-k file %s holds N=%d T=%d K=%d for other windows or another teacher; this run needs N=%d T=%d K=%d (remove it or pick another file)",
					c.TopKFile, cache.N, cache.T, cache.K, n, c.T, c.K)
			}
			ready, err := tr.openHiddenCache(c.TopKFile+".hidden", key)
			if err != nil {
				return err
			}
			if ready {
				tr.logf("teacher top-k: %d windows from %s", n, c.TopKFile)
				if blk != nil { // the block steps' targets are not in the files: their windows' pass
					if err := tr.teacherPass(ctx, nil, nil, blk); err != nil {
						return err
					}
					if tr.Progress != nil {
						tr.Progress.Finish(fmt.Sprintf("teacher pass %d windows in %.1fs", len(blk.need), time.Since(start).Seconds()))
					}
					tr.st.TeacherSeconds += time.Since(start).Seconds()
					tr.keepBlocks(blk, start)
				}
				tr.cache = cache
				return nil
			}
			loaded = cache
			tr.logf("teacher hidden states: no file %s.hidden; the teacher pass runs again", c.TopKFile)
		}
	}
	cache, err := NewTopKCache(n, c.T, c.K, key)
	if err != nil {
		return err
	}
	pass := func(putHidden func(first int, hs *nvgkit.HiddenStates) error) error {
		return tr.teacherPass(ctx, cache, putHidden, blk)
	}
	switch H := tr.teacher.Config.HiddenSize; {
	case !tr.hidden.On():
		err = pass(nil)
	case c.TopKFile != "":
		path := c.TopKFile + ".hidden"
		tr.hcache, err = WriteHiddenCache(path, n, c.T, H, tr.hidden.Layers, key, pass)
		if err == nil {
			tr.logf("teacher hidden states of layers %v saved to %s (%d bytes)", tr.hidden.Layers, path, HiddenCacheSize(n, c.T, H, len(tr.hidden.Layers)))
		}
	default:
		if err := c.checkHiddenMemory(n, H, tr.hidden.Layers); err != nil {
			return err
		}
		if tr.hcache, err = NewHiddenCache(n, c.T, H, tr.hidden.Layers, key); err == nil {
			err = pass(tr.hcache.Put)
		}
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if tr.Progress != nil {
		tr.Progress.Finish(fmt.Sprintf("teacher pass %d windows in %.1fs", n, secs))
	}
	tr.st.TeacherSeconds += secs
	tr.teacher.Device().FreeScratch() // the teacher's temporaries would only add to the student's peak
	if c.TopKFile != "" && loaded == nil {
		if err := cache.Save(c.TopKFile); err != nil {
			return err
		}
		tr.logf("teacher top-k saved to %s (%d bytes)", c.TopKFile, cache.FileSize())
	}
	tr.cache = cache
	tr.keepBlocks(blk, start)
	return nil
}

// keepBlocks makes blk the block steps' targets and logs what they hold (nothing without).
func (tr *Trainer) keepBlocks(blk *blockTargets, start time.Time) {
	if blk == nil {
		return
	}
	tr.blocks = blk
	tr.logf("teacher layer outputs for the block-wise reconstruction: %d windows × layer, %s in host memory (%.1fs)",
		len(blk.planes), humanBytes(uint64(blk.bytes())), time.Since(start).Seconds())
}

// teacherPass runs the teacher over this rank's windows, group by group, into cache and,
// when putHidden is not nil, hands it each group's hidden states at the loss's layers; the
// layers the block steps need (blk, when not nil) are taken in the same pass. With a nil
// cache (the top-k is loaded) it runs only the groups that hold block windows.
func (tr *Trainer) teacherPass(ctx context.Context, cache *TopKCache, putHidden func(first int, hs *nvgkit.HiddenStates) error, blk *blockTargets) error {
	c := tr.Config
	n := len(tr.windows)
	if cache == nil && blk == nil {
		return nil
	}
	start := time.Now()
	if cache != nil {
		tr.logf("teacher pass: top-%d of %d windows × %d tokens", c.K, n, c.T)
	} else {
		tr.logf("teacher pass: the layer outputs of the %d windows of the block steps left", len(blk.need))
	}
	for i := 0; i < n; i += tr.tWork.NB {
		if !tr.ownsWindow(i) {
			continue // another rank's share
		}
		ws := tr.windows[i:min(i+tr.tWork.NB, n)]
		layers := blk.layersOf(i, len(ws))
		if cache == nil && len(layers) == 0 {
			continue // no block window in the group
		}
		if err := ctx.Err(); err != nil {
			if tr.Progress != nil {
				tr.Progress.Finish("interrupted")
			}
			return fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		if putHidden != nil {
			layers = union(layers, tr.hidden.Layers)
		}
		var top *nvgkit.TopK
		var err error
		if len(layers) > 0 {
			var hs *nvgkit.HiddenStates
			if top, hs, err = nvgkit.TeacherTopKHidden(tr.teacher, tr.tWork, tr.inputs(ws), c.K, layers); err == nil && putHidden != nil {
				var sel *nvgkit.HiddenStates
				if sel, err = hs.Select(tr.hidden.Layers); err == nil {
					err = putHidden(i, sel)
				}
			}
			if err == nil && blk != nil {
				err = blk.put(i, hs)
			}
		} else {
			top, err = nvgkit.TeacherTopK(tr.teacher, tr.tWork, tr.inputs(ws), c.K)
		}
		if err != nil {
			return err
		}
		if cache != nil {
			if err := cache.Put(i, top); err != nil {
				return err
			}
		}
		if tr.Progress != nil {
			done := i + len(ws)
			el := time.Since(start)
			tr.Progress.Update(done, n, fmt.Sprintf("teacher %.0f tok/s, ETA %s", float64(done*c.T)/el.Seconds(), FormatDuration(ETA(el, done, n))))
		}
	}
	return nil
}

// openHiddenCache opens the hidden-state file at path for the loss's layers when the run has
// a hidden-state loss: ready is true when there is none, or when the file exists and holds
// these windows' states (it becomes tr.hcache), false when it does not exist. Errors: a file
// that cannot be read or was made for other windows, teacher or layers.
func (tr *Trainer) openHiddenCache(path string, key [32]byte) (ready bool, err error) {
	if !tr.hidden.On() {
		return true, nil
	}
	if ok, _ := statFile(path); !ok {
		return false, nil
	}
	hc, err := OpenHiddenCache(path)
	if err != nil {
		return false, err
	}
	n, c := len(tr.windows), tr.Config
	if hc.N != n || hc.T != c.T || hc.H != tr.teacher.Config.HiddenSize || !slices.Equal(hc.Layers, tr.hidden.Layers) || hc.Key != key {
		hc.Close()
		return false, fmt.Errorf("nvgkit: hidden-state file %s holds N=%d T=%d H=%d layers %v for other windows, another teacher or other layers; this run needs N=%d T=%d H=%d layers %v (remove it)",
			path, hc.N, hc.T, hc.H, hc.Layers, n, c.T, tr.teacher.Config.HiddenSize, tr.hidden.Layers)
	}
	tr.hcache = hc
	tr.logf("teacher hidden states: layers %v of %d windows from %s", hc.Layers, n, path)
	return true, nil
}

// Evaluate returns the held-out mean next-token loss (nats) and perplexity of net (the
// teacher or the student of this Trainer) on EvalWindows.
func (tr *Trainer) Evaluate(net *nvgkit.Net) (loss, ppl float64, err error) {
	var sum float64
	var count int
	if net == tr.teacher {
		sum, count, err = nvgkit.NLL(net, tr.tWork, tr.eval, nil)
	} else {
		sum, count, err = nvgkit.StudentNLL(net, tr.sWork, tr.eval, nil)
	}
	if err != nil {
		return 0, 0, err
	}
	loss = sum / float64(count)
	return loss, math.Exp(loss), nil
}

// evalStudent evaluates the student after step s, records the point and keeps the best
// snapshot.
func (tr *Trainer) evalStudent(s int) (float64, error) {
	loss, ppl, err := tr.Evaluate(tr.student)
	if err != nil {
		return 0, err
	}
	tr.st.Evals = append(tr.st.Evals, EvalPoint{Step: s, Loss: loss, Perplexity: ppl})
	if tr.best == nil || ppl < tr.st.BestPPL || math.IsNaN(tr.st.BestPPL) && !math.IsNaN(ppl) {
		if tr.best, err = nvgkit.Snapshot(tr.student); err != nil {
			return 0, err
		}
		tr.st.BestStep, tr.st.BestPPL = s, ppl
	}
	tr.logf("eval after step %d: held-out loss %.4f, perplexity %.3f (best %.3f at step %d)", s, loss, ppl, tr.st.BestPPL, tr.st.BestStep)
	ph := tr.Config.PhaseAt(s)
	tr.emitMetrics(MetricsRecord{Kind: MetricsEval, Step: s, Phase: ph.Kind, Layer: ph.Layer, Loss: loss, Perplexity: ppl, BestPerplexity: tr.st.BestPPL, BestStep: tr.st.BestStep,
		TeacherPerplexity: tr.st.TeacherPPL, WallSeconds: tr.wallNow()})
	tr.syncMetrics()
	return ppl, nil
}

// Checkpoint writes the run's state to path atomically (Checkpoint.Save): the metadata, the
// student's Snapshot (trainables and Adam state) and the best snapshot.
func (tr *Trainer) Checkpoint(path string) error {
	snap, err := nvgkit.Snapshot(tr.student)
	if err != nil {
		return err
	}
	ck := &Checkpoint{Meta: tr.st, Tensors: map[string][]float32{}}
	ck.Meta.BitsPerWeight = tr.BitsPerWeight
	ck.Meta.Student, ck.Meta.Compression = tr.StudentFile, tr.Compression
	if tr.Setup != nil {
		ck.Meta.Setup = settingsRecord(*tr.Setup)
	}
	addSnapshotTensors(ck.Tensors, snap, "state/")
	if err := tr.addSignTensors(ck.Tensors); err != nil {
		return err
	}
	if tr.best != nil && tr.st.BestStep != tr.st.Step {
		addSnapshotTensors(ck.Tensors, tr.best, "best/")
	}
	if err := ck.Save(path); err != nil {
		return err
	}
	tr.savedPath, tr.savedStep = path, tr.st.Step
	tr.syncMetrics()
	tr.logf("checkpoint after step %d: %s", tr.st.Step, path)
	return nil
}

// checkpointPath is where Run writes the checkpoint after the current step ("": nowhere).
func (tr *Trainer) checkpointPath() string {
	if tr.Config.OutDir == "" || !tr.root() {
		return ""
	}
	return filepath.Join(tr.Config.OutDir, CheckpointName(tr.st.Step))
}

// checkpointKeep writes the checkpoint of the current step in OutDir and removes those
// beyond Config.Keep (and any of later steps, from a trajectory this run replaced).
func (tr *Trainer) checkpointKeep(path string) error {
	if err := tr.Checkpoint(path); err != nil {
		return err
	}
	keep := tr.Config.Keep
	if keep == 0 { // every checkpoint is kept
		keep = math.MaxInt
	}
	removed, err := pruneCheckpoints(tr.Config.OutDir, tr.st.Step, keep)
	for _, p := range removed {
		if checkpointStep(p) > tr.st.Step {
			tr.logf("removed %s (a later step of the trajectory this run replaced)", p)
		}
	}
	return err
}

// Run trains until Config.Steps steps are done (continuing from where a resumed Trainer
// stopped) and returns the report. On the way it prepares the teacher's top-k (when steps
// remain), evaluates
// the teacher and the untrained student when no evaluation was made yet, and writes
// checkpoints. When ctx is cancelled it stops between steps, writes a checkpoint (when
// OutDir is set) and returns the report so far (Interrupted) with an error wrapping
// ErrInterrupted. At the end the best snapshot is restored unless Config.KeepFinal
// (Report.Exported says which weights the student holds). Errors: any GPU or I/O error,
// with the step.
func (tr *Trainer) Run(ctx context.Context) (*Report, error) {
	c := tr.Config
	for _, n := range tr.notes {
		tr.logf("%s", n)
	}
	tr.notes = nil
	if tr.st.Step < c.Steps {
		if err := tr.Prepare(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	wall0 := tr.st.WallSeconds
	tr.wallBase, tr.wallStart = wall0, start
	var mf *os.File
	if tr.root() {
		var err error
		if mf, err = tr.openMetricsFile(); err != nil {
			return nil, err
		}
	}
	if mf != nil {
		tr.metrics = append([]*metricsSink{{w: mf, name: mf.Name()}}, tr.metrics...)
		defer func() {
			mf.Close()
			tr.metrics = tr.metrics[1:]
		}()
	}
	if len(tr.st.Evals) == 0 && tr.root() {
		_, tppl, err := tr.Evaluate(tr.teacher)
		if err != nil {
			return nil, fmt.Errorf("nvgkit: teacher evaluation: %w", err)
		}
		tr.st.TeacherPPL = tppl
		tr.logf("teacher held-out perplexity %.3f (%d windows × %d tokens)", tppl, len(tr.eval), c.T)
		if _, err := tr.evalStudent(0); err != nil {
			return nil, fmt.Errorf("nvgkit: evaluation before training: %w", err)
		}
	}
	first := tr.st.Step
	loopStart := time.Now()
	for tr.st.Step < c.Steps {
		if err := tr.agreeStop(ctx); err != nil {
			tr.interrupted = true
			tr.st.WallSeconds = wall0 + time.Since(start).Seconds()
			// (Not again when the step's own checkpoint was just written.)
			if p := tr.checkpointPath(); p != "" && (p != tr.savedPath || tr.savedStep != tr.st.Step) {
				if cerr := tr.checkpointKeep(p); cerr != nil {
					return nil, errors.Join(fmt.Errorf("%w: %w", ErrInterrupted, err), cerr)
				}
			}
			if tr.Progress != nil {
				tr.Progress.Finish(fmt.Sprintf("interrupted after step %d", tr.st.Step))
			}
			rep := tr.Report()
			return rep, fmt.Errorf("%w after step %d: %w", ErrInterrupted, tr.st.Step, err)
		}
		t0 := time.Now()
		info, err := tr.step(tr.st.Step + 1)
		if err != nil {
			return nil, fmt.Errorf("nvgkit: step %d: %w", tr.st.Step+1, err)
		}
		tr.emitMetrics(tr.stepRecord(info, time.Since(t0), tr.wallNow()))
		s := info.Step
		if ((c.EvalEvery > 0 && s%c.EvalEvery == 0) || s == c.Steps) && tr.root() {
			if info.EvalPPL, err = tr.evalStudent(s); err != nil {
				return nil, fmt.Errorf("nvgkit: evaluation after step %d: %w", s, err)
			}
		}
		tr.st.WallSeconds = wall0 + time.Since(start).Seconds()
		if p := tr.checkpointPath(); p != "" && ((c.CheckpointEvery > 0 && s%c.CheckpointEvery == 0) || s == c.Steps) {
			if err := tr.checkpointKeep(p); err != nil {
				return nil, err
			}
		}
		el := time.Since(loopStart)
		info.Elapsed, info.ETA = el, ETA(el, s-first, c.Steps-first)
		if tr.Progress != nil {
			status := fmt.Sprintf("loss %.4f lr %.2e ETA %s", info.Loss, info.LR, FormatDuration(info.ETA))
			if info.EvalPPL > 0 {
				status += fmt.Sprintf(" ppl %.2f", info.EvalPPL)
			}
			tr.Progress.Update(s, c.Steps, status)
		}
		if tr.OnStep != nil {
			tr.OnStep(info)
		}
	}
	if tr.Progress != nil {
		tr.Progress.Finish(fmt.Sprintf("%d steps in %s", c.Steps, FormatDuration(time.Since(start))))
	}
	if !c.KeepFinal && tr.best != nil && tr.st.BestStep != tr.st.Step {
		if err := nvgkit.Restore(tr.student, tr.best); err != nil {
			return nil, err
		}
		tr.logf("restored the best snapshot (step %d, perplexity %.3f)", tr.st.BestStep, tr.st.BestPPL)
	}
	if err := tr.comm.Barrier(); err != nil { // rank 0's last evaluation and checkpoint are done
		return nil, err
	}
	return tr.Report(), nil
}

// tokensAfter is the number of predicted tokens the first s steps trained on, over every
// phase (TrainConfig.PhaseTokens; steps past the plan count as its last phase's).
func (tr *Trainer) tokensAfter(s int) int {
	c := tr.Config
	n := 0
	for _, p := range c.phaseReports(s) {
		n += p.Tokens
	}
	if s > c.Steps {
		n += (s - c.Steps) * c.PhaseTokens(c.PhaseAt(s))
	}
	return n
}

// wallNow is the run's training wall time so far (WallSeconds), during Run.
func (tr *Trainer) wallNow() float64 { return tr.wallBase + time.Since(tr.wallStart).Seconds() }

// step runs optimizer step s (1-based).
func (tr *Trainer) step(s int) (StepInfo, error) {
	c := tr.Config
	ph := c.PhaseAt(s)
	info := StepInfo{Step: s, Steps: c.Steps, LR: c.LRAt(s), GradNorm: math.NaN(), Phase: ph.Kind, Layer: ph.Layer}
	if err := tr.enterPhase(ph); err != nil {
		return info, err
	}
	var stats nvgkit.StepStats
	var err error
	if tr.parts() > 1 {
		stats, err = tr.stepParts(s) // data parallel or micro-batched (parallel.go)
	} else {
		stats, err = tr.stepWhole(s)
	}
	if err == nil && tr.OnGradients != nil {
		err = tr.OnGradients(tr.comm, s)
	}
	if err != nil {
		return info, err
	}
	info.Loss = stats.Loss
	if tr.hidden.On() && ph.Kind != PhaseBlock {
		info.KL, info.Hidden = stats.KL, stats.Hidden
	}
	ok := stats.Finite && finite(stats.Loss)
	if ok {
		if s == c.Steps {
			if tr.lastGrads, err = nvgkit.Grads(tr.student); err != nil {
				return info, err
			}
		}
		var gn float64
		if c.ClipNorm > 0 {
			gn, err = nvgkit.ClipGrads(tr.student, c.ClipNorm)
		} else {
			gn, err = nvgkit.GradNorm(tr.student)
		}
		if err != nil {
			return info, err
		}
		info.GradNorm = gn
		ok = finite(gn)
	}
	if info.Skipped, err = tr.finishStep(s, info.LR, info.Loss, info.GradNorm, ok); err != nil {
		return info, err
	}
	if info.SignFlips, err = tr.signStep(s, ok); err != nil {
		return info, err
	}
	if err := tr.endPhase(s); err != nil {
		return info, err
	}
	if s == c.blockTotal() {
		tr.blocks = nil // the block phase is over (a Trainer never steps back; a Lab keeps them)
	}
	info.SkippedTotal = tr.st.Skipped
	info.Tokens = tr.tokensAfter(s)
	return info, nil
}

// stepWhole runs step s's forward and backward as one Step over its NB windows.
func (tr *Trainer) stepWhole(s int) (nvgkit.StepStats, error) {
	c := tr.Config
	if err := nvgkit.ZeroGrads(tr.student); err != nil {
		return nvgkit.StepStats{}, err
	}
	return tr.stepBatch(s, (s-1)*c.NB%c.Windows, c.NB)
}

// stepBatch runs step s's pass on the student's work over the run's windows first …
// first+n−1: in a block phase BlockStep of its layer against the teacher's outputs of that
// layer (blockTargets), else Step (StepHidden with a hidden-state loss) against their cached
// teacher top-k (and hidden states): the one place a Trainer's or a Lab's step reads the
// teacher's targets.
func (tr *Trainer) stepBatch(s, first, n int) (nvgkit.StepStats, error) {
	ids := tr.inputs(tr.windows[first : first+n])
	if p := tr.Config.PhaseAt(s); p.Kind == PhaseBlock {
		hs, err := tr.blocks.get(first, n, p.Layer)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		return nvgkit.BlockStep(tr.student, tr.sWork, ids, p.Layer, hs)
	}
	top, err := tr.cache.Get(first, n)
	if err != nil {
		return nvgkit.StepStats{}, err
	}
	if !tr.hidden.On() {
		return nvgkit.Step(tr.student, tr.sWork, ids, top)
	}
	hs, err := tr.hcache.Get(first, n)
	if err != nil {
		return nvgkit.StepStats{}, err
	}
	return nvgkit.StepHidden(tr.student, tr.sWork, ids, top, tr.hidden, hs)
}

// Report returns the run's report so far (DistilledPPL: the evaluation of the weights the
// student holds at the end of Run — the best one unless KeepFinal — else the last).
func (tr *Trainer) Report() *Report {
	st := tr.st
	r := &Report{TeacherPPL: st.TeacherPPL, BitsPerWeight: tr.BitsPerWeight, Steps: st.Step, Skipped: st.Skipped,
		Tokens: tr.tokensAfter(st.Step), Phases: tr.Config.phaseReports(st.Step), WallSeconds: st.WallSeconds, TeacherSeconds: st.TeacherSeconds,
		Loss: append(Losses(nil), st.Loss...), Evals: append([]EvalPoint(nil), st.Evals...), BestStep: st.BestStep,
		Interrupted: tr.interrupted, Config: tr.Config}
	if r.BitsPerWeight == 0 {
		r.BitsPerWeight = st.BitsPerWeight
	}
	if len(st.Evals) > 0 {
		r.CompressedPPL = st.Evals[0].Perplexity
		last := st.Evals[len(st.Evals)-1]
		r.DistilledPPL, r.Exported = last.Perplexity, fmt.Sprintf("final (step %d)", last.Step)
		if !tr.Config.KeepFinal && !tr.interrupted && st.BestStep != last.Step {
			r.DistilledPPL, r.Exported = st.BestPPL, fmt.Sprintf("best (step %d)", st.BestStep)
		}
		r.GapClosed = GapFraction(r.TeacherPPL, r.CompressedPPL, r.DistilledPPL)
	}
	return r
}

// LayerGradNorms returns the L2 norms of the last step's gradients (before clipping) per
// decoder layer and kind, for PlotLayerGradNorms: layers 0…L−1, kinds sorted (a BLR
// projection's metric — h, ℓ, g of all its paths — under its projection name, such as
// "q_proj"; a norm gain under its module name, such as "input_layernorm"), norms[kind][layer]
// (NaN where the layer has no such kind). The final norm is left out. Errors: no step has
// run to the end of the run yet.
func (tr *Trainer) LayerGradNorms() (layers []int, kinds []string, norms [][]float64, err error) {
	if tr.lastGrads == nil {
		return nil, nil, nil, errors.New("nvgkit: no gradients recorded (they are kept from the run's last step)")
	}
	return nvgkit.LayerNorms(tr.lastGrads, tr.student.Config.NumHiddenLayers)
}

// addSnapshotTensors stores a snapshot's values and Adam moments in ts under
// prefix+"param/"+name, prefix+"m/"+name and prefix+"v/"+name.
func addSnapshotTensors(ts map[string][]float32, s *nvgkit.TrainableSnapshot, prefix string) {
	for _, n := range s.Names() {
		ts[prefix+"param/"+n] = s.Param(n)
		ts[prefix+"m/"+n] = s.M(n)
		ts[prefix+"v/"+n] = s.V(n)
	}
}

// snapshotFromTensors rebuilds a snapshot of net's trainables from ts (see
// addSnapshotTensors); Restore checks the lengths. Errors: a trainable missing from ts.
func snapshotFromTensors(net *nvgkit.Net, ts map[string][]float32, prefix string) (*nvgkit.TrainableSnapshot, error) {
	s := nvgkit.NewTrainableSnapshot()
	for _, n := range net.Trainables() {
		p, m, v := ts[prefix+"param/"+n], ts[prefix+"m/"+n], ts[prefix+"v/"+n]
		if p == nil || m == nil || v == nil {
			return nil, fmt.Errorf("checkpoint has no %s%s (a checkpoint of another student?)", prefix, n)
		}
		if err := s.Set(n, p, m, v); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func hasPrefix(ts map[string][]float32, prefix string) bool {
	for n := range ts {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// statDir reports whether path is an existing directory.
func statDir(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return st.IsDir(), nil
}

// statFile reports whether path exists (as anything).
func statFile(path string) (bool, error) {
	_, err := os.Stat(path)
	return err == nil, err
}

// finishStep ends optimizer step s (the gradients are in place and, when ok, clipped): when
// ok it applies Adam at learning rate lr with the run's optimizer settings, else it clears
// the gradients and counts the step as skipped; then it records the step's loss and gradient
// norm. Trainer.step and Lab.AdamStep both end a step here, so they cannot drift apart.
func (tr *Trainer) finishStep(s int, lr, loss, gradNorm float64, ok bool) (skipped bool, err error) {
	c := tr.Config
	if ok {
		if err := nvgkit.Adam(tr.student, c.Settings, lr, tr.st.AdamStep+1); err != nil {
			return false, err
		}
		tr.st.AdamStep++
	} else {
		if err := nvgkit.ZeroGrads(tr.student); err != nil {
			return false, err
		}
		tr.st.Skipped++
		tr.logf("step %d skipped: loss %g, gradient norm %g (not finite)", s, loss, gradNorm)
	}
	tr.st.Step = s
	tr.st.WindowsDrawn = s * c.NB
	tr.st.Loss = append(tr.st.Loss, loss)
	tr.st.GradNorm = append(tr.st.GradNorm, gradNorm)
	return !ok, nil
}

// activationOptions returns the student work's options for cfg (KeepActivations and
// ActivationBudget; TrainConfig.ActivationBudget says the rule) for nb windows per pass, and
// a line saying what is kept, for the log.
func activationOptions(cfg TrainConfig, student *nvgkit.Net, nb int) ([]nvgkit.WorkOption, string) {
	per := nvgkit.KeptActivationLayerBytes(student, nb, cfg.T)
	var acts uint64 // KeptActivationBytes
	for _, b := range per {
		acts += b
	}
	c := nvgkit.KeptBLROutputBytes(student, nb, cfg.T)
	budget := uint64(max(cfg.ActivationBudget, 0))
	if acts == 0 { // a layer not on the GPU: NewWork refuses KeepActivations, naming it
		if cfg.KeepActivations {
			return []nvgkit.WorkOption{nvgkit.KeepActivations()}, "activations: kept (KeepActivations)"
		}
		return nil, "activations: recomputed per layer in the backward (the student is not all on the GPU)"
	}
	switch {
	case acts+c <= budget:
		return []nvgkit.WorkOption{nvgkit.KeepActivations(), nvgkit.KeepBLROutputs()},
			fmt.Sprintf("activations: kept for the backward with every BLR path's c (%s, within the budget of %s)", mib(acts+c), mib(budget))
	case cfg.KeepActivations || acts <= budget:
		why := "KeepActivations"
		if !cfg.KeepActivations {
			why = "within the budget of " + mib(budget)
		}
		return []nvgkit.WorkOption{nvgkit.KeepActivations()},
			fmt.Sprintf("activations: kept for the backward (%s, %s; with c %s)", mib(acts), why, mib(acts+c))
	}
	if layers, used := keptWithin(per, budget); len(layers) > 0 {
		return []nvgkit.WorkOption{nvgkit.KeepActivationLayers(layers...)},
			fmt.Sprintf("activations: kept for %d of %d layers (%s: %s within the budget of %s; all %s), the others recomputed in the backward",
				len(layers), len(per), layerRanges(layers), mib(used), mib(budget), mib(acts))
	}
	if budget == 0 {
		return nil, fmt.Sprintf("activations: recomputed per layer in the backward (ActivationBudget 0: none kept unasked; all would take %s)", mib(acts))
	}
	return nil, fmt.Sprintf("activations: recomputed per layer in the backward (keeping them would take %s, above the budget of %s)", mib(acts), mib(budget))
}

// keptWithin picks the layers whose activations fit budget bytes together, per[l] bytes each:
// from the last layer down, each that still fits (so a smaller layer after a larger one may
// fit). It returns them in increasing order and their bytes. Every layer's recompute costs
// about the same, so the count is what the choice maximises only roughly; the order makes
// it deterministic.
func keptWithin(per []uint64, budget uint64) (layers []int, used uint64) {
	for l := len(per) - 1; l >= 0; l-- {
		if used+per[l] <= budget {
			used += per[l]
			layers = append(layers, l)
		}
	}
	slices.Reverse(layers)
	return layers, used
}

// layerRanges formats increasing layer indices as runs: "0–3, 7, 9–11".
func layerRanges(ls []int) string {
	var b strings.Builder
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d–%d", ls[i], ls[j])
		} else {
			fmt.Fprintf(&b, "%d", ls[i])
		}
		i = j + 1
	}
	return b.String()
}

// mib formats bytes in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
