package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
)

// TrainConfig sets up a distillation run (DESIGN.md §6 "Defaults" lists every field, its nvg
// distill flag, its default and what 0 means). Start from DefaultTrainConfig, the one set of
// defaults shared with nvg distill; a field holds exactly its value, with no zero-means-
// default: 0 turns warm-up, clipping and periodic evaluations off, and Steps, NB, T, K, LR
// and EvalWindows must be set (Validate). The optimizer (optim.Settings, embedded) is the
// PyTorch reference recipe of ../shared/bench/torch_distill_ref.py (linear warm-up, cosine
// decay, clipped gradient norm, Adam betas 0.9/0.99) with top-k KL; that reference ran 600
// steps of 16 × 512 tokens at lr 1e-3, the defaults are sized for the tiny teacher on 2 CPU
// cores.
type TrainConfig struct {
	// Steps is the number of optimizer steps (≥ 1).
	Steps int `json:"steps"`
	// NB windows of T tokens per step (each ≥ 1): nb·t tokens per step.
	NB int `json:"nb"`
	T  int `json:"t"`
	// Windows is the number of distinct training windows, a multiple of NB: step s uses
	// windows (s−1)·NB mod Windows …, so a smaller pool is cycled through in the same order
	// (epochs), and the teacher pass costs Windows·T tokens instead of Steps·NB·T. 0 means
	// Steps·NB (every step on new windows; Trainer.Config holds that number).
	Windows int `json:"windows"`
	// K is the number of teacher top-k entries per token in the KL loss (1…64, at most the
	// vocabulary size).
	K int `json:"k"`
	// Settings are the optimizer's: the peak learning rate LR, Warmup, MinLRFrac, ClipNorm
	// and Adam's Beta1, Beta2, Eps and MetricFloor (optim.Settings documents each; their JSON
	// fields are this object's own).
	optim.Settings
	// EvalEvery is the number of steps between held-out evaluations; the student is also
	// evaluated before the first step and after the last. 0 (or negative) evaluates only
	// before and after.
	EvalEvery int `json:"eval_every"`
	// EvalWindows is the number of held-out windows of T+1 tokens in each evaluation (≥ 1),
	// drawn once with data.EvalWindows(heldOut, EvalWindows, T, Seed).
	EvalWindows int `json:"eval_windows"`
	// Seed draws the training windows (data.Sampler) and the held-out windows (any value,
	// 0 included).
	Seed uint64 `json:"seed"`
	// OutDir is where checkpoints and metrics.jsonl (and, from the CLI, the student,
	// report.json and plots) are written; "" writes neither.
	OutDir string `json:"out_dir"`
	// CheckpointEvery is the number of steps between checkpoints in OutDir; a checkpoint is
	// also written after the last step and when the run is interrupted. 0 means with every
	// evaluation (EvalEvery; Trainer.Config holds that number); negative, only after the last
	// step and on interruption.
	CheckpointEvery int `json:"checkpoint_every"`
	// TopKFile, when not "", keeps the teacher's top-k for the run's windows in this file
	// (TopKCache) instead of host memory; an existing file for the same windows is reused.
	TopKFile string `json:"topk_file,omitempty"`
	// Keep is the number of checkpoints kept in OutDir, the latest steps' (DefaultTrainConfig:
	// 2, so a resume whose latest checkpoint is corrupt falls back to the one before); 0
	// keeps every checkpoint.
	Keep int `json:"keep_checkpoints"`
	// ScheduleSteps is the number of steps the learning-rate schedule spans (0: Steps);
	// steps after it run at the schedule's floor MinLRFrac·LR (see LRAt). Checkpoint.Extend
	// (nvg distill --resume DIR --steps N) sets it to the original Steps, so a run extended
	// past its plan keeps the learning rates of the steps it ran.
	ScheduleSteps int `json:"schedule_steps,omitempty"`
	// KeepFinal, when true, leaves the final weights in the student at the end of Run; by
	// default the snapshot with the lowest held-out perplexity is restored (Report.Exported
	// says which).
	KeepFinal bool `json:"keep_final,omitempty"`
	// KeepActivations keeps every layer's activations from the student's forward for its
	// backward instead of recomputing each layer (nvgkit.KeepActivations): faster steps for
	// nvgkit.KeptActivationBytes more GPU memory, bit-identical results (so a run may be
	// resumed with or without it). Off by default: the recomputing step needs the least memory.
	KeepActivations bool `json:"keep_activations,omitempty"`
	// ActivationBudget is the GPU memory, in bytes, the student's step may spend on kept
	// activations without being asked (KeepActivations): when the student's
	// nvgkit.KeptActivationBytes + nvgkit.KeptBLROutputBytes for one pass's windows of T
	// tokens (NB, or NB / (ranks · micro-batches) with WithComm and WithMicroBatches) fit in
	// it, the step keeps all of them (nvgkit.KeepActivations and KeepBLROutputs: no recompute
	// and no c GEMM in the backward); else, when KeptActivationBytes alone fits, it keeps
	// those; else it keeps the layers whose activations fit together
	// (nvgkit.KeepActivationLayers with nvgkit.KeptActivationLayerBytes, from the last layer
	// down) and recomputes the others; with none fitting it recomputes every layer (unless
	// KeepActivations). Like HF models, which keep every activation unless gradient
	// checkpointing is asked for, a small model gets the fastest step, and a large one as
	// fast a step as the budget buys. Bit-identical either way. DefaultTrainConfig:
	// 1 GiB, which the embedded tiny model's default step fits (95.5 MiB with c), and one
	// layer of a 0.8B step of 8 × 512 tokens (≈ 0.66 GiB a layer; ≈ 16 GiB for all 24). 0:
	// only KeepActivations keeps.
	ActivationBudget int64 `json:"activation_budget"`
	// TrainSigns, when true, also trains the BLR factors' signs (nvgkit.EnableSigns with
	// Signs; DESIGN.md "Sign learning"): scores accumulate in every backward and
	// nvgkit.SignStep flips after each Adam step; checkpoints carry the sign bits and scores.
	// It implies KeepFinal (the best snapshot holds the metric only, not the signs).
	TrainSigns bool `json:"train_signs,omitempty"`
	// Signs holds the sign-learning knobs, validated when TrainSigns; the zero value means
	// nvgkit.DefaultSigns (SignKnobs).
	Signs nvgkit.SignConfig `json:"signs,omitzero"`
	// FinishSteps is the length of the scale-only finish, the last of the Steps steps
	// (Phases, PhaseFinish): the signs frozen (no score updates, no flips), only the metric
	// (h, ℓ, g) and the norm gains trained on the KL, at the learning rates of the run's
	// schedule (a continuation: LRAt). 0: none. It needs TrainSigns (without sign learning
	// every step already trains the scales alone) and leaves at least one KL step.
	FinishSteps int `json:"finish_steps,omitempty"`
	// HiddenLoss, when not "", adds the hidden-state term to every step's loss
	// (nvgkit.HiddenLoss, DESIGN.md §6 "Hidden-state loss"): "mse" (normalised squared error)
	// or "cosine", weighted by HiddenWeight, over the outputs of the decoder layers
	// HiddenLayers selects. The teacher's hidden states at those layers are taken in the
	// teacher pass and kept beside the top-k (HiddenCache: in host memory, or in
	// TopKFile + ".hidden" when TopKFile is set). "": the KL alone. DefaultTrainConfig:
	// "mse" (the best measured at the default budget, DESIGN.md §6 "Defaults"). Always
	// written to run files and checkpoints ("" too), so that a file of a run without the
	// term reads back without it.
	HiddenLoss string `json:"hidden_loss"`
	// HiddenWeight is λ of the hidden-state term (finite, ≥ 0; DefaultTrainConfig: 1).
	HiddenWeight float64 `json:"hidden_weight"`
	// HiddenLayers selects the term's layers (nvgkit.ParseHiddenLayers): "all", "every:K"
	// or a list such as "3,7" (DefaultTrainConfig: "every:4", the outputs of layers 3, 7, …).
	HiddenLayers string `json:"hidden_layers"`
	// BlockSteps is the length of the block-wise reconstruction phase per decoder layer
	// (Phases, PhaseBlock; DESIGN.md §6 "Block-wise reconstruction"): before the KL phase,
	// layers 0, 1, … each get BlockSteps optimizer steps that train that layer's values alone
	// (its metric, norm gains and, with TrainSigns, signs) to reproduce the teacher's output
	// of the layer from the student's own input (nvgkit.BlockStep: the normalised MSE of the
	// hidden-state loss, no KL). The phase takes BlockSteps·BlockLayers of the Steps steps
	// (counted in tokens as every step: PhaseTokens), and at least one KL step stays after
	// it. Each layer's steps run a cosine decay from LR to MinLRFrac·LR without warm-up, its
	// optimizer started afresh; the KL phase's schedule (warm-up and cosine, LRAt) spans the
	// steps after the block phase. The teacher pass keeps the teacher's output of each
	// block step's layer for its windows (binary16, in host memory). 0: no block phase.
	BlockSteps int `json:"block_steps,omitempty"`
	// BlockLayers is the number of decoder layers the block phase walks: the student's
	// num_hidden_layers, which NewTrainer sets when BlockSteps > 0 (a non-zero value that
	// differs from the student's is refused). 0 in a config no Trainer has resolved yet; a
	// resume does not compare it (the student is checked itself).
	BlockLayers int `json:"block_layers,omitempty"`
}

