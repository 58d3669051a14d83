// Package session is the light half of nvg's step-level API (issue 14): the Lab interface
// — load a teacher once, run its top-k pass once, then step, look at and change the
// student a few calls at a time — and the plain value types its methods take and return.
//
// Two implementations exist: train.NewLab runs a Lab in-process on the GPU (the CLI, Go
// programs, tests), and this package's Client talks to a resident session server that owns
// one (notebook cells, which GoNB runs as a new process each). Both give bit-identical
// results. This package imports nothing that links the GPU engine (no gpu, nvgkit, host or
// wgsl package, no cgo), so a notebook cell that only talks to a session compiles and starts
// fast; a test asserts it with `go list -deps`.
//
// Every value a Lab method returns is plain data — numbers, strings, slices, maps and
// structs of them, no pointers to GPU state — so it can travel over encoding/gob.
//
// Names. The student's trained vectors (Lab.Names) are named as in nvgkit and the
// checkpoints: every RMSNorm gain by its Hugging Face tensor name
// ("model.layers.0.input_layernorm.weight", … "model.norm.weight"; the stored w, applied as
// 1 + w by the zero-centred norms), every BLR metric scale by arch.MetricName,
// "<tensor>.p<path>.<h|l|g>" ("model.layers.3.self_attn.q_proj.weight.p0.h", [m], [r] or
// [n] float32 values). Unknown names are refused with an error listing the nearest names.
//
// Signs. The ±1 factors of the BLR projections are named "<tensor>.p<path>.U" ([m, r]) and
// "<tensor>.p<path>.V" ([r, n]) (Lab.SignNames). With Setup.Train.TrainSigns the Lab trains
// them as nvg distill --train-signs does (an int8 flip score per sign, flips after each Adam
// step, StepStats.SignFlips per layer); the step-level calls read and write the packed bits
// (Signs, SetSigns), the scores (SignScores, SetSignScores) and a captured straight-through
// gradient (CaptureSignGrad, SignGrad), and apply a notebook's own flip rule
// (ApplySignFlips with SignShape.FlipMask).
package session

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Lab is the step-level API of one teacher–student pair on one GPU: the state it holds —
// the teacher and student nets, their work buffers, the training and held-out windows, the
// teacher's top-k for every training window (computed once by Setup and kept), the Adam
// moments, the step counter, the loss history and named snapshots — survives between calls.
//
// Calls are served one at a time. Every method validates its arguments before it touches any
// state and a call that fails leaves the state as it was, unless its documentation says
// otherwise (Step keeps the steps it finished before the failure or interruption). Every
// method except Setup, Info, Interrupt and Close fails with an error saying so while the Lab
// is not set up.
//
// Training follows nvg distill (train.Trainer) exactly: step s (1-based) uses the training
// windows i0 … i0+NB−1 with i0 = (s−1)·NB mod Windows, the teacher's cached top-k for them,
// the learning rate TrainConfig.LRAt(s) of the schedule and Adam with betas 0.9/0.99. With
// the same Setup, Step(k) returns the same losses, bit for bit, as the first k steps of
// `nvg distill` / train.Trainer (the Lab does not evaluate between steps unless asked, and
// never restores a "best" snapshot by itself).
type Lab interface {
	// Setup opens the device if needed, loads the teacher (Setup.Teacher; "" is the embedded
	// tiny teacher), compresses it (Setup.BitsPerWeight, Paths, Init — "refine" after a
	// calibration pass of the teacher over training windows — and Seed) or loads the student
	// Setup.Student, tokenizes the corpus (Setup.TrainFiles / EvalFiles; nil is the embedded
	// default corpus of nvg distill, the Go standard library with the model card's split),
	// draws the training and held-out windows, runs the teacher pass once over every
	// training window and keeps its top-k, evaluates the teacher and the untrained student on
	// the held-out windows, and creates the Adam state (step 0). With Setup.Resume it then
	// restores a checkpoint written by Checkpoint.
	//
	// Calling Setup again with an equal Setup returns the same Info and changes nothing (a
	// notebook re-runs its first cell). A different Setup is an error unless s.Replace is
	// set; then the old state is released once the new one is complete (a Setup that fails
	// leaves the old one). Progress (phases "load", "calibrate"
	// (Init "refine"), "compress", "corpus", "teacher", "eval") goes to the OnProgress option; WithContext or Interrupt
	// stop it between phases and teacher batches with ErrInterrupted, leaving the Lab as it
	// was before the call.
	//
	// Errors: Setup.Validate's; a missing model, tokenizer or corpus file; a student of
	// another architecture; GPU errors (out of memory names the sizes).
	//
	//lab:nohook
	Setup(s Setup, opts ...Option) (Info, error)
	// Info returns the sizes, names and state of a set-up Lab (Info.Ready false and the rest
	// zero before Setup).
	Info() (Info, error)
	// Interrupt asks the call in progress (Setup, Step, GradCheck) to stop at its next
	// boundary (a phase, a teacher batch, a step, a coordinate); that call then returns an error
	// wrapping ErrInterrupted. It may be called from another goroutine (a signal handler)
	// while a call runs; with no call running it does nothing (it is not remembered).
	Interrupt() error
	// Close releases the GPU state of an in-process Lab (train.Lab) and closes the
	// connection of a Client (the session keeps running; `nvg session stop NAME` ends it).
	// Later calls fail.
	Close() error

	// ForwardBackward runs the student's forward and backward on the batch of the next step
	// (step Info.Step+1: its NB training windows and their cached teacher top-k) and
	// accumulates the gradients into the gradient buffers, as nvgkit.Step does (call
	// ZeroGrads first for the gradient of this batch alone). StepStats.Step is the step the
	// batch belongs to; Loss the batch's mean KL(teacher top-k ‖ student) per token in nats;
	// GradNorm is NaN (not computed). The step counter does not move: a second call
	// accumulates the same batch again. When the Setup trains signs, the backward also
	// updates the sign scores (as every step's does) and adds to the captured sign gradients.
	ForwardBackward() (StepStats, error)
	// ClipGrads computes the global L2 norm of the gradients and, when it is above maxNorm,
	// scales every gradient by maxNorm/norm (f32). It returns the norm before clipping (NaN or
	// +Inf are returned as they are, nothing scaled). Errors: maxNorm not finite and > 0.
	ClipGrads(maxNorm float64) (norm float64, err error)
	// AdamStep ends the current step (Info.Step+1): when the last ForwardBackward's loss and
	// the gradients' norm are finite it applies Adam at the schedule's learning rate
	// LRAt(step) (the Adam step counter, which counts only applied updates, advances) and,
	// when the Setup trains signs, flips the signs whose scores reached Signs.Tau
	// (StepStats.SignFlips); otherwise it makes no update, clears the gradients and counts the
	// step as skipped (as train.Trainer does). Either way the step counter advances by one
	// and the step is appended to the history. The returned StepStats has the step's loss
	// (the last ForwardBackward's since the previous AdamStep; NaN when there was none), its
	// gradient norm (the one ClipGrads returned since; else computed now), LR, Skipped and
	// SignFlips. Gradients are not cleared after an update (ZeroGrads; Step does it at the
	// start of each step).
	AdamStep() (StepStats, error)
	// ZeroGrads sets every gradient to zero, the captured sign gradients (CaptureSignGrad)
	// included.
	ZeroGrads() error
	// Step runs n ≥ 1 full training steps as train.Trainer does: per step ZeroGrads,
	// ForwardBackward, the PreOptimizer hook (when given; not in a step whose loss is not
	// finite, which is skipped), ClipGrads(Setup.Train.ClipNorm) (or the plain norm when
	// ClipNorm is 0) and AdamStep. It returns one StepStats per step
	// done. Progress (phase "step", Done/Total of this call) goes to OnProgress after every
	// step; with EvalEvery(m) the student is evaluated after every m-th step of the call and
	// StepStats.EvalPPL set. Interrupt or the context stop it between steps: it returns the
	// steps done and an error wrapping ErrInterrupted; the state is that after the last step
	// done. Any other failure also returns the steps done before it (their updates stay); the
	// failing step made no update. After Step the gradient buffers hold the last step's
	// gradients, clipped. A hook must not call Setup, Step, Restore or Close (an error).
	//
	// Step equals, bit for bit, the loop a remote client runs to call a hook in its own
	// process: per step ZeroGrads; st := ForwardBackward(); when st.Finite, the hook and
	// then, when Setup.Train.ClipNorm > 0, ClipGrads(ClipNorm); AdamStep.
	Step(n int, opts ...Option) ([]StepStats, error)
	// History returns every step done since Setup (or restored from a checkpoint or
	// snapshot) and every evaluation made, in order.
	History() (History, error)

	// Names returns the names of the student's trained vectors in load order (see the
	// package documentation).
	Names() ([]string, error)
	// Param returns a copy of the named trained vector's current values (f32, its length
	// is the vector's: [m], [r] or [n] for a metric scale, [hidden] or [head_dim] for a gain).
	Param(name string) ([]float32, error)
	// SetParam writes v into the named trained vector. Errors: an unknown name, a length
	// other than the vector's (want/got), a value that is not finite, or, for a BLR metric
	// scale, beyond f16's range (|x| > 65504: the .cmf stores the scales as f16; the error
	// names the vector, the index and the limit). Adam's moments and the gradients are left
	// as they are.
	SetParam(name string, v []float32) error
	// Grad returns a copy of the named vector's gradient buffer (what the steps since the
	// last ZeroGrads accumulated, after any clipping or SetGrad).
	Grad(name string) ([]float32, error)
	// SetGrad writes v into the named vector's gradient buffer (as Param/SetParam), e.g. from
	// a PreOptimizer hook before Adam. Errors as SetParam's, but any finite f32 value is taken.
	SetGrad(name string, v []float32) error
	// GradNorms returns the L2 norms of the gradient buffers now (before clipping when read
	// from a PreOptimizer hook, clipped after Step) per decoder layer and kind, and the
	// global norm.
	GradNorms() (GradNorms, error)

	// The sign matrices (DESIGN.md §6 "Sign learning"). Every BLR projection's path p holds
	// two ±1 factors: U [m, r] (output features × rank) and V [r, n] (rank × input features).
	// Ranks ≥ SignShape.Live are padding: their bits never change, their scores and gradients
	// are 0. Element e = row·Cols + col of a matrix is, in every call below, bit e%8 (least
	// significant first) of byte e/8 of its packed bits, where 1 means +1 and 0 means −1 (the
	// .cmf payload's layout; SignValue reads one), and index e of its scores and gradient.
	// Errors name the bad argument; an unknown name lists the nearest names.

	// SignNames returns the names of the student's sign matrices in load order: per BLR
	// projection, per path p, "<tensor>.p<p>.U" then "<tensor>.p<p>.V"
	// ("model.layers.0.mlp.down_proj.weight.p0.U", as nvgkit and the checkpoints name them).
	// They exist whether or not the Setup trains signs.
	SignNames() ([]string, error)
	// SignShape returns the named sign matrix's shape: Rows × Cols signs, its live ranks and
	// its decoder layer. Errors: an unknown name.
	SignShape(name string) (SignShape, error)
	// Signs returns a copy of the named matrix's packed sign bits, SignShape.Bytes() =
	// Rows·Cols/8 bytes in the layout above. Errors: an unknown name.
	Signs(name string) ([]byte, error)
	// SetSigns overwrites the named matrix's sign bits with bits (Signs' layout). The bits of
	// padded ranks must equal the current ones. Scores, gradients and Adam moments are left
	// as they are (ApplySignFlips also resets the flipped signs' scores). Errors: sign
	// training off (Setup.Train.TrainSigns: only then do snapshots and checkpoints carry the
	// signs), an unknown name, len(bits) ≠ Bytes(), a changed padded bit (its element, row and
	// column).
	SetSigns(name string, bits []byte) error
	// SignScores returns a copy of the named matrix's int8 flip scores, Rows·Cols values
	// (element e as above) in −127…127: positive is accumulated pressure to flip; a score ≥
	// Setup.Train.Signs.Tau flips at the next applied AdamStep (within the per-matrix budget)
	// and is reset to 0; padded ranks hold 0. Errors: sign training off, an unknown name.
	SignScores(name string) ([]int8, error)
	// SetSignScores overwrites the named matrix's scores (SignScores' layout). Errors: sign
	// training off, an unknown name, len(scores) ≠ Elements(), a score of −128, a non-zero
	// score on a padded rank (each named by its element).
	SetSignScores(name string, scores []int8) error
	// CaptureSignGrad starts (on) or stops (off) keeping the named matrix's sign gradient for
	// SignGrad. While it is on, every backward (ForwardBackward, Step, the steps' primitives)
	// also computes the straight-through gradients of the matrix's projection (all its paths'
	// U and V: 4 bytes per sign of GPU memory, one extra sign-gradient pass per backward when
	// the Setup does not train signs) and adds them into a buffer that ZeroGrads clears, as it
	// clears the other gradients. Off frees it (once no matrix of the projection is
	// captured); calling it with the state a matrix already has does nothing. Captures work
	// with sign training on or off, are not part of snapshots or checkpoints, and end with a
	// Setup that replaces the Lab. GradCheck leaves them (and the scores) as they were.
	// Errors: an unknown name.
	CaptureSignGrad(name string, on bool) error
	// SignGrad returns the named matrix's captured sign gradient: Rows·Cols f32 values
	// (element e as above), G_e = ∂L/∂s_e, the gradient of the step's loss L (the mean KL per
	// token whose gradient Grad holds) with respect to sign e taken as a real value, at the
	// signs the backwards ran with — what the backwards since the later of the last ZeroGrads
	// and the capture's start added (after Step(n): the last step's, computed before that
	// step's flips). Padded ranks hold exactly 0. G_e·s_e > 0 means gradient descent wants
	// sign e flipped: that is the pressure the scores accumulate (normalised by RMS(G) over
	// the matrix). Errors: an unknown name, the matrix not captured (CaptureSignGrad), no
	// backward since its capture began.
	SignGrad(name string) ([]float32, error)
	// ApplySignFlips flips the named matrix's signs where mask (Signs' layout, Bytes() bytes)
	// has a 1 bit — an exact XOR of the packed bits — and resets those signs' scores to 0, as
	// the flip rule does; it returns the number of signs flipped (the mask's 1 bits). A
	// notebook's own flip rule builds the mask (SignShape.FlipMask). Hand flips are not
	// counted in StepStats.SignFlips. Errors: sign training off, an unknown name, len(mask) ≠
	// Bytes(), a 1 bit on a padded rank (its element).
	ApplySignFlips(name string, mask []byte) (flipped int, err error)

	// Snapshot stores the student's trained values, Adam moments, step counters and history
	// — and, when the Setup trains signs, every sign matrix's bits and scores (1 + 1/8 bytes
	// per sign) — on the host under tag (replacing an older snapshot of that tag). Errors: an
	// empty tag.
	Snapshot(tag string) error
	// Restore returns the Lab to the state Snapshot(tag) stored: trained values (sign bits and
	// scores included when the Setup trains signs), Adam moments, step counter (so the next
	// step replays the same windows at the same learning rate, bit for bit) and history.
	// Gradients and captured sign gradients are left as they are. Errors: an unknown tag
	// (listing the tags there are).
	//
	//lab:nohook
	Restore(tag string) error
	// Snapshots returns the tags of the stored snapshots, sorted.
	Snapshots() ([]string, error)
	// Checkpoint writes the state (trained values — with TrainSigns the sign bits and scores
	// too —, Adam moments, step counters, history and the settings) atomically to dir/checkpoint-NNNNNN.safetensors (NNNNNN: the step) and
	// returns the file's path; Setup with Resume set to the file or the directory restores it.
	// dir is created when missing.
	//
	//lab:abspath dir
	Checkpoint(dir string) (path string, err error)
	// Export writes the student as it is now to path as a .cmf file (its metric scales
	// rounded to f16, as nvg distill's student.cmf), atomically.
	//
	//lab:abspath path
	Export(path string) error

	// Eval returns the held-out mean next-token loss and perplexity of the student (and the
	// teacher's, computed once per window count and kept) on the first `windows` held-out
	// windows (0: all Setup.EvalWindows). The result is appended to the history; one on all
	// windows that directly follows a step is also that step's EvalPPL there. Progress
	// (phase "eval", after each batch of NB windows) goes to OnProgress. Errors: windows < 0
	// or more than there are; a student loss that is not finite (nothing is appended): the
	// error names the first trained value that is NaN or ±Inf, or, when all are finite, the
	// first hidden state that is not (a layer whose f32 arithmetic overflowed).
	Eval(windows int, opts ...Option) (EvalResult, error)
	// HiddenStates returns the hidden states of one window in the teacher or the student:
	// layer index 0 is the embedding, l = 1 … L−1 the output of decoder layer l−1 (the
	// residual stream), L (Info.Layers) the last layer's output after the final norm (the
	// head's input), as nvgkit.Trace. layers nil means all L+1 (an empty non-nil list
	// travels to a session as nil: all layers). Errors: an unknown net, a bad
	// window (see Window), a layer index outside 0…L.
	HiddenStates(net NetKind, w Window, layers []int) (HiddenStates, error)
	// Logits returns the full next-token logits [vocab] (f32) of the teacher or the student at
	// position pos (0-based, < the window's length) of window w.
	Logits(net NetKind, w Window, pos int) ([]float32, error)
	// TopK returns the k most probable next tokens (1 ≤ k ≤ 64) of the teacher or the student
	// at position pos of window w, with their probabilities under the full softmax, and the
	// probability of the window's actual next token when it has one.
	TopK(net NetKind, w Window, pos, k int) (TopKResult, error)
	// Tokenize returns the token ids of text under the Lab's tokenizer (for Window.Tokens).
	Tokenize(text string) ([]int, error)
	// Detokenize returns the text of ids. Errors: an id outside the vocabulary.
	Detokenize(ids []int) (string, error)

	// GradCheck checks the GPU's analytic gradient on the live state: for chosen coordinates
	// of chosen trained vectors, the GPU gradient of a batch (nvgkit.Step) against the float64
	// host reference (host.Net.StudentLossGrad of the same student with the live values),
	// the host's central finite difference (host StudentLoss) and the GPU's (nvgkit.LossOnly),
	// with their relative errors against notebook 02's tolerances. The Lab's state —
	// trained values, gradients, Adam moments, counters, sign scores and captured sign
	// gradients — is the same after the call as before. Progress (phase "gradcheck": 0 at
	// the start, then the GPU gradient, each GPU finite difference, the host's gradient and
	// each host finite difference) goes to OnProgress. Errors: GradCheckSpec.Validate's, an unknown name; the host reference missing
	// (nvgkit's Lab needs the nvgkit/gradcheck package linked in; the session server has it).
	GradCheck(spec GradCheckSpec, opts ...Option) (GradCheckResult, error)
}