// DefaultTrainConfig returns the defaults of a distillation run, the same as nvg distill's
// flags (the one table of defaults): 24 steps of 4 windows × 64 tokens, new windows every
// step, top-32 KL, lr 0.05 with 3 warm-up steps and cosine decay to 10 %, gradient norm
// clipped to 1, held-out evaluation of 8 windows every 8 steps, seed 1, checkpoints with
// every evaluation (the 2 latest kept), activations kept when they fit 1 GiB, the
// hidden-state loss beside the KL (normalised MSE, weight 1, the outputs of every 4th layer:
// on the tiny teacher at this budget 58.6 against 63.7 held-out perplexity without it, both
// from --init refine; DESIGN.md §6 "Defaults"), no OutDir. They are sized so that the whole
// nvg distill run on the embedded tiny teacher (8 layers, hidden 256, vocab 8192) finishes
// within 15 minutes on 2 CPU cores through lavapipe; a large run wants more steps and
// tokens, a lower LR and sign learning (the README's GPU recipe: 2,200 steps × 16 × 512
// tokens, lr 0.005, 50 warm-up steps, --train-signs --finish-steps 300).
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{Steps: 24, NB: 4, T: 64, K: 32, Settings: optim.Default(),
		EvalEvery: 8, EvalWindows: 8, Seed: 1, Keep: 2, ActivationBudget: DefaultActivationBudget,
		HiddenLoss: nvgkit.HiddenMSE, HiddenWeight: 1, HiddenLayers: "every:4"}
}