// NetKind selects the teacher or the student net in the inspection calls.
type NetKind int

const (
	// Teacher is the dense teacher net.
	Teacher NetKind = iota
	// Student is the compressed student being trained.
	Student
)

// String is "teacher" or "student" (for a value that is neither, "NetKind(n)").
func (k NetKind) String() string {
	if !k.Valid() {
		return fmt.Sprintf("NetKind(%d)", int(k))
	}
	return [...]string{Teacher: "teacher", Student: "student"}[k]
}

// Valid reports whether k is Teacher or Student.
func (k NetKind) Valid() bool { return k == Teacher || k == Student }

// Setup describes what a Lab loads and how it trains. Start from DefaultSetup (the
// defaults of nvg distill); every number holds exactly its value (0 is not a default,
// except where a field says so).
type Setup struct {
	// Teacher is the teacher model: an HF checkpoint directory, a .cmf file or a sharded CMF
	// directory; "" is the embedded tiny teacher (qwen35-tiny-go).
	Teacher string
	// Tokenizer is a tokenizer.json file (or a directory holding one); "" finds it beside
	// the teacher, or uses the embedded tiny teacher's for the embedded teacher.
	Tokenizer string
	// Student is a compressed student .cmf to train; "" compresses the teacher with
	// BitsPerWeight, Paths, Init and Seed (float64 products on the CPU, as nvg distill).
	Student string
	// BitsPerWeight is the compression target, in (0, 32] (nvg distill --bpw).
	BitsPerWeight float64
	// Paths is the BLR path mode: "auto", "1" or "2" (nvg distill --paths).
	Paths string
	// Init is the compression's initial factorisation (nvg distill --init;
	// train.Setup.Init): "dual-svid" (also ""; Dual-SVID of each weight) or "refine"
	// (DefaultSetup's: a calibration pass of the teacher over training windows, then
	// Dual-SVID refined in the input-weighted metric: DESIGN.md §5 "Data-aware
	// initialisation").
	Init string
	// Calibration sizes the calibration pass of Init "refine" (train.CalibrationConfig); its
	// zero value means DefaultCalibration().
	Calibration CalibrationConfig
	// TrainFiles and EvalFiles are the training and held-out corpus files (globs and
	// directories expanded as nvg distill --train-files does); both nil is the embedded
	// default corpus (the Go standard library, model card split). They go together.
	TrainFiles, EvalFiles []string
	// Train is the schedule (train.TrainConfig's fields of the same names).
	Train Train
	// Resume, when not "", is a checkpoint file or directory written by Lab.Checkpoint: the
	// state is restored from it after the teacher pass (its settings must match these).
	Resume string
	// Replace lets Setup replace a Lab that was set up with another Setup.
	Replace bool
}

// Train is the schedule of a Lab: the fields of train.TrainConfig that shape the steps, with
// the same names, meanings and defaults (DefaultSetup().Train equals train.DefaultTrainConfig's
// fields; a test checks it). Steps sets the number of distinct training windows (Windows 0:
// Steps·NB) and the span of the learning-rate schedule (ScheduleSteps 0: Steps); a Lab may
// step past Steps: the windows are cycled and the learning rate stays at the floor.
type Train struct {
	// Steps is the planned number of steps (≥ 1).
	Steps int
	// NB windows of T tokens per step (each ≥ 1).
	NB, T int
	// Windows is the number of distinct training windows, 0 or a positive multiple of NB.
	Windows int
	// K is the number of teacher top-k entries per token (1…64, ≤ vocabulary).
	K int
	// LR is the peak learning rate (finite, > 0); Warmup the linear warm-up steps (0: none);
	// MinLRFrac the cosine floor as a fraction of LR (≤ 1).
	LR        float64
	Warmup    int
	MinLRFrac float64
	// ClipNorm is the global gradient norm Step clips to (finite; 0: no clipping).
	ClipNorm float64
	// EvalWindows is the number of held-out windows of T+1 tokens (≥ 1).
	EvalWindows int
	// Seed draws the windows and seeds the compression.
	Seed uint64
	// ScheduleSteps is the number of steps the learning-rate schedule spans (0: Steps).
	ScheduleSteps int
	// KeepActivations keeps every layer's activations for the backward instead of
	// recomputing them: faster steps, more GPU memory, bit-identical results
	// (train.TrainConfig.KeepActivations).
	KeepActivations bool
	// ActivationBudget is the GPU bytes the step may spend on kept activations unasked: all of
	// them when they fit, else without the BLR outputs c when those fit, else none
	// (train.TrainConfig.ActivationBudget). DefaultSetup: 1 GiB; 0: only KeepActivations.
	ActivationBudget int64
	// TrainSigns, when true, also trains the BLR factors' signs (train.TrainConfig.TrainSigns,
	// nvg distill --train-signs; DESIGN.md §6 "Sign learning"): every backward adds to each
	// sign's int8 score, and every applied AdamStep then flips, per sign matrix, the signs of
	// the highest scores ≥ Signs.Tau (at most Signs.MaxFlipFrac of its live signs), counted
	// per layer in StepStats.SignFlips. Snapshots and checkpoints then carry the sign bits and
	// scores, and SetSigns, ApplySignFlips, SignScores and SetSignScores may be called. Off in
	// DefaultSetup (the metric alone is trained).
	TrainSigns bool
	// Signs holds the sign-learning knobs (train.TrainConfig.Signs); its zero value means
	// DefaultSigns(). Validate checks them whether or not TrainSigns is set.
	Signs SignConfig
	// FinishSteps is the length of the scale-only finish, the last FinishSteps of the Steps
	// planned (train.TrainConfig.FinishSteps, nvg distill --finish-steps): those steps freeze
	// the signs (no score updates, no flips) and train the metric and the norm gains on the
	// KL at the schedule's learning rates. 0: none. It needs TrainSigns and leaves at least
	// one KL step. Info.Phases lists the phases; StepStats.Phase names each step's.
	FinishSteps int
	// HiddenLoss, when not "", adds the hidden-state term to every step's loss
	// (train.TrainConfig.HiddenLoss, nvg distill --hidden-loss; DESIGN.md §6 "Hidden-state
	// loss"): "mse" (‖h_S − h_T‖²/‖h_T‖² per token) or "cosine" (1 − cos), weighted by
	// HiddenWeight, over the outputs of the decoder layers HiddenLayers selects ("all",
	// "every:K" or a list such as "3,7"); StepStats.KL and .Hidden then hold the loss's
	// parts. DefaultSetup: "mse", HiddenWeight 1, HiddenLayers "every:4"; "": the KL alone.
	HiddenLoss   string
	HiddenWeight float64
	HiddenLayers string
	// BlockSteps is the length of the block-wise reconstruction phase per decoder layer
	// (train.TrainConfig.BlockSteps, nvg distill --block-steps; DESIGN.md §6 "Block-wise
	// reconstruction"): the first BlockSteps·Info.Layers of the Steps train layer 0, 1, … in
	// turn, each alone, to reproduce the teacher's output of the layer from the student's
	// own input (no KL; StepStats.Loss is then the layer's normalised MSE), each layer's
	// optimizer started afresh; at least one KL step stays after them. 0 (DefaultSetup):
	// none. Info.Phases lists the phases, StepStats.Phase and .Layer name each step's.
	BlockSteps int
}