// presetOptimizer sets c's optimizer settings to optim.Default() before a run file or
// checkpoint is decoded over it: the fields the file records replace them, and one written
// before Adam's Beta1, Beta2, Eps and MetricFloor were recorded reads back with those it
// trained with.
func presetOptimizer(c *TrainConfig) { c.Settings = optim.Default() }

// DefaultActivationBudget is DefaultTrainConfig's ActivationBudget: 1 GiB.
const DefaultActivationBudget = 1 << 30

// Resolved returns c with the fields whose 0 stands for another field's value filled in, as
// Trainer.Config holds them: Windows 0 ↦ Steps·NB, CheckpointEvery 0 ↦ EvalEvery (or −1 when
// EvalEvery ≤ 0), ScheduleSteps 0 ↦ Steps. No other field is changed (there are no hidden
// defaults: those are DefaultTrainConfig's).
func (c TrainConfig) Resolved() TrainConfig {
	if c.Windows == 0 {
		c.Windows = c.Steps * c.NB
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = c.EvalEvery
		if c.EvalEvery <= 0 {
			c.CheckpointEvery = -1
		}
	}
	if c.ScheduleSteps == 0 {
		c.ScheduleSteps = c.Steps
	}
	return c
}

// TrainConfigError is the error of TrainConfig.Validate: the field named Field holds Value,
// out of its range Want. It reads "nvgkit: TrainConfig.<Field> = <Value>, want <Want>"; a
// zero Value that is not a default says so (start from DefaultTrainConfig()). A front end
// (nvg distill) names its own flag for Field; the optimizer's fields (optim.Settings) are
// named as TrainConfig's, which they are (embedded).
type TrainConfigError struct {
	Field string // a TrainConfig field name: "Steps", "NB", "LR", …
	Value any    // the field's value (an int or a float64)
	Want  string // the range, e.g. "≥ 1"
}