// CalibrationConfig sizes the calibration pass of Setup.Init "refine" (train.CalibrationConfig's
// fields, names and defaults): Windows windows of T tokens drawn from the training split,
// run through the teacher once; the Gram of every projection input of at most GramMax
// features is kept (the second moments of all). Its zero value means DefaultCalibration().
type CalibrationConfig struct {
	Windows, T, GramMax int
}

// DefaultCalibration returns the calibration pass of nvg distill --init refine: 16 windows of
// 256 tokens, Grams of inputs up to 4096 features (train.DefaultCalibration; a test keeps
// them equal).
func DefaultCalibration() CalibrationConfig {
	return CalibrationConfig{Windows: 16, T: 256, GramMax: 4096}
}

// Phase is one part of a Lab's schedule (train.Phase): steps First…Last (1-based,
// inclusive) of the kind Kind: "block" (the block-wise reconstruction of decoder layer
// Layer: that layer alone on its output's normalised MSE), "kl" (end to end on the KL; with
// TrainSigns the signs too) or "finish" (the scale-only finish: signs frozen). Layer is 0
// for the kinds other than "block". Steps past the plan belong to the last.
type Phase struct {
	Kind        string
	Layer       int
	First, Last int
}

// Name is the phase as logs and plots show it: Kind, and for a block phase its layer
// ("block 3").
func (p Phase) Name() string {
	if p.Kind == "block" {
		return fmt.Sprintf("block %d", p.Layer)
	}
	return p.Kind
}

// SignConfig holds the sign-learning knobs of a Setup (nvgkit.SignConfig's fields, names and
// units; DESIGN.md §6 "Sign learning"): every backward sets each sign's score to
// clamp(floor(Beta·score + Alpha·(G·b)/RMS(G) + u), ±127), u ∈ [0, 1) a hash of Seed, the
// step, the matrix and the sign (stochastic rounding), and after each applied Adam step
// every sign matrix flips its signs of the highest scores ≥ Tau, at most
// ceil(MaxFlipFrac · its live signs) of them, resetting their scores to 0. Its zero value
// stands for DefaultSigns(); a non-zero value is used as it is (start from DefaultSigns()
// to change one knob).
type SignConfig struct {
	// Alpha is the score units per unit of normalised pressure (G·b)/RMS(G), finite and > 0.
	Alpha float32
	// Beta is the score's decay per backward, in [0, 1].
	Beta float32
	// Tau is the least score that flips, 1…127.
	Tau int
	// MaxFlipFrac is the most flips of one matrix per step, as a fraction of its live signs,
	// in [0, 1].
	MaxFlipFrac float64
	// Seed selects the stochastic rounding (any value).
	Seed uint32
}

// DefaultSigns returns the sign-learning knobs of nvg distill (nvgkit.DefaultSigns; a test
// keeps them equal): Alpha 4, Beta 0.95, Tau 48, MaxFlipFrac 0.001, Seed 1. A steady pressure
// of p RMS settles at a score of 4p/(1 − 0.95) = 80p, so signs under a steady pressure above
// 0.6 RMS flip.
func DefaultSigns() SignConfig {
	return SignConfig{Alpha: 4, Beta: 0.95, Tau: 48, MaxFlipFrac: 1e-3, Seed: 1}
}

// Resolved returns c, or DefaultSigns() when c is the zero value.
func (c SignConfig) Resolved() SignConfig {
	if c == (SignConfig{}) {
		return DefaultSigns()
	}
	return c
}

// Validate reports the first knob of c (resolved) outside its range, naming it as a field of
// Setup.Train.Signs.
func (c SignConfig) Validate() error {
	r := c.Resolved()
	const hint = " (the zero SignConfig means DefaultSigns(); start from DefaultSigns() to change one knob)"
	switch {
	case !(r.Alpha > 0) || math.IsInf(float64(r.Alpha), 0):
		return fmt.Errorf("session: Setup.Train.Signs.Alpha = %g, want a finite value > 0%s", r.Alpha, hint)
	case !(r.Beta >= 0 && r.Beta <= 1):
		return fmt.Errorf("session: Setup.Train.Signs.Beta = %g, want a value in [0, 1]%s", r.Beta, hint)
	case r.Tau < 1 || r.Tau > 127:
		return fmt.Errorf("session: Setup.Train.Signs.Tau = %d, want 1…127%s", r.Tau, hint)
	case !(r.MaxFlipFrac >= 0 && r.MaxFlipFrac <= 1):
		return fmt.Errorf("session: Setup.Train.Signs.MaxFlipFrac = %g, want a value in [0, 1]%s", r.MaxFlipFrac, hint)
	}
	return nil
}

// DefaultSetup returns the defaults of nvg distill: the embedded tiny teacher compressed to
// 1 bit per weight (paths auto, Init "refine" with DefaultCalibration, seed 1), the
// embedded corpus, 24 steps of 4 windows × 64 tokens, top-32, lr 0.05 with 3 warm-up steps
// and cosine decay to 10 %, gradients clipped to norm 1, 8 held-out windows, activations
// kept when they fit 1 GiB, the hidden-state loss beside the KL (HiddenLoss "mse", weight 1,
// HiddenLayers "every:4"), the metric alone trained (TrainSigns false, Signs zero:
// DefaultSigns when turned on). Refine and the hidden-state loss are the best combination
// measured at this budget (DESIGN.md §6 "Defaults"); set Init "dual-svid" and HiddenLoss
// "" for the plain Dual-SVID start and the KL alone.
func DefaultSetup() Setup {
	return Setup{BitsPerWeight: 1, Paths: "auto", Init: "refine",
		Train: Train{Steps: 24, NB: 4, T: 64, K: 32, LR: 0.05, Warmup: 3, MinLRFrac: 0.1, ClipNorm: 1, EvalWindows: 8, Seed: 1, ActivationBudget: 1 << 30,
			HiddenLoss: "mse", HiddenWeight: 1, HiddenLayers: "every:4"}}
}

// Validate reports the first field of s that is out of range, naming it (the same ranges as
// train.TrainConfig.Validate and nvg distill's flags). Files are checked by Setup.
func (s Setup) Validate() error {
	t := s.Train
	switch {
	case s.Student == "" && !(s.BitsPerWeight > 0 && s.BitsPerWeight <= 32):
		return fmt.Errorf("session: Setup.BitsPerWeight = %g, want a value in (0, 32]", s.BitsPerWeight)
	case s.Student == "" && s.Paths != "auto" && s.Paths != "1" && s.Paths != "2":
		return fmt.Errorf("session: Setup.Paths = %q, want \"auto\", \"1\" or \"2\"", s.Paths)
	case s.Student == "" && s.Init != "" && s.Init != "dual-svid" && s.Init != "refine":
		return fmt.Errorf("session: Setup.Init = %q, want \"dual-svid\" or \"refine\"", s.Init)
	case (s.TrainFiles == nil) != (s.EvalFiles == nil):
		return errors.New("session: Setup.TrainFiles and Setup.EvalFiles go together (both nil: the embedded corpus)")
	}
	for _, r := range []struct {
		bad   bool
		field string
		value any
		want  string
	}{
		{t.Steps < 1, "Steps", t.Steps, "≥ 1 (start from DefaultSetup())"},
		{t.NB < 1, "NB", t.NB, "≥ 1"},
		{t.T < 1, "T", t.T, "≥ 1"},
		{t.Windows < 0 || t.NB > 0 && t.Windows%t.NB != 0, "Windows", t.Windows, fmt.Sprintf("0 (Steps·NB) or a positive multiple of NB = %d", t.NB)},
		{t.K < 1 || t.K > 64, "K", t.K, "1…64"},
		{!(t.LR > 0) || math.IsInf(t.LR, 0), "LR", t.LR, "a finite value > 0"},
		{t.Warmup < 0, "Warmup", t.Warmup, "≥ 0"},
		{t.MinLRFrac > 1 || math.IsNaN(t.MinLRFrac), "MinLRFrac", t.MinLRFrac, "≤ 1"},
		{!(t.ClipNorm >= 0) || math.IsInf(t.ClipNorm, 0), "ClipNorm", t.ClipNorm, "a finite value ≥ 0 (0: no clipping)"},
		{t.EvalWindows < 1, "EvalWindows", t.EvalWindows, "≥ 1"},
		{t.ScheduleSteps < 0, "ScheduleSteps", t.ScheduleSteps, "≥ 0 (0: Steps)"},
		{t.ActivationBudget < 0, "ActivationBudget", t.ActivationBudget, "≥ 0 bytes (0: keep only with KeepActivations)"},
		{t.FinishSteps < 0 || t.Steps > 0 && t.FinishSteps >= t.Steps, "FinishSteps", t.FinishSteps, fmt.Sprintf("0 (none) or fewer than Steps = %d", t.Steps)},
		{t.FinishSteps > 0 && !t.TrainSigns, "FinishSteps", t.FinishSteps, "0 without TrainSigns (the finish freezes the signs)"},
		{t.HiddenLoss != "" && t.HiddenLoss != "mse" && t.HiddenLoss != "cosine", "HiddenLoss", t.HiddenLoss, `"mse", "cosine" or "" (off)`},
		{t.HiddenLoss != "" && (!(t.HiddenWeight >= 0) || math.IsInf(t.HiddenWeight, 0)), "HiddenWeight", t.HiddenWeight, "a finite value ≥ 0"},
	} {
		if r.bad {
			return fmt.Errorf("session: Setup.Train.%s = %v, want %s", r.field, r.value, r.want)
		}
	}
	if err := t.Signs.Validate(); err != nil {
		return err
	}
	return s.Calibration.Validate()
}

// Resolved returns c, or DefaultCalibration() when c is the zero value.
func (c CalibrationConfig) Resolved() CalibrationConfig {
	if c == (CalibrationConfig{}) {
		return DefaultCalibration()
	}
	return c
}

// Validate reports the first field of c (resolved) out of range, naming it as a field of
// Setup.Calibration (Check's rule).
func (c CalibrationConfig) Validate() error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("session: Setup.%w", err)
	}
	return nil
}

// Check reports the first field of c (resolved) out of range — Windows or T < 1, GramMax
// < 0 — as "Calibration.Field = value, want …", without a package prefix: the one rule of
// both this Setup and train.Setup (whose CalibrationConfig has the same fields).
func (c CalibrationConfig) Check() error {
	r := c.Resolved()
	switch {
	case r.Windows < 1:
		return fmt.Errorf("Calibration.Windows = %d, want ≥ 1", r.Windows)
	case r.T < 1:
		return fmt.Errorf("Calibration.T = %d, want ≥ 1", r.T)
	case r.GramMax < 0:
		return fmt.Errorf("Calibration.GramMax = %d, want ≥ 0 (0: second moments only)", r.GramMax)
	}
	return nil
}

// Equal reports whether s and o describe the same Lab (every field but Replace equal), the
// test Setup uses to make a repeated call a no-op.
func (s Setup) Equal(o Setup) bool {
	s.Replace, o.Replace = false, false
	return s.Teacher == o.Teacher && s.Tokenizer == o.Tokenizer && s.Student == o.Student &&
		s.BitsPerWeight == o.BitsPerWeight && s.Paths == o.Paths && s.Init == o.Init && s.Calibration == o.Calibration &&
		equalStrings(s.TrainFiles, o.TrainFiles) &&
		equalStrings(s.EvalFiles, o.EvalFiles) && s.Train == o.Train && s.Resume == o.Resume
}