func (e *TrainConfigError) Error() string {
	s := fmt.Sprintf("nvgkit: TrainConfig.%s = %v, want %s", e.Field, e.Value, e.Want)
	if strings.Contains(s, " = 0,") {
		s += " (0 is not a default: start from DefaultTrainConfig())"
	}
	return s
}

// Validate reports the first field of c that is out of range (Windows 0 stands for Steps·NB)
// as a *TrainConfigError; nil when every field is in range.
func (c TrainConfig) Validate() error {
	bad := func(field string, v any, want string) error { return &TrainConfigError{field, v, want} }
	oe := c.Settings.Validate() // the optimizer's fields, named as TrainConfig's
	var fe *optim.FieldError
	switch {
	case c.Steps < 1:
		return bad("Steps", c.Steps, "≥ 1")
	case c.NB < 1:
		return bad("NB", c.NB, "≥ 1")
	case c.T < 1:
		return bad("T", c.T, "≥ 1")
	case c.Windows < 0 || (c.Windows != 0 && (c.Windows < c.NB || c.Windows%c.NB != 0)):
		return bad("Windows", c.Windows, fmt.Sprintf("0 (Steps·NB) or a positive multiple of NB = %d", c.NB))
	case c.K < 1 || c.K > 64:
		return bad("K", c.K, "1…64")
	case errors.As(oe, &fe):
		return bad(fe.Field, fe.Value, fe.Want)
	case oe != nil:
		return oe
	case c.EvalWindows < 1:
		return bad("EvalWindows", c.EvalWindows, "≥ 1")
	case c.Keep < 0:
		return bad("Keep", c.Keep, "≥ 0 (0 keeps every checkpoint)")
	case c.ScheduleSteps < 0:
		return bad("ScheduleSteps", c.ScheduleSteps, "≥ 0 (0: the schedule spans Steps)")
	case c.ActivationBudget < 0:
		return bad("ActivationBudget", c.ActivationBudget, "≥ 0 bytes (0: keep only with KeepActivations)")
	}
	if err := c.checkSize(); err != nil {
		return err
	}
	if c.TrainSigns {
		if err := c.SignKnobs().Validate(); err != nil {
			return bad("Signs", c.Signs, err.Error())
		}
	}
	switch {
	case c.FinishSteps < 0 || c.FinishSteps >= c.Steps:
		return bad("FinishSteps", c.FinishSteps, fmt.Sprintf("0 (none) or fewer than Steps = %d (the KL phase keeps at least one step)", c.Steps))
	case c.FinishSteps > 0 && !c.TrainSigns:
		return bad("FinishSteps", c.FinishSteps, "0 without TrainSigns (the finish freezes the signs; without sign learning every step trains the scales alone)")
	case c.BlockLayers < 0:
		return bad("BlockLayers", c.BlockLayers, "≥ 0 (the student's decoder layers; NewTrainer sets it)")
	case c.BlockSteps < 0:
		return bad("BlockSteps", c.BlockSteps, "≥ 0 (0: no block-wise reconstruction phase)")
	case c.BlockSteps > 0 && c.BlockSteps > (c.Steps-c.FinishSteps-1)/max(c.BlockLayers, 1):
		layers := fmt.Sprintf("%d decoder layers", c.BlockLayers)
		if c.BlockLayers == 0 {
			layers = "at least one decoder layer"
		}
		return bad("BlockSteps", c.BlockSteps, fmt.Sprintf("≤ %d with Steps = %d, FinishSteps = %d and %s: the block phase takes BlockSteps steps per decoder layer out of Steps, and at least one KL step stays",
			(c.Steps-c.FinishSteps-1)/max(c.BlockLayers, 1), c.Steps, c.FinishSteps, layers))
	}
	if c.HiddenLoss != "" {
		switch {
		case c.HiddenLoss != nvgkit.HiddenMSE && c.HiddenLoss != nvgkit.HiddenCosine:
			return bad("HiddenLoss", c.HiddenLoss, fmt.Sprintf("%q, %q or \"\" (off)", nvgkit.HiddenMSE, nvgkit.HiddenCosine))
		case !(c.HiddenWeight >= 0) || math.IsInf(c.HiddenWeight, 0):
			return bad("HiddenWeight", c.HiddenWeight, "a finite value ≥ 0")
		case strings.TrimSpace(c.HiddenLayers) == "":
			return bad("HiddenLayers", c.HiddenLayers, `"all", "every:K" or a list of layers such as "3,7"`)
		}
	}
	return nil
}