func equalStrings(a, b []string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Info describes a set-up Lab.
type Info struct {
	// Ready is false before Setup (every other field is then zero).
	Ready bool
	// Setup is the Setup the Lab was made with.
	Setup Setup
	// Device describes the GPU adapter.
	Device string
	// TensorCores says whether the Lab's GEMMs run on the device's tensor cores (cooperative
	// matrices: f16 operands, f32 accumulation): "on (16×16×16 f16→f32, subgroup 32)" or
	// "off: reason" (gpu.TensorCores.String; NVG_TENSOR_CORES=off|on in the session's
	// environment decides where the device allows).
	TensorCores string
	// Teacher and Student name the models ("embedded qwen35-tiny-go" for the default; the
	// student's file, or "compressed from the teacher").
	Teacher, Student string
	// Layers, Hidden and Vocab are the architecture's sizes; LayerTypes the kind of every
	// decoder layer ("linear_attention" or "full_attention").
	Layers, Hidden, Vocab int
	LayerTypes            []string
	// Trainables is the number of trained vectors, TrainedValues the number of values in
	// them (f32 each).
	Trainables, TrainedValues int
	// BitsPerWeight is the student's overall storage cost of its compressed linears (0 when
	// unknown: a student loaded from a file without a report).
	BitsPerWeight float64
	// Compression has one row per compressed tensor when Setup compressed the teacher.
	Compression []TensorReport
	// Phases are the schedule's phases in order (Phase; Setup.Train.BlockSteps and
	// FinishSteps).
	Phases []Phase
	// TrainWindows and EvalWindows are the numbers of windows of T+1 tokens drawn;
	// TrainTokens and EvalTokens the lengths of the token streams they were drawn from.
	TrainWindows, EvalWindows int
	TrainTokens, EvalTokens   int
	// TeacherPPL and CompressedPPL are the held-out perplexities of the teacher and of the
	// student before training (on all EvalWindows windows).
	TeacherPPL, CompressedPPL float64
	// Step is the number of steps done (the next ForwardBackward uses step Step+1's batch);
	// AdamStep the number of Adam updates applied; Skipped the steps skipped (non-finite).
	Step, AdamStep, Skipped int
	// TeacherSeconds is the teacher pass's wall time, SetupSeconds Setup's.
	TeacherSeconds, SetupSeconds float64
	// Activations says what the student's step keeps for its backward and its GPU bytes
	// (Train.KeepActivations and ActivationBudget; train.Trainer.Activations).
	Activations string
	// Snapshots are the stored snapshot tags, sorted.
	Snapshots []string
}

// TensorReport is one compressed tensor of the student (compress.TensorReport's fields).
type TensorReport struct {
	// Name is the tensor, Kind its projection (q_proj, …, down_proj), Layer its decoder
	// layer (−1: none).
	Name, Kind string
	Layer      int
	// Shape is [m, n] (output, input features); Rank and Paths its BLR form.
	Shape       []int
	Rank, Paths int
	// BitsPerWeight is its storage cost; RelErr ‖W − Ŵ‖_F / ‖W‖_F.
	BitsPerWeight, RelErr float64
	// WeightedRelErr is the input-weighted error of the calibration (Init "refine": the
	// relative RMS output error on its inputs; 0 without calibration); InitRelErr and
	// InitWeightedRelErr are RelErr and WeightedRelErr of the refinement's Dual-SVID start
	// (0 for Init "dual-svid"). compress.TensorReport documents each.
	WeightedRelErr, InitRelErr, InitWeightedRelErr float64
}

// StepStats describes one training step (or one ForwardBackward).
type StepStats struct {
	// Step is the 1-based step the batch belongs to.
	Step int
	// Loss is the batch's mean KL(teacher top-k ‖ student) per token (nats); NaN when no
	// ForwardBackward ran in the step.
	Loss float64
	// GradNorm is the global gradient L2 norm before clipping; NaN when not computed
	// (ForwardBackward) or when the step was skipped before the norm was known.
	GradNorm float64
	// LR is the learning rate of the step (the schedule's LRAt(Step)); 0 from
	// ForwardBackward.
	LR float64
	// Skipped is true when the loss or the gradient norm was not finite: no update was made.
	Skipped bool
	// Finite is true when the loss and every gradient are finite (ForwardBackward: the step
	// can be applied; AdamStep and Step: the step was applied, !Skipped).
	Finite bool
	// Tokens is the number of predicted tokens in the batch (NB·T).
	Tokens int
	// KL and Hidden are Loss's parts when the Setup has a hidden-state loss
	// (Train.HiddenLoss): the mean KL and the unweighted hidden-state loss, Loss =
	// KL + HiddenWeight·Hidden; both 0 otherwise.
	KL, Hidden float64
	// EvalPPL is the held-out perplexity when the step ended with an evaluation (Step's
	// EvalEvery option), else 0.
	EvalPPL float64
	// Note, when not "", says once what the caller should know about this step: the first
	// step past the planned schedule (Setup.Train.Steps) says that the cosine schedule
	// ended and the learning rate stays at its floor from there on.
	Note string
	// SignFlips is, when the Setup trains signs, the number of signs the step's flip rule
	// flipped in each decoder layer (index = layer, len = Info.Layers; zeros for a skipped
	// step, which flips nothing); nil otherwise, in the finish phase (signs frozen), from
	// ForwardBackward, and for steps restored from a checkpoint (it keeps no flip counts).
	// Hand flips (ApplySignFlips) are not counted.
	SignFlips []int
	// Phase is the kind of the step's phase ("block", "kl" or "finish"; Info.Phases); Layer
	// the decoder layer of a block step (0 otherwise), whose Loss is the layer's
	// reconstruction error (the normalised MSE of its output against the teacher's), not a
	// KL, with no KL and Hidden parts.
	Phase string
	Layer int
	// Seconds is the step's wall time.
	Seconds float64
}

// History is what a Lab did since Setup: every step and every evaluation, in order.
type History struct {
	// Steps has one entry per step done (a Restore of an earlier snapshot cuts it back).
	Steps []StepStats
	// Evals has every evaluation made (Setup's of the untrained student first, at step 0).
	Evals []EvalResult
	// TeacherPPL is the teacher's held-out perplexity (all EvalWindows windows).
	TeacherPPL float64
}

// Losses returns the per-step losses of h (NaN for steps without a loss).
func (h History) Losses() []float64 {
	out := make([]float64, len(h.Steps))
	for i, s := range h.Steps {
		out[i] = s.Loss
	}
	return out
}

// PhaseSpans returns the phases the steps of h ran in, in order: one Phase per run of
// consecutive steps of one StepStats.Phase (and Layer), First and Last their first and last
// step (steps without a phase, restored from an older checkpoint, are left out). ui's history
// plot marks them.
func (h History) PhaseSpans() []Phase {
	var out []Phase
	for _, s := range h.Steps {
		switch n := len(out); {
		case s.Phase == "":
		case n > 0 && out[n-1].Kind == s.Phase && out[n-1].Layer == s.Layer:
			out[n-1].Last = s.Step
		default:
			out = append(out, Phase{Kind: s.Phase, Layer: s.Layer, First: s.Step, Last: s.Step})
		}
	}
	return out
}

// SignFlipSeries returns the signs flipped per decoder layer over the steps of h that carry
// StepStats.SignFlips: steps [n] (their Step numbers) and flips[l][i], layer l's flips at
// steps[i] (0 where a step has fewer layers). Both are nil when no step carries flips (a
// Setup without TrainSigns). ui.PlotSignFlips draws them.
func (h History) SignFlipSeries() (steps []float64, flips [][]float64) {
	layers := 0
	for _, s := range h.Steps {
		if s.SignFlips != nil {
			layers = max(layers, len(s.SignFlips))
		}
	}
	if layers == 0 {
		return nil, nil
	}
	flips = make([][]float64, layers)
	for _, s := range h.Steps {
		if s.SignFlips == nil {
			continue
		}
		steps = append(steps, float64(s.Step))
		for l := range flips {
			v := 0.0
			if l < len(s.SignFlips) {
				v = float64(s.SignFlips[l])
			}
			flips[l] = append(flips[l], v)
		}
	}
	return steps, flips
}

// EvalResult is one held-out evaluation.
type EvalResult struct {
	// Step is the number of steps done when it was made.
	Step int
	// Windows of T+1 tokens were evaluated, Tokens = Windows·T predicted tokens.
	Windows, Tokens int
	// StudentLoss is the student's mean next-token loss (nats), StudentPPL = exp(StudentLoss).
	StudentLoss, StudentPPL float64
	// TeacherLoss and TeacherPPL are the teacher's on the same windows.
	TeacherLoss, TeacherPPL float64
}

// GradNorms is a per-layer table of gradient L2 norms (nvgkit.LayerNorms): Norms[kind][layer]
// for the layers 0…L−1 and the kinds sorted (a BLR projection's metric — h, ℓ, g of all its
// paths — under its projection name, such as "q_proj"; a norm gain under its module name,
// such as "input_layernorm"), NaN where the layer has no such kind. The final norm's gain is
// only in Total.
type GradNorms struct {
	// Step is the number of steps done when the norms were taken.
	Step int
	// Layers are 0…L−1; Kinds sorted; Norms [len(Kinds)][len(Layers)].
	Layers []int
	Kinds  []string
	Norms  [][]float64
	// Total is the global L2 norm over every gradient (the final norm's included), in float64.
	Total float64
}

// SignShape is the shape of one sign matrix (Lab.SignShape).
type SignShape struct {
	// Name is the matrix's name ("<tensor>.p<path>.U" or ".V").
	Name string
	// Rows × Cols signs: U of a path is [m, r] (output features × rank), V is [r, n] (rank ×
	// input features); the rank r and n are multiples of 8.
	Rows, Cols int
	// Live is the number of live ranks: the columns col ≥ Live of U and the rows row ≥ Live
	// of V are rank padding (never flipped, scores and gradients 0).
	Live int
	// Layer is the decoder layer the matrix belongs to.
	Layer int
}

// IsV reports whether the matrix is a path's right factor V (its rows are ranks).
func (s SignShape) IsV() bool { return strings.HasSuffix(s.Name, ".V") }

// Elements returns Rows·Cols, the number of signs (and of scores and gradient values).
func (s SignShape) Elements() int { return s.Rows * s.Cols }

// Bytes returns Rows·Cols/8, the length of the packed bits (Signs, SetSigns and
// ApplySignFlips' mask).
func (s SignShape) Bytes() int { return s.Rows * s.Cols / 8 }

// IsLive reports whether element e (row-major, 0 ≤ e < Elements()) belongs to a live rank;
// false for padding and for e out of range.
func (s SignShape) IsLive(e int) bool {
	if e < 0 || e >= s.Elements() {
		return false
	}
	if s.IsV() {
		return e/s.Cols < s.Live
	}
	return e%s.Cols < s.Live
}

// LiveCount returns the number of live signs (Rows·Live for U, Live·Cols for V): the count
// the flip budget MaxFlipFrac is a fraction of.
func (s SignShape) LiveCount() int {
	if s.IsV() {
		return s.Live * s.Cols
	}
	return s.Rows * s.Live
}

// FlipMask returns the packed mask (Bytes() bytes, the layout of Lab.Signs) with a 1 bit at
// each of the elements elems, for ApplySignFlips. Errors: an element out of range, on a
// padded rank, or given twice.
func (s SignShape) FlipMask(elems []int) ([]byte, error) {
	mask := make([]byte, s.Bytes())
	for _, e := range elems {
		switch {
		case e < 0 || e >= s.Elements():
			return nil, fmt.Errorf("session: FlipMask %s: element %d outside 0…%d", s.Name, e, s.Elements()-1)
		case !s.IsLive(e):
			return nil, fmt.Errorf("session: FlipMask %s: element %d (row %d, column %d) is rank padding (live ranks: %d)", s.Name, e, e/s.Cols, e%s.Cols, s.Live)
		case mask[e>>3]>>(e&7)&1 != 0:
			return nil, fmt.Errorf("session: FlipMask %s: element %d given twice", s.Name, e)
		}
		mask[e>>3] |= 1 << (e & 7)
	}
	return mask, nil
}

// SignValue returns sign e of packed bits (Lab.Signs' layout): +1 where bit e%8 of byte
// e/8 is 1, −1 where it is 0. It panics when e is outside the bits, as an index does.
func SignValue(bits []byte, e int) float32 {
	if bits[e>>3]>>(e&7)&1 != 0 {
		return 1
	}
	return -1
}

// Window picks the tokens an inspection call runs on. With Tokens nil it is a window the Lab
// drew: the held-out window Index (0 ≤ Index < Info.EvalWindows), or with Train the training
// window Index (< Info.TrainWindows); its first T tokens are the input and its last token
// the target of the last position. With Tokens set (1 … T ids in the vocabulary, e.g. from
// Tokenize) those are the input and Index and Train are ignored.
type Window struct {
	Train  bool
	Index  int
	Tokens []int
}

// HiddenStates are the hidden states of one window in one net.
type HiddenStates struct {
	// Net is the net they come from.
	Net NetKind
	// T is the number of tokens, H the hidden size; Tokens the input ids [T].
	T, H   int
	Tokens []int
	// Layers are the layer indices asked for (0: embedding … L: after the final norm) and
	// States[i] the hidden state of Layers[i], [T·H] f32 row-major (token-major).
	Layers []int
	States [][]float32
}

// TopKResult is the most probable next tokens at one position of a window.
type TopKResult struct {
	// Net is the net, Pos the 0-based position, Token the input id there.
	Net   NetKind
	Pos   int
	Token int
	// IDs are the k most probable next ids (most probable first, ties by the lower id),
	// Probs their probabilities under the full-vocabulary softmax (float64 from the f32
	// logits), Pieces their decoded text.
	IDs    []int
	Probs  []float64
	Pieces []string
	// Next is the window's actual next token (−1 when the window has none: the last position
	// of Window.Tokens), NextProb its probability and NextRank its 0-based rank (−1: none).
	Next     int
	NextProb float64
	NextRank int
}

// Progress is a report of a long call in progress (Setup, Step, Eval, GradCheck), passed to
// the OnProgress callback in the caller's process.
type Progress struct {
	// Phase names the work: "load", "calibrate", "compress", "corpus", "teacher", "eval",
	// "step", "gradcheck".
	Phase string
	// Done of Total units of the phase are finished (tensors, windows, steps, coordinates).
	Done, Total int
	// Step is the number of steps done; Loss the last step's loss (NaN before one);
	// EvalPPL the held-out perplexity of the evaluation made after that step in this call
	// (Step with EvalEvery), 0 when there was none: a report never repeats an older
	// evaluation (History.Evals has them all).
	Step    int
	Loss    float64
	EvalPPL float64
	// Note is the step's StepStats.Note ("" mostly).
	Note string
	// Elapsed is the phase's wall time so far.
	Elapsed time.Duration
}

// ErrInterrupted is wrapped by the error of a call that Interrupt or its context stopped at a
// boundary; the Lab's state is consistent (that after the last finished step).
var ErrInterrupted = errors.New("session: interrupted")

// Options are the options of one call (Option sets them). Implementations read them; a
// Client runs the callbacks in the caller's process.
type Options struct {
	// Context, when not nil, stops the call at its next boundary when cancelled.
	Context context.Context
	// OnProgress, when not nil, is called with the call's progress.
	OnProgress func(Progress)
	// PreOptimizer, when not nil, runs in every step of Step between ForwardBackward and
	// clipping.
	PreOptimizer PreOptimizerHook
	// EvalEvery > 0 evaluates the student after every EvalEvery-th step of a Step call.
	EvalEvery int
}

// Option sets an option of a Lab call.
type Option func(*Options)

// StepOption is an Option given to Step (the name the design uses).
type StepOption = Option

// Apply returns the Options that opts set.
func Apply(opts ...Option) Options {
	var o Options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// OnProgress makes the call report its progress to f (in the caller's process, a few times
// a second at most for a remote Lab).
func OnProgress(f func(Progress)) Option { return func(o *Options) { o.OnProgress = f } }

// WithContext makes the call stop at its next boundary when ctx is cancelled (ErrInterrupted).
func WithContext(ctx context.Context) Option { return func(o *Options) { o.Context = ctx } }

// PreOptimizer runs hook in every step of Step after the step's gradients are computed and
// before they are clipped and Adam updates the student (HF's on_pre_optimizer_step).
func PreOptimizer(hook PreOptimizerHook) Option { return func(o *Options) { o.PreOptimizer = hook } }

// EvalEvery evaluates the student on all held-out windows after every n-th step of the call
// (n ≥ 1; StepStats.EvalPPL).
func EvalEvery(n int) Option { return func(o *Options) { o.EvalEvery = n } }

// PreOptimizerHook looks at or changes the gradients of a step before the optimizer: lab is
// the Lab being stepped (Grad, SetGrad, GradNorms, Param, … may be called; Setup, Step,
// Restore and Close may not), st the step's ForwardBackward result (Step, Loss). A non-nil
// error stops Step before the step's update; Step returns it wrapped.
type PreOptimizerHook func(lab Lab, st StepStats) error

// GradCheckSpec chooses what GradCheck checks. Its zero value is notebook 02's check.
type GradCheckSpec struct {
	// Names are the trained vectors checked; nil is notebook 02's ten: h, ℓ, g of BLR
	// projections and two gains in the first GatedDeltaNet layer and in the first attention
	// layer (those of them the student has).
	Names []string
	// Coords is the number of coordinates per vector, those of largest |GPU gradient| first
	// (0: 1).
	Coords int
	// Windows and T are the batch: the first Windows windows of the next step's batch, their
	// first T tokens, with the cached teacher top-k of those positions (0: 2 and 16, as
	// notebook 02, capped at the Setup's NB and T; a value given must be at most those).
	Windows, T int
	// StepGPU is the GPU finite difference's step, relative to the value for a metric scale
	// and absolute for a gain (0: 0.03: the f32 loss is rounded to ~1e-7, so the step must be
	// large); StepHost the host's (float64; 0: 1e-3).
	StepGPU, StepHost float64
	// TolGPUHost, TolFDHost and TolFDGPU are the relative-error tolerances of GPU vs host
	// analytic, host FD vs host analytic and GPU FD vs GPU analytic (0: 1e-4, 1e-5, 1e-2,
	// notebook 02's). TolGPUHost holds where the GPU's analytic gradient runs on the f32
	// path (the WGSL kernels).
	TolGPUHost, TolFDHost, TolFDGPU float64
	// TolGPUHostCoopmat is GPU vs host's tolerance where the GPU's analytic gradient runs on
	// tensor cores (GradCheckResult.TensorCores "on (…)": cooperative-matrix GEMMs, f16
	// operands, f32 accumulation). 0: derived from f16's rounding by the Lab, TolGPUHost +
	// 2·√(2·(8·layers+1))·2⁻¹¹ — one rounding of at most 2⁻¹¹ relative per f16 GEMM in series
	// (8 per decoder layer of BLR projections and the head, forward and backward), adding in
	// quadrature, doubled for a single coordinate (DESIGN.md §8); 1.1e-2 for the tiny
	// teacher's 8 layers.
	TolGPUHostCoopmat float64
}

// Resolved returns s with its zero fields replaced by the defaults they stand for (Names
// stays nil: the implementation picks them).
func (s GradCheckSpec) Resolved() GradCheckSpec {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if s.Coords == 0 {
		s.Coords = 1
	}
	if s.Windows == 0 {
		s.Windows = 2
	}
	if s.T == 0 {
		s.T = 16
	}
	def(&s.StepGPU, 0.03)
	def(&s.StepHost, 1e-3)
	def(&s.TolGPUHost, 1e-4)
	def(&s.TolFDHost, 1e-5)
	def(&s.TolFDGPU, 1e-2)
	return s
}

// Validate reports the first field of s (resolved) out of range: Coords, Windows or T < 0;
// a step or tolerance not finite and > 0 (TolGPUHostCoopmat: ≥ 0); a repeated name.
func (s GradCheckSpec) Validate() error {
	r := s.Resolved()
	switch {
	case s.Coords < 0:
		return fmt.Errorf("session: GradCheckSpec.Coords = %d, want ≥ 0 (0: 1)", s.Coords)
	case s.Windows < 0:
		return fmt.Errorf("session: GradCheckSpec.Windows = %d, want ≥ 0 (0: 2)", s.Windows)
	case s.T < 0:
		return fmt.Errorf("session: GradCheckSpec.T = %d, want ≥ 0 (0: 16)", s.T)
	case s.TolGPUHostCoopmat < 0 || math.IsNaN(s.TolGPUHostCoopmat) || math.IsInf(s.TolGPUHostCoopmat, 0):
		return fmt.Errorf("session: GradCheckSpec.TolGPUHostCoopmat = %g, want a finite value ≥ 0 (0: derived from f16's rounding)", s.TolGPUHostCoopmat)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"StepGPU", r.StepGPU}, {"StepHost", r.StepHost}, {"TolGPUHost", r.TolGPUHost}, {"TolFDHost", r.TolFDHost}, {"TolFDGPU", r.TolFDGPU}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("session: GradCheckSpec.%s = %g, want a finite value > 0 (0: the default)", f.name, f.v)
		}
	}
	seen := map[string]bool{}
	for _, n := range s.Names {
		if seen[n] {
			return fmt.Errorf("session: GradCheckSpec.Names holds %q twice", n)
		}
		seen[n] = true
	}
	return nil
}

// GradCheckRow is one checked coordinate: element Index of trained vector Name.
type GradCheckRow struct {
	Name  string
	Index int
	// Value is the coordinate's value (f32 on the GPU).
	Value float64
	// GPU is the analytic gradient on the GPU on the path the device trains with
	// (GradCheckResult.TensorCores), Host the float64 host reference's, FDHost the host's
	// central finite difference, FDGPU the GPU's, always on the f32 path (the denominators
	// are the steps actually taken after rounding).
	GPU, Host, FDHost, FDGPU float64
	// GPUF32 is the analytic gradient on the GPU's f32 path (the WGSL kernels), FDGPU's
	// reference: GPU itself where tensor cores are off, else computed again with them off.
	GPUF32 float64
	// ErrGPUHost = |GPU − Host|/|Host|, ErrFDHost = |FDHost − Host|/|Host|, ErrFDGPU =
	// |FDGPU − GPUF32|/|GPUF32|.
	ErrGPUHost, ErrFDHost, ErrFDGPU float64
}

// Label names the coordinate for a table or a plot: "L0 in_proj_qkv p0.h[17]" for a metric
// scale, "L3 self_attn.q_norm[5]" for a gain, "norm[5]" for the final norm.
func (r GradCheckRow) Label() string {
	f := strings.Split(r.Name, ".")
	switch {
	case len(f) == 8 && f[0] == "model" && f[1] == "layers":
		return fmt.Sprintf("L%s %s %s.%s[%d]", f[2], f[4], f[6], f[7], r.Index)
	case len(f) >= 5 && f[0] == "model" && f[1] == "layers":
		return fmt.Sprintf("L%s %s[%d]", f[2], strings.Join(f[3:len(f)-1], "."), r.Index)
	case len(f) >= 2:
		return fmt.Sprintf("%s[%d]", strings.Join(f[1:len(f)-1], "."), r.Index)
	}
	return fmt.Sprintf("%s[%d]", r.Name, r.Index)
}