// MaxTopKEntries bounds a run's teacher top-k, Windows·T·K entries (an id, a probability and
// a log-probability each, 12 bytes) held in host memory (TopKCache): its tables are indexed
// in 32 bits.
const MaxTopKEntries = math.MaxInt32

// checkSize refuses, before anything is allocated, a run whose training windows (Steps·NB
// when Windows is 0) need more teacher top-k entries than MaxTopKEntries, or whose token
// count (Steps·NB·T) does not fit an int. It names the largest Steps (or Windows, or T) that
// fits. Its range texts name NB, T, K and Windows so that nvg distill can name its flags.
func (c TrainConfig) checkSize() error {
	perWindow := c.T * c.K // T < MaxTopKEntries here, K ≤ 64: no overflow
	if c.T > MaxTopKEntries/c.K {
		perWindow = MaxTopKEntries + 1
	}
	maxWindows := MaxTopKEntries / perWindow
	held := fmt.Sprintf("(T·K entries each) is held in host memory, at most %d entries", MaxTopKEntries)
	switch {
	case maxWindows < c.NB:
		return &TrainConfigError{"T", c.T, fmt.Sprintf("≤ %d with K = %d and NB = %d: the teacher's top-k of every training window %s",
			MaxTopKEntries/c.K/c.NB, c.K, c.NB, held)}
	case c.Windows == 0 && c.Steps > maxWindows/c.NB:
		return &TrainConfigError{"Steps", c.Steps, fmt.Sprintf("≤ %d with NB = %d, T = %d and K = %d: the teacher's top-k of each of the Steps·NB training windows %s; a longer run cycles a smaller pool of windows (Windows)",
			maxWindows/c.NB, c.NB, c.T, c.K, held)}
	case c.Windows > maxWindows:
		return &TrainConfigError{"Windows", c.Windows, fmt.Sprintf("≤ %d with T = %d and K = %d: the teacher's top-k of every training window %s",
			maxWindows/c.NB*c.NB, c.T, c.K, held)}
	case c.Steps > math.MaxInt/(c.NB*c.T): // NB·T ≤ MaxTopKEntries here
		return &TrainConfigError{"Steps", c.Steps, fmt.Sprintf("≤ %d with NB = %d and T = %d (Steps·NB·T tokens must fit an int)", math.MaxInt/(c.NB*c.T), c.NB, c.T)}
	}
	return nil
}

// HostBytes is the host memory a Trainer of c holds for its windows: the training windows
// (Windows, or Steps·NB, of T+1 token ids) with their teacher top-k (TopKCache: 4·T·(3K+1)
// bytes a window, also when it is saved to TopKFile) and the held-out windows. Call it on a
// valid c.
func (c TrainConfig) HostBytes() uint64 {
	c = c.Resolved()
	return uint64(c.Windows)*c.windowBytes() + uint64(c.EvalWindows)*tokenWindowBytes(c.T)
}

// windowBytes is the host memory of one training window of c and its teacher top-k.
func (c TrainConfig) windowBytes() uint64 {
	return tokenWindowBytes(c.T) + 4*uint64(c.T)*uint64(3*c.K+1) + 1
}

// tokenWindowBytes is the host memory of a window of t+1 token ids ([]int).
func tokenWindowBytes(t int) uint64 { return 8*uint64(t+1) + 24 }