// GradCheckResult is GradCheck's table.
type GradCheckResult struct {
	// Step is the number of steps done (the live state checked); Windows, T and K the batch.
	Step, Windows, T, K int
	// LossGPU and LossHost are the batch's loss on the GPU (f32 per token, mean in float64;
	// on the path of GPU) and on the host (float64).
	LossGPU, LossHost float64
	// TensorCores is the path of the analytic GPU gradient (GradCheckRow.GPU): the device's
	// tensor-core status, "on (16×16×16 f16→f32, subgroup 32)" — cooperative-matrix GEMMs,
	// checked against the host with Spec.TolGPUHostCoopmat — or "off: reason" (the f32 path,
	// Spec.TolGPUHost). The GPU's finite differences run on the f32 path either way: on
	// f16-rounded activations the loss moves in steps comparable to a difference's.
	TensorCores string
	// Rows has one row per coordinate, in the order of the names.
	Rows []GradCheckRow
	// Spec is the resolved spec (Names and TolGPUHostCoopmat filled in).
	Spec GradCheckSpec
	// Worst are the largest ErrGPUHost, ErrFDHost and ErrFDGPU over the rows.
	Worst [3]float64
	// Seconds is the call's wall time.
	Seconds float64
}

// Failures lists the rows whose relative errors exceed the spec's tolerances (or are NaN),
// one line each; none when every gradient agrees.
func (r GradCheckResult) Failures() []string {
	var bad []string
	tols := [3]float64{r.TolGPUHost(), r.Spec.TolFDHost, r.Spec.TolFDGPU}
	cols := [3]string{"GPU vs host", "host FD", "GPU FD"}
	for _, row := range r.Rows {
		for k, e := range [3]float64{row.ErrGPUHost, row.ErrFDHost, row.ErrFDGPU} {
			if !(e <= tols[k]) {
				bad = append(bad, fmt.Sprintf("%s: %s relative error %.3g > %g", row.Label(), cols[k], e, tols[k]))
			}
		}
	}
	return bad
}

// Coopmat reports whether the analytic GPU gradient ran on tensor cores (TensorCores "on …").
func (r GradCheckResult) Coopmat() bool { return strings.HasPrefix(r.TensorCores, "on") }

// TolGPUHost is the tolerance of GPU vs host for r's path: Spec.TolGPUHostCoopmat on tensor
// cores, else Spec.TolGPUHost.
func (r GradCheckResult) TolGPUHost() float64 {
	if r.Coopmat() {
		return r.Spec.TolGPUHostCoopmat
	}
	return r.Spec.TolGPUHost
}

// OK reports whether every row is within the tolerances.
func (r GradCheckResult) OK() bool { return len(r.Failures()) == 0 }

// Table formats r as notebook 02's table: one line per coordinate with the four gradients
// (five on tensor cores: the f32 path's analytic gradient too, FD GPU's reference) and the
// three relative errors, then the worst errors against their tolerances.
func (r GradCheckResult) Table() string {
	var b strings.Builder
	heads := []string{"analytic GPU", "analytic host", "FD host", "FD GPU"}
	cells := func(row GradCheckRow) []float64 { return []float64{row.GPU, row.Host, row.FDHost, row.FDGPU} }
	if r.Coopmat() {
		fmt.Fprintf(&b, "tensor cores %s: analytic GPU on cooperative matrices (f16 operands); FD GPU on the f32 path, against its analytic gradient\n\n", r.TensorCores)
		heads = []string{"analytic GPU", "analytic f32", "analytic host", "FD host", "FD GPU f32"}
		cells = func(row GradCheckRow) []float64 {
			return []float64{row.GPU, row.GPUF32, row.Host, row.FDHost, row.FDGPU}
		}
	}
	fmt.Fprintf(&b, "%-34s", "coordinate")
	for _, h := range heads {
		fmt.Fprintf(&b, " %13s", h)
	}
	fmt.Fprintf(&b, " │ %9s %9s %9s\n", "GPU/host", "FD host", "FD GPU")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-34s", row.Label())
		for _, v := range cells(row) {
			fmt.Fprintf(&b, " %+13.6e", v)
		}
		fmt.Fprintf(&b, " │ %9.2e %9.2e %9.2e\n", row.ErrGPUHost, row.ErrFDHost, row.ErrFDGPU)
	}
	fmt.Fprintf(&b, "\nworst: GPU vs host %.2e (tolerance %.3g), host FD %.2e (%.3g), GPU FD %.2e (%.3g)\n",
		r.Worst[0], r.TolGPUHost(), r.Worst[1], r.Spec.TolFDHost, r.Worst[2], r.Spec.TolFDGPU)
	return b.String()
}

// RelErr is |a − b| / |b| (+Inf when b = 0 and a ≠ 0, 0 when both are 0), the relative error
// of GradCheckRow.
func RelErr(a, b float64) float64 {
	if a == b {
		return 0
	}
	return math.Abs(a-b) / math.Abs(b)
}