// checkHiddenMemory refuses a hidden-state cache held in host memory (no TopKFile) whose n
// windows at hidden size h and the given layers, with HostBytes, exceed the machine's
// physical memory; nil when it fits or the memory is unknown.
func (c TrainConfig) checkHiddenMemory(n, h int, layers []int) error {
	total, need := physicalMemory(), uint64(HiddenCacheSize(n, c.T, h, len(layers)))+c.HostBytes()
	if total == 0 || need <= total {
		return nil
	}
	return fmt.Errorf("train: the teacher's hidden states of layers %v (%d windows × %d tokens, hidden %d) with the top-k need %s of host memory, the machine has %s: set TopKFile to keep them on disk, match fewer layers (HiddenLayers) or train on the KL alone (HiddenLoss \"\")",
		layers, n, c.T, h, humanBytes(need), humanBytes(total))
}

// physicalMemory returns the machine's physical memory in bytes, 0 when unknown (tests
// replace it).
var physicalMemory = hostMemory

// CheckMemory refuses a valid c whose HostBytes exceed the machine's physical memory (it
// could never be allocated: Go would stop with "out of memory" after the compression and the
// teacher pass), naming the largest Steps (or Windows) that fits. nil when it fits or the
// memory is unknown. Errors: a *TrainConfigError.
func (c TrainConfig) CheckMemory() error {
	total := physicalMemory()
	need := c.HostBytes()
	if total == 0 || need <= total {
		return nil
	}
	eval := uint64(c.EvalWindows) * tokenWindowBytes(c.T)
	fit := 0
	if total > eval {
		fit = int(min((total-eval)/c.windowBytes(), MaxTopKEntries))
	}
	why := fmt.Sprintf("the training windows with their teacher top-k take %s of host memory (%s each at T = %d and K = %d), and this machine has %s",
		gib(need), humanBytes(c.windowBytes()), c.T, c.K, gib(total))
	if c.Windows == 0 {
		return &TrainConfigError{"Steps", c.Steps, fmt.Sprintf("≤ %d with NB = %d: %s; a longer run cycles a smaller pool of windows (Windows)", fit/c.NB, c.NB, why)}
	}
	return &TrainConfigError{"Windows", c.Windows, fmt.Sprintf("≤ %d: %s", fit/c.NB*c.NB, why)}
}

// gib formats bytes in GiB.
func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// humanBytes formats bytes in bytes, KiB or MiB.
func humanBytes(b uint64) string {
	switch {
	case b >= 1<<20:
		return mib(b)
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}

// hiddenLoss returns c's hidden-state term for a net of numLayers decoder layers (off when
// HiddenLoss is ""). Errors: HiddenLayers that ParseHiddenLayers refuses.
func (c TrainConfig) hiddenLoss(numLayers int) (nvgkit.HiddenLoss, error) {
	if c.HiddenLoss == "" {
		return nvgkit.HiddenLoss{}, nil
	}
	layers, err := nvgkit.ParseHiddenLayers(c.HiddenLayers, numLayers)
	if err != nil {
		return nvgkit.HiddenLoss{}, fmt.Errorf("train: TrainConfig.HiddenLayers: %w", err)
	}
	h := nvgkit.HiddenLoss{Kind: c.HiddenLoss, Weight: c.HiddenWeight, Layers: layers}
	return h, h.Validate(numLayers)
}

// LRAt returns the learning rate of optimizer step s (1-based) of c: the optimizer's
// schedule (optim.Settings.LRAt) over the ScheduleSteps steps it spans (0: Steps, unless the
// run was extended). Steps after the span run at the schedule's floor MinLRFrac·LR. With a
// block phase (BlockSteps, its B = BlockSteps·BlockLayers steps first) that schedule starts
// after it — step s > B runs at the schedule's step s − B of a span of ScheduleSteps − B, as
// a run without the phase would — and step j (0-based) of each layer's BlockSteps runs a
// cosine decay from LR to MinLRFrac·LR without warm-up: Settings.LRAt(j, BlockSteps) with
// Warmup 0 (each layer's optimizer starts afresh, so its first step is ≈ LR·sign of the
// gradient, relative, for every value, as a KL run's after its warm-up).
func (c TrainConfig) LRAt(s int) float64 {
	span := c.ScheduleSteps
	if span <= 0 {
		span = c.Steps
	}
	b := c.blockTotal()
	if b == 0 {
		return c.Settings.LRAt(s, span)
	}
	if s <= b {
		o := c.Settings
		o.Warmup = 0
		return o.LRAt((max(s, 1)-1)%c.BlockSteps, c.BlockSteps)
	}
	return c.Settings.LRAt(s-b, max(span-b, 1))
}

// StepInfo describes one finished training step, passed to Trainer.OnStep.
type StepInfo struct {
	// Step is the 1-based optimizer step; Steps the run's total.
	Step, Steps int
	// Loss is the step's mean KL(teacher top-k ‖ student) per token (nats), plus λ·Hidden
	// with a hidden-state loss; NaN or ±Inf for a skipped step.
	Loss float64
	// KL and Hidden are the parts of Loss with a hidden-state loss (TrainConfig.HiddenLoss):
	// the mean KL and the unweighted hidden-state loss L_hidden; both 0 without one.
	KL, Hidden float64
	// Skipped is true when the loss or the gradient was not finite: the gradients were
	// cleared and no update was made. SkippedTotal counts those so far.
	Skipped      bool
	SkippedTotal int
	// GradNorm is the global gradient L2 norm before clipping (NaN when skipped).
	GradNorm float64
	// LR is the learning rate used (LRAt(Step)).
	LR float64
	// Tokens is the number of predicted tokens trained on so far (Step·NB·T).
	Tokens int
	// Elapsed is the wall time since the run (or the resumed part) started; ETA the
	// estimated time left, from the mean time per step so far.
	Elapsed, ETA time.Duration
	// EvalPPL is the held-out perplexity when this step ended with an evaluation, else 0.
	EvalPPL float64
	// SignFlips is the signs flipped by the step per decoder layer (TrainSigns, outside the
	// finish), else nil.
	SignFlips []int
	// Phase is the kind of the step's phase (TrainConfig.PhaseAt: PhaseKL, PhaseFinish,
	// PhaseBlock); Layer the decoder layer of a block step (0 otherwise). A block step's Loss
	// is the layer's reconstruction error (the normalised MSE of nvgkit.BlockStep), not a KL,
	// and it has no KL and Hidden parts.
	Phase string
	Layer int
}

// EvalPoint is one held-out evaluation: after Step optimizer steps (0: before training),
// the mean next-token loss (nats) and its perplexity exp(Loss). In JSON a non-finite loss or
// perplexity (a diverged student) is null, read back as NaN.
type EvalPoint struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	Perplexity float64 `json:"perplexity"`
}

type evalPointJSON struct {
	Step       int      `json:"step"`
	Loss       *float64 `json:"loss"`
	Perplexity *float64 `json:"perplexity"`
}

func finitePtr(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// MarshalJSON writes the point with null for non-finite values.
func (e EvalPoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(evalPointJSON{Step: e.Step, Loss: finitePtr(e.Loss), Perplexity: finitePtr(e.Perplexity)})
}

// UnmarshalJSON reads a point written by MarshalJSON (null ↦ NaN).
func (e *EvalPoint) UnmarshalJSON(b []byte) error {
	var j evalPointJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = EvalPoint{Step: j.Step, Loss: orNaN(j.Loss), Perplexity: orNaN(j.Perplexity)}
	return nil
}

// Losses is a loss history, one value per step; non-finite values (skipped steps) are
// written to JSON as null and read back as NaN.
type Losses []float64

// MarshalJSON writes the values, null for NaN and ±Inf.
func (l Losses) MarshalJSON() ([]byte, error) {
	out := make([]*float64, len(l))
	for i := range l {
		if !math.IsNaN(l[i]) && !math.IsInf(l[i], 0) {
			out[i] = &l[i]
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads an array of numbers and nulls (null ↦ NaN).
func (l *Losses) UnmarshalJSON(b []byte) error {
	var in []*float64
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*l = make(Losses, len(in))
	for i, p := range in {
		if p == nil {
			(*l)[i] = math.NaN()
		} else {
			(*l)[i] = *p
		}
	}
	return nil
}

// Report summarises a distillation run (saved as report.json by Report.Save). Perplexities
// are of the held-out windows (EvalWindows windows of T+1 tokens: T predicted tokens each).
type Report struct {
	// TeacherPPL, CompressedPPL and DistilledPPL are the held-out perplexities of the
	// teacher, of the student before training and of the student that is exported, as
	// trained (f32 scales): the exported .cmf stores them rounded to f16, which moves its
	// perplexity by rounding (0.02–0.06 % in a fresh-user test; `nvg eval` measures it).
	TeacherPPL    float64 `json:"teacher_perplexity"`
	CompressedPPL float64 `json:"compressed_perplexity"`
	DistilledPPL  float64 `json:"distilled_perplexity"`
	// GapClosed is the fraction of the log-perplexity gap closed,
	// (log CompressedPPL − log DistilledPPL) / (log CompressedPPL − log TeacherPPL).
	GapClosed float64 `json:"gap_closed"`
	// BitsPerWeight of the compressed linears (compress.OverallBitsPerWeight), 0 when unknown.
	BitsPerWeight float64 `json:"bits_per_weight"`
	// Steps run, of which Skipped were skipped (non-finite); Tokens the predicted tokens
	// trained on over every phase (Σ over the steps of TrainConfig.PhaseTokens: Steps·NB·T).
	Steps   int `json:"steps"`
	Skipped int `json:"skipped_steps"`
	Tokens  int `json:"tokens"`
	// Phases are the run's phases (TrainConfig.Phases) with the steps of each done and
	// their tokens.
	Phases []PhaseReport `json:"phases,omitempty"`
	// WallSeconds is the wall time of the training loop including evaluations (summed
	// over resumed parts); TeacherSeconds that of the teacher top-k pass.
	WallSeconds    float64 `json:"wall_seconds"`
	TeacherSeconds float64 `json:"teacher_seconds"`
	// Loss is the per-step training loss (KL nats/token; null for skipped steps).
	Loss Losses `json:"loss_history"`
	// Evals are the held-out evaluations, the first at step 0.
	Evals []EvalPoint `json:"eval_history"`
	// Exported says which weights the student holds after Run: "best (step N)" or "final".
	Exported string `json:"exported"`
	// BestStep is the step of the lowest held-out perplexity.
	BestStep int `json:"best_step"`
	// Interrupted is true when the run stopped early (context cancelled); Steps is then the
	// number of steps done.
	Interrupted bool `json:"interrupted,omitempty"`
	// Config is the run's configuration (Trainer.Config: Windows and CheckpointEvery resolved).
	Config TrainConfig `json:"config"`
	// Provenance, when set by the caller (nvg distill sets it), records the build, the GPU
	// adapter and the compression products of the session that wrote the report.
	Provenance *Provenance `json:"provenance,omitempty"`
}

// GapFraction returns (log c − log d) / (log c − log t) for perplexities t (teacher), c
// (compressed) and d (distilled): 1 when d = t, 0 when d = c; NaN when c = t.
func GapFraction(t, c, d float64) float64 {
	return (math.Log(c) - math.Log(d)) / (math.Log(c) - math.Log(t))
}

// Save writes r as indented JSON to path atomically (temporary file, fsync, rename): on error
// the previous file is untouched. A non-finite perplexity is an error naming the field; a
// non-finite GapClosed (teacher and compressed equal) is written as 0.
func (r *Report) Save(path string) error {
	for name, v := range map[string]float64{"teacher_perplexity": r.TeacherPPL, "compressed_perplexity": r.CompressedPPL,
		"distilled_perplexity": r.DistilledPPL} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("nvgkit: report %s: %s is %g", path, name, v)
		}
	}
	rr := *r
	if math.IsNaN(rr.GapClosed) || math.IsInf(rr.GapClosed, 0) {
		rr.GapClosed = 0
	}
	b, err := json.MarshalIndent(&rr, "", " ")
	if err != nil {
		return fmt.Errorf("nvgkit: report %s: %w", path, err)
	}
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return fmt.Errorf("nvgkit: %w", err)
	}
	return nil
}

// LoadReport reads a report written by Report.Save.
func LoadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	presetOptimizer(&r.Config)
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("nvgkit: report %s: %w", path, err)
	}
	return &r, nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
