package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// Kernel is one row of a phase's per-kernel profile.
type Kernel struct {
	Name    string  `json:"name"`
	Calls   int     `json:"calls"`
	TotalMS float64 `json:"total_ms"`
	Share   float64 `json:"share_pct"` // of the profiled phase's GPU time
	TFLOPs  float64 `json:"tflops,omitempty"`
	GBps    float64 `json:"gbps,omitempty"`
}

// Phase is the measurement of one phase (teacher pass or student step).
type Phase struct {
	Seconds []float64 `json:"seconds"`  // each timed run, wall clock with a GPU sync
	MedianS float64   `json:"median_s"` // median of Seconds
	TokS    float64   `json:"tok_s"`    // tokens / MedianS
	// PeakBytes is the phase's own peak GPU bytes: the device's peak during the phase less
	// what the other net of the run holds meanwhile (OtherBytes: the resident student's
	// weights, state and work during the teacher pass; 0 during the student step, whose
	// teacher is released), so that it is the phase alone, as Plan computes it.
	PeakBytes   uint64  `json:"peak_bytes"`
	PeakGiB     float64 `json:"peak_GiB"`
	OtherBytes  uint64  `json:"other_bytes,omitempty"`
	WeightBytes uint64  `json:"weight_bytes"` // all the net's weights (Net.WeightBytes; streamed: most stay on the host)
	// UploadBytes is what a streamed teacher uploaded per timed pass (Net.UploadedBytes):
	// every layer's weights once, whatever its format.
	UploadBytes uint64   `json:"upload_bytes_per_pass,omitempty"`
	PlanBytes   uint64   `json:"plan_bytes"`          // Memory's estimate
	BuildS      float64  `json:"build_s"`             // making the synthetic net
	ProfileMS   float64  `json:"profile_ms"`          // GPU time of the profiled run
	Truncated   bool     `json:"truncated,omitempty"` // runs or the profile dropped to meet the deadline
	Profile     []Kernel `json:"profile,omitempty"`
}

// Result is one geometry.
type Result struct {
	Geom        string `json:"geom"`
	NB          int    `json:"nb"`
	T           int    `json:"t"`
	K           int    `json:"k"`
	Tokens      int    `json:"tokens"`
	TeacherMode string `json:"teacher_mode"`
	// TeacherDType is the synthetic teacher's projection format (TeacherDTypes: "f16", "fp8",
	// "q8"); "" in reports written before 8-bit teachers means f16.
	TeacherDType string `json:"teacher_dtype,omitempty"`
	// TeacherGap is, for an 8-bit teacher with nvg bench --teacher-gap, how far its
	// distributions are from the f16 teacher's (TeacherGaps).
	TeacherGap *Gap `json:"teacher_gap,omitempty"`
	// KeepActivations: the student step kept every layer's activations (nvg bench
	// --keep-activations) instead of recomputing them in the backward.
	KeepActivations bool `json:"keep_activations,omitempty"`
	// ActivationBudget is the GPU bytes the student step could spend on kept activations
	// (nvg bench --activation-budget-mib; train.TrainConfig.ActivationBudget): 0 recomputes
	// every layer in the backward unless KeepActivations.
	ActivationBudget int64 `json:"activation_budget,omitempty"`
	// Activations says what the student step kept (train.Trainer.Activations), e.g.
	// "activations: kept for 10 of 36 layers (26–35: …)"; "" in a JSON from before it.
	Activations string `json:"activations,omitempty"`
	// TrainSigns: the student step also trained the signs (nvg bench --train-signs: sign
	// scores in the backward, nvgkit.SignStep after Adam, nvgkit.DefaultSigns).
	TrainSigns bool `json:"train_signs,omitempty"`
	// TensorCores is the GEMM path the geometry was measured on (nvg bench --tensor-cores):
	// "on (16×16×16 f16→f32, subgroup 32)" — cooperative-matrix GEMMs, f16 operands, f32
	// accumulation — or "off: reason" (the WGSL kernels, f32); "" in a JSON from before
	// tensor cores (the f32 path). A run with --tensor-cores on,off has two results per
	// geometry, one per path.
	TensorCores string `json:"tensor_cores,omitempty"`
	// HiddenLoss: the student step had the hidden-state loss (nvg bench --hidden-loss), as
	// "kind λ=weight layers=spec", e.g. "mse λ=1 layers=every:4"; "" without it.
	HiddenLoss    string  `json:"hidden_loss,omitempty"`
	Params        int64   `json:"params"`
	BLRWeights    int64   `json:"blr_weights"`
	BLRBits       int64   `json:"blr_bits"`
	SignBits      int64   `json:"sign_bits"`
	BitsPerWeight float64 `json:"bits_per_weight"`
	Trainables    int64   `json:"trainables"`
	Teacher       *Phase  `json:"teacher,omitempty"`
	Student       *Phase  `json:"student,omitempty"`
	Loss          float64 `json:"loss"`
	GradNorm      float64 `json:"grad_norm"`
	Error         string  `json:"error,omitempty"`

	// Ranks and StudentTokSAll: a data-parallel run's number of ranks (each running NB × T
	// tokens per step, the gradients summed over ranks in every timed step) and the student
	// step's tokens/s summed over the ranks (omitted for one process).
	Ranks          int     `json:"ranks,omitempty"`
	StudentTokSAll float64 `json:"student_tok_s_all_ranks,omitempty"`
}

// Report is the JSON nvg bench writes.
type Report struct {
	Device     string  `json:"device"`
	Driver     string  `json:"driver"`
	Backend    string  `json:"backend"`
	CPU        bool    `json:"cpu_adapter"`
	Date       string  `json:"date"`
	Command    string  `json:"command"`
	GoVersion  string  `json:"go_version"`
	Build      string  `json:"build"` // version.Info.String(): the commit measured
	PeakTFLOPs float64 `json:"peak_tflops"`
	PeakGBps   float64 `json:"peak_gbps"`
	// PeakTensorTFLOPs is the device's tensor-core ceiling (f16 operands, f32 accumulation)
	// for the roofline of the results measured on tensor cores (0: not given).
	PeakTensorTFLOPs float64 `json:"peak_tensor_tflops,omitempty"`
	// TensorCores is the device's tensor-core status at Open (gpu.TensorCores.String): the
	// path --tensor-cores auto measures.
	TensorCores string   `json:"tensor_cores,omitempty"`
	Results     []Result `json:"results"`
}

// Options are a measuring run's settings (nvg bench's flags).
type Options struct {
	Models         []string // geometries (Geometries)
	NB, T, K       int      // windows per pass, tokens per window, teacher top-k
	Steps, Reps    int      // timed student steps and teacher passes
	Warmup         int      // untimed runs before the timed ones (< 0: 1 teacher pass, 2 student steps)
	Teacher        string   // "auto" (streamed for 9B and 27B), "resident" or "streamed"
	TeacherDType   string   // the teacher's projections: "f16" ("": f16), "fp8" or "q8" (TeacherDTypes)
	TeacherOnly    bool     // measure the teacher pass only (no student step)
	PeakTF, PeakGB float64  // the device's ceilings for the roofline columns
	PeakTensorTF   float64  // the device's tensor-core ceiling (0: none given)
	// TensorCores are the GEMM paths each geometry is measured on, in order: "auto" (the
	// device's choice, gpu.Device.TensorCores), "on" (the cooperative-matrix kernels forced,
	// gpu.SetTensorCores) or "off" (the WGSL kernels forced); nil is {"auto"}. {"on", "off"}
	// measures every geometry twice, an A/B in one run.
	TensorCores []string
	Profile     bool    // profile one pass and one step (needs timestamp queries)
	Seed        uint64  // of the synthetic weights and token ids
	Clip        float64 // the student step's gradient-norm clip
	Keep        bool    // the student step keeps activations (TrainConfig.KeepActivations)
	// ActivationBudget is the student step's TrainConfig.ActivationBudget in bytes: without
	// Keep it keeps all activations or the layers that fit (0: recomputes every layer, the
	// least memory).
	ActivationBudget int64
	Signs            bool // the student step trains the signs (TrainConfig.TrainSigns)
	// HiddenLoss, HiddenWeight and HiddenLayers give the student step the hidden-state loss
	// (TrainConfig's fields of the same names; HiddenLoss "": none).
	HiddenLoss   string
	HiddenWeight float64
	HiddenLayers string
	MemoryGiB    float64 // GPU memory for the dry check (0: none)
	Deadline     time.Time
	CPUProfile   string     // the host's CPU profile of the timed student steps
	Stdout       io.Writer  // the results
	Progress     io.Writer  // progress lines
	Comm         train.Comm // data-parallel ranks under mpirun (nil: one process)
}

// Validate checks the options, naming nvg bench's flags.
func (o *Options) Validate() error {
	known := map[string]bool{}
	for _, g := range Geometries {
		known[g] = true
	}
	seen := map[string]bool{}
	for i, m := range o.Models {
		m = strings.TrimSpace(m)
		o.Models[i] = m
		if !known[m] {
			return fmt.Errorf("--model: unknown geometry %q (known: %s)", m, strings.Join(Geometries, ", "))
		}
		if seen[m] {
			return fmt.Errorf("--model: geometry %q given twice", m)
		}
		seen[m] = true
	}
	if o.CPUProfile != "" {
		if err := checkWritableFile(o.CPUProfile); err != nil {
			return fmt.Errorf("--cpuprofile: %v", err)
		}
	}
	if o.TeacherDType != "" {
		if _, err := ParseTeacherDType(o.TeacherDType); err != nil {
			return fmt.Errorf("--teacher-dtype: %v", err)
		}
	}
	switch {
	case o.NB < 1 || o.T < 1:
		return fmt.Errorf("--nb = %d and --t = %d must be ≥ 1", o.NB, o.T)
	case o.K < 1 || o.K > 64:
		return fmt.Errorf("--k = %d must be in 1..64", o.K)
	case o.Steps < 1 || o.Reps < 1:
		return fmt.Errorf("--steps = %d and --reps = %d must be ≥ 1", o.Steps, o.Reps)
	case o.Teacher != "auto" && o.Teacher != "resident" && o.Teacher != "streamed":
		return fmt.Errorf("--teacher must be auto, resident or streamed, got %q", o.Teacher)

	case !(o.PeakTF > 0) || !(o.PeakGB > 0):
		return errors.New("--peak-tflops and --peak-gbps must be > 0")
	case !(o.Clip > 0) || math.IsInf(o.Clip, 0):
		return errors.New("--clip must be finite and > 0")
	case o.MemoryGiB < 0:
		return errors.New("--memory-gib must be ≥ 0")
	case o.PeakTensorTF < 0 || math.IsNaN(o.PeakTensorTF) || math.IsInf(o.PeakTensorTF, 0):
		return errors.New("--peak-tensor-tflops must be finite and ≥ 0")
	case o.HiddenLoss != "" && o.HiddenLoss != nvgkit.HiddenMSE && o.HiddenLoss != nvgkit.HiddenCosine:
		return fmt.Errorf("--hidden-loss must be %s or %s, got %q", nvgkit.HiddenMSE, nvgkit.HiddenCosine, o.HiddenLoss)
	case o.HiddenLoss != "" && (!(o.HiddenWeight >= 0) || math.IsInf(o.HiddenWeight, 0)):
		return fmt.Errorf("--hidden-weight must be finite and ≥ 0, got %g", o.HiddenWeight)
	}
	seenTC := map[string]bool{}
	for _, m := range o.TensorCores {
		if m != "auto" && m != "on" && m != "off" {
			return fmt.Errorf("--tensor-cores: %q is not auto, on or off (a comma-separated list such as on,off measures each geometry on each path)", m)
		}
		if seenTC[m] {
			return fmt.Errorf("--tensor-cores: %q given twice", m)
		}
		seenTC[m] = true
	}
	return nil
}

// TensorCoresModes are the paths each geometry is measured on (TensorCores; {"auto"} when
// nil).
func (o *Options) TensorCoresModes() []string {
	if len(o.TensorCores) == 0 {
		return []string{"auto"}
	}
	return o.TensorCores
}

// CheckTensorCores refuses, before anything is measured, a forced "on" on a device whose
// tensor cores are not available (its status says why: no VK_KHR_cooperative_matrix,
// NVG_TENSOR_CORES=off, no C compiler for the layer, …).
func (o *Options) CheckTensorCores(dev *gpu.Device) error {
	tc := dev.TensorCores()
	for _, m := range o.TensorCoresModes() {
		if m == "on" && !tc.Available {
			return fmt.Errorf("--tensor-cores on: %s has no tensor cores nvg can use (%s)", dev.Info().Name, tc)
		}
	}
	return nil
}

// forceTensorCores forces mode's GEMM path ("auto", "on", "off") on dev for one measurement
// and returns the status it records (Result.TensorCores) and the function that lifts the
// force. CheckTensorCores has refused an "on" the device cannot take.
func forceTensorCores(dev *gpu.Device, mode string) (status string, restore func()) {
	tc := dev.TensorCores()
	switch mode {
	case "on":
		tc.On, tc.Reason = true, ""
		return tc.String(), gpu.SetTensorCores(true)
	case "off":
		if tc.Available {
			tc.On, tc.Reason = false, "forced off (nvg bench --tensor-cores off)"
		}
		return tc.String(), gpu.SetTensorCores(false)
	}
	return tc.String(), func() {}
}

// checkWritableFile reports why a file named path (or, for --cpuprofile, path with a suffix)
// could not be created: path names a directory, or its directory is missing or not writable
// (checked by creating and removing a temporary file there), so a run fails before it measures.
func checkWritableFile(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory; give a file name such as %s", path, filepath.Join(path, "cpu.prof"))
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".nvg-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in the directory of %s: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// startCPUProfile starts the Go CPU profile of geometry geom's timed student steps when
// CPUProfile is set (the file name gets "-geom" before its extension) and returns the
// function that stops it and closes the file (a no-op without one).
func (o *Options) startCPUProfile(geom string) (stop func() error, err error) {
	if o.CPUProfile == "" {
		return func() error { return nil }, nil
	}
	ext := filepath.Ext(o.CPUProfile)
	name := strings.TrimSuffix(o.CPUProfile, ext) + "-" + geom + ext
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		fmt.Fprintf(o.Progress, "nvg bench: %s: CPU profile of the timed student steps in %s\n", geom, name)
		return nil
	}, nil
}

// fits reports whether d more seconds of work end before the deadline (always without one).
func (o *Options) fits(d time.Duration) bool {
	return o.Deadline.IsZero() || time.Until(o.Deadline) > d
}

func dur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// WriteJSON writes rep to path as indented JSON (atomically).
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, append(b, '\n'))
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// profileRows converts a profile into JSON rows.
func profileRows(p gpu.Profile) ([]Kernel, float64) {
	tot := p.Total()
	var rows []Kernel
	for _, k := range p {
		share := 0.0
		if tot > 0 {
			share = 100 * float64(k.Total) / float64(tot)
		}
		rows = append(rows, Kernel{Name: k.Name, Calls: k.Calls, TotalMS: float64(k.Total) / 1e6, Share: share, TFLOPs: k.TFLOPs(), GBps: k.GBps()})
	}
	return rows, float64(tot) / 1e6
}

// Measure measures one geometry on dev on the GEMM path mode (one of TensorCoresModes:
// "auto", "on", "off"; forced for the measurement and lifted after it); every error (and
// panic) ends up in Result.Error, and every GPU buffer of the geometry is released before it
// returns.
func Measure(dev *gpu.Device, name, mode string, o Options) (res Result) {
	res = Result{Geom: name, NB: o.NB, T: o.T, K: o.K, Tokens: o.NB * o.T}
	var restore func()
	res.TensorCores, restore = forceTensorCores(dev, mode)
	defer restore()
	defer func() {
		if r := recover(); r != nil {
			res.Error = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	if err := o.measure(dev, name, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

// measure plans geometry name, assembles its run (train.Assemble on synthetic nets), and
// times its teacher pass and, with the teacher released, its student step.
func (o *Options) measure(dev *gpu.Device, name string, res *Result) error {
	cfg, err := Config(name)
	if err != nil {
		return err
	}
	streamed := o.Teacher == "streamed" || o.Teacher == "auto" && (name == "9B" || name == "27B")
	res.TeacherMode = map[bool]string{false: "resident", true: "streamed"}[streamed]
	res.TeacherDType = cmp.Or(o.TeacherDType, "f16")
	format, err := ParseTeacherDType(res.TeacherDType)
	if err != nil {
		return err
	}
	if o.HiddenLoss != "" {
		res.HiddenLoss = fmt.Sprintf("%s λ=%g layers=%s", o.HiddenLoss, o.HiddenWeight, o.HiddenLayers)
	}
	res.KeepActivations, res.TrainSigns, res.ActivationBudget = o.Keep, o.Signs, o.ActivationBudget
	tp, sp, err := o.plans(dev, cfg, format, streamed, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "== %s: %d layers, hidden %d, vocab %d, %.3fB parameters; nb %d × t %d = %d tokens, top-%d; teacher %s, %s projections; tensor cores %s\n",
		name, cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, float64(res.Params)/1e9, o.NB, o.T, res.Tokens, o.K, res.TeacherMode, res.TeacherDType, res.TensorCores)
	fmt.Fprintf(o.Stdout, "   student: %.1fM BLR weights at %.3f bits/weight (%d paths, peer's rank rule), %.2fM trained values\n",
		float64(res.BLRWeights)/1e6, res.BitsPerWeight, Paths, float64(res.Trainables)/1e6)
	if o.HiddenLoss != "" {
		layers, err := nvgkit.ParseHiddenLayers(o.HiddenLayers, cfg.NumHiddenLayers)
		if err != nil {
			return fmt.Errorf("--hidden-layers: %w", err)
		}
		fmt.Fprintf(o.Stdout, "   hidden-state loss %s: %d layers %v; the teacher's states %.1f MiB per step (binary16), held in host memory\n",
			res.HiddenLoss, len(layers), layers, float64(nvgkit.HiddenStateBytes(cfg.HiddenSize, o.T, len(layers))*int64(o.NB))/(1<<20))
	}
	src := &nets{cfg: cfg, format: format, seed: uint32(o.Seed), vocab: cfg.VocabSize, tokens: o.ranks() * o.NB * (o.T + 1), o: o, name: name}
	run, err := train.Assemble(context.Background(), train.Setup{Nets: src, Train: o.trainConfig()},
		train.Env{Device: dev, Comm: o.Comm, StreamTeacher: streamed})
	if err != nil {
		return err
	}
	defer run.Close()
	res.Teacher = &Phase{PlanBytes: tp.TotalBytes(), BuildS: src.built[0], WeightBytes: run.Teacher.WeightBytes()}
	if err := o.teacherPhase(run, res); err != nil {
		return err
	}
	run.ReleaseTeacher()
	if err := dev.Sync(); err != nil {
		return err
	}
	if o.TeacherOnly {
		fmt.Fprintln(o.Stdout)
		return nil
	}
	res.Student = &Phase{PlanBytes: sp.TotalBytes(), BuildS: src.built[1], WeightBytes: run.Student.WeightBytes()}
	res.Activations = run.Trainer.Activations()
	fmt.Fprintf(o.Stdout, "   student step: %s\n", res.Activations)
	return o.studentPhase(run, res)
}

// plans computes both phases' plans, fills res's sizes and makes the dry checks: each phase
// alone, and the teacher pass with the student resident beside it (as a run holds them). The
// student step's check adds ActivationBudget (without Keep: what kept layers may take at
// most); with Keep the activations kept depend on the student's ranks, known once it is
// built, and are not checked here (the step's out-of-memory error names the remedy).
func (o *Options) plans(dev *gpu.Device, cfg arch.Config, format gpu.QuantFormat, streamed bool, res *Result) (tp, sp Plan, err error) {
	if tp, err = TeacherMemory(cfg, format, o.NB, o.T, o.K, streamed); err != nil {
		return tp, sp, err
	}
	if sp, err = Memory(cfg, nvgkit.Student, o.NB, o.T, o.K, false); err != nil {
		return tp, sp, err
	}
	res.Params, res.BLRWeights, res.BLRBits, res.SignBits = sp.Params, sp.BLRWeights, sp.BLRBits, sp.SignBits
	res.BitsPerWeight, res.Trainables = sp.BitsPerWeight(), sp.Trainables
	info := dev.Info()
	mem := uint64(o.MemoryGiB * (1 << 30))
	both := tp
	both.WeightBytes += sp.WeightBytes + sp.StateBytes + sp.WorkBytes
	step := sp
	if !o.Keep && o.ActivationBudget > 0 {
		step.WorkBytes += uint64(o.ActivationBudget)
	}
	for _, x := range []struct {
		what string
		p    Plan
	}{{"teacher pass", tp}, {"student step", step}, {"teacher pass with the student resident", both}} {
		if err := x.p.Check(info.MaxBufferSize, info.MaxStorageBindingSize, mem); err != nil {
			return tp, sp, fmt.Errorf("dry check of the %s: %w", x.what, err)
		}
	}
	return tp, sp, nil
}

// ranks is the number of data-parallel ranks (1 without Comm).
func (o *Options) ranks() int {
	if o.Comm == nil {
		return 1
	}
	return o.Comm.Size()
}

// trainConfig is the run of a measurement: NB windows of T tokens per rank, one batch
// cycled, a constant learning rate of 1e-4 (small steps: the loss stays finite), the clip,
// activations kept with Keep or within ActivationBudget, and the hidden-state loss when asked. Its steps never end (no last-step readback).
func (o *Options) trainConfig() train.TrainConfig {
	c := train.DefaultTrainConfig()
	nb := o.ranks() * o.NB
	c.Steps, c.NB, c.T, c.K, c.Windows, c.EvalWindows, c.Seed = 1<<30, nb, o.T, o.K, nb, 1, o.Seed
	c.Settings = optim.Default()
	c.LR, c.Warmup, c.MinLRFrac, c.ClipNorm = 1e-4, 0, 1, o.Clip
	c.KeepActivations, c.ActivationBudget, c.TrainSigns = o.Keep, o.ActivationBudget, o.Signs
	c.HiddenLoss, c.HiddenWeight, c.HiddenLayers = o.HiddenLoss, o.HiddenWeight, o.HiddenLayers
	c.EvalEvery, c.CheckpointEvery, c.Keep = 0, 0, 0
	return c
}

// nets is a measurement's train.NetSource: the synthetic teacher and student (NewNet) and a
// token stream of random ids.
type nets struct {
	cfg           arch.Config
	format        gpu.QuantFormat // the teacher's projections (NewTeacher)
	seed          uint32
	vocab, tokens int
	o             *Options
	name          string
	built         [2]float64 // seconds to make the teacher and the student
}

func (n *nets) Nets(dev *gpu.Device, streamed bool) (teacher, student *nvgkit.Net, err error) {
	var opts []nvgkit.LoadOption
	if streamed {
		opts = append(opts, nvgkit.StreamLayers())
	}
	t0 := time.Now()
	if teacher, err = NewTeacher(dev, n.cfg, n.format, n.seed, append(opts, n.progress("teacher"))...); err != nil {
		return nil, nil, fmt.Errorf("teacher: %w", err)
	}
	n.built[0] = time.Since(t0).Seconds()
	t0 = time.Now()
	if student, err = NewNet(dev, n.cfg, nvgkit.Student, n.seed+1, n.progress("student")); err != nil {
		teacher.Release()
		return nil, nil, fmt.Errorf("student: %w", err)
	}
	n.built[1] = time.Since(t0).Seconds()
	return teacher, student, nil
}

// progress prints a line every 2 s while a net's layers are made, and at the last.
func (n *nets) progress(what string) nvgkit.LoadOption {
	last := time.Now()
	return nvgkit.LoadProgress(func(done, total int) {
		if time.Since(last) > 2*time.Second || done == total {
			fmt.Fprintf(n.o.Progress, "nvg bench: %s %s: %d/%d layers\n", n.name, what, done, total)
			last = time.Now()
		}
	})
}

// Tokens is one stream of random ids, long enough for every rank's windows, used for
// training and held out alike.
func (n *nets) Tokens() (train, heldOut []int) {
	rng := rand.New(rand.NewPCG(uint64(n.seed), 0x6e7667))
	ids := make([]int, n.tokens)
	for i := range ids {
		ids[i] = rng.IntN(n.vocab)
	}
	return ids, ids
}

// batch is this rank's windows of the run's one batch (their inputs, T tokens each; the
// Trainer's share of rank r is the r-th run of its work's NB windows).
func batch(tr *train.Trainer) [][]int {
	teacher, _ := tr.Works()
	r, nb := tr.Rank(), teacher.NB
	ids := make([][]int, nb)
	for i, w := range tr.Windows()[r*nb : (r+1)*nb] {
		ids[i] = w[:tr.Config.T]
	}
	return ids
}

// teacherPhase times the teacher pass: the run's Prepare (its top-k, also the first warm-up:
// with Warmup 0 the timed passes follow it), the remaining warm-ups, the timed passes and one
// profiled pass.
func (o *Options) teacherPhase(run *train.Run, res *Result) error {
	dev, ph, tr := run.Device, res.Teacher, run.Trainer
	teacherWork, studentWork := tr.Works()
	ph.OtherBytes = run.Student.WeightBytes() + run.Student.StateBytes() + studentWork.Bytes()
	dev.ResetPeak()
	t0 := time.Now()
	if err := tr.Prepare(context.Background()); err != nil { // the run's top-k: the first pass
		return fmt.Errorf("teacher pass: %w", err)
	}
	last := time.Since(t0).Seconds()
	ids := batch(tr)
	pass := func() error {
		_, err := nvgkit.TeacherTopK(run.Teacher, teacherWork, ids, o.K)
		if err == nil {
			err = dev.Sync()
		}
		return err
	}
	warm := 1 // the first pass compiles the pipelines (Prepare's pass is the first warm-up)
	if o.Warmup >= 0 {
		warm = o.Warmup
	}
	left := max(warm-1, 0) // warm-ups after Prepare's
	var up0 uint64         // UploadedBytes before the first timed pass
	for i := 0; i < left+o.Reps; i++ {
		if i == left {
			up0 = run.Teacher.UploadedBytes()
		}
		// Beyond the first timed pass, keep time for the student's (≈ 4 passes per step, 3
		// steps at least).
		if i != left && !o.fits(dur(13*last)) {
			ph.Truncated = true
			if i > left {
				break
			}
			i = left // skip the remaining warm-ups
		}
		t0 := time.Now()
		if err := pass(); err != nil {
			return fmt.Errorf("teacher pass: %w", err)
		}
		last = time.Since(t0).Seconds()
		if i >= left {
			ph.Seconds = append(ph.Seconds, last)
		}
	}
	ph.UploadBytes = (run.Teacher.UploadedBytes() - up0) / uint64(len(ph.Seconds))
	if err := o.profilePhase(dev, ph, 14*last, pass); err != nil {
		return fmt.Errorf("profiled teacher pass: %w", err)
	}
	what := "teacher pass"
	if run.Teacher.Streamed() {
		what += fmt.Sprintf(" (streamed: ≤ 2 layers or 2 head blocks on the GPU, %.2f GB uploaded per pass)", float64(ph.UploadBytes)/1e9)
	}
	o.finishPhase(dev, ph, res.Tokens, what)
	return nil
}

// profilePhase profiles one more run of f when profiling is asked and the device has
// timestamps, unless the deadline leaves less than need seconds.
func (o *Options) profilePhase(dev *gpu.Device, ph *Phase, need float64, f func() error) error {
	if !o.Profile || !dev.Info().Timestamps {
		return nil
	}
	if !o.fits(dur(need)) {
		ph.Truncated = true
		return nil
	}
	if err := dev.SetProfiling(true); err != nil {
		return err
	}
	dev.ResetProfile()
	err := f()
	dev.SetProfiling(false)
	if err != nil {
		return err
	}
	ph.Profile, ph.ProfileMS = profileRows(dev.Profile())
	return nil
}

// finishPhase records the phase's median, throughput and peak, and prints them.
func (o *Options) finishPhase(dev *gpu.Device, ph *Phase, tokens int, what string) {
	ph.MedianS = median(ph.Seconds)
	ph.TokS = float64(tokens) / ph.MedianS
	if peak := dev.MemStats().PeakBytes; peak > ph.OtherBytes {
		ph.PeakBytes = peak - ph.OtherBytes
	}
	ph.PeakGiB = float64(ph.PeakBytes) / (1 << 30)
	printPhase(o.Stdout, what, ph, o)
}

// studentPhase times the student step as the run takes it (Trainer.TrainStep: ZeroGrads,
// Step, the ranks' gradient sum, ClipGrads, Adam, the sign flips), synchronised.
func (o *Options) studentPhase(run *train.Run, res *Result) error {
	dev, ph, tr := run.Device, res.Student, run.Trainer
	dev.ResetPeak()
	step := func() error {
		info, err := tr.TrainStep()
		if err != nil {
			return err
		}
		res.Loss, res.GradNorm = info.Loss, info.GradNorm
		return dev.Sync()
	}
	warm := 2 // as the peer
	if o.Warmup >= 0 {
		warm = o.Warmup
	}
	last := 0.0
	for i := 0; i < warm; i++ {
		if i > 0 && !o.fits(dur(2.2*last)) { // this warm-up and one timed step
			ph.Truncated = true
			break
		}
		t0 := time.Now()
		if err := step(); err != nil {
			return fmt.Errorf("student step (warm-up): %w", err)
		}
		last = time.Since(t0).Seconds()
	}
	if err := o.timeSteps(ph, res.Geom, &last, step); err != nil {
		return err
	}
	if err := o.profilePhase(dev, ph, 1.5*last, step); err != nil {
		return fmt.Errorf("profiled student step: %w", err)
	}
	o.finishPhase(dev, ph, res.Tokens, "student step")
	fmt.Fprintf(o.Stdout, "   loss %.4f, gradient norm %.4g\n\n", res.Loss, res.GradNorm)
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		return errors.New("the student's loss is not finite")
	}
	return nil
}

// timeSteps runs the timed student steps (under the CPU profile when asked).
func (o *Options) timeSteps(ph *Phase, geom string, last *float64, step func() error) error {
	stopCPU, err := o.startCPUProfile(geom)
	if err != nil {
		return err
	}
	for i := 0; i < o.Steps; i++ {
		if i > 0 && !o.fits(dur(1.2**last)) {
			ph.Truncated = true
			break
		}
		t0 := time.Now()
		if err := step(); err != nil {
			stopCPU()
			return fmt.Errorf("student step: %w", err)
		}
		*last = time.Since(t0).Seconds()
		ph.Seconds = append(ph.Seconds, *last)
	}
	return stopCPU()
}

// SumRanks, in a data-parallel bench (Comm of several ranks), sums the student step's
// tokens/s over the ranks into res and prints it (rank 0's stdout); a rank whose geometry
// failed adds 0.
func (o *Options) SumRanks(res *Result) error {
	if o.Comm == nil || o.Comm.Size() == 1 {
		return nil
	}
	v := []float64{0}
	if res.Student != nil && res.Error == "" {
		v[0] = res.Student.TokS
	}
	if err := o.Comm.SumFloat64(v); err != nil {
		return err
	}
	res.Ranks, res.StudentTokSAll = o.Comm.Size(), v[0]
	fmt.Fprintf(o.Stdout, "%s data parallel: %d ranks × %d tokens per step: student %.0f tokens/s summed over the ranks\n\n",
		res.Geom, res.Ranks, res.Tokens, res.StudentTokSAll)
	return nil
}

// printPhase prints a phase's figures and its kernel table.
func printPhase(w io.Writer, what string, ph *Phase, o *Options) {
	fmt.Fprintf(w, "   %s: %.0f tokens/s (median %.4f s of %d: %s), peak GPU %.2f GiB (weights %.2f GiB, plan %.2f GiB), built in %.1f s\n",
		what, ph.TokS, ph.MedianS, len(ph.Seconds), fmtSeconds(ph.Seconds), ph.PeakGiB,
		float64(ph.WeightBytes)/(1<<30), float64(ph.PlanBytes)/(1<<30), ph.BuildS)
	if ph.Truncated {
		fmt.Fprintf(w, "   (truncated to meet --deadline: fewer runs than asked%s)\n", map[bool]string{true: ", no profile", false: ""}[len(ph.Profile) == 0 && o.Profile])
	}
	if len(ph.Profile) == 0 {
		return
	}
	fmt.Fprintf(w, "   profiled %s: %.2f ms of GPU time\n", what, ph.ProfileMS)
	fmt.Fprintf(w, "   %-34s %7s %10s %7s %9s %6s %9s %6s\n", "kernel", "calls", "total ms", "share", "TFLOP/s", "%peak", "GB/s", "%peak")
	for i, k := range ph.Profile {
		if i == 25 {
			fmt.Fprintf(w, "   … %d more kernels\n", len(ph.Profile)-i)
			break
		}
		tf, tp, gb, gp := "-", "-", "-", "-"
		if k.TFLOPs > 0 {
			tf, tp = fmt.Sprintf("%.2f", k.TFLOPs), fmt.Sprintf("%.1f", 100*k.TFLOPs/o.PeakTF)
		}
		if k.GBps > 0 {
			gb, gp = fmt.Sprintf("%.1f", k.GBps), fmt.Sprintf("%.1f", 100*k.GBps/o.PeakGB)
		}
		fmt.Fprintf(w, "   %-34s %7d %10.3f %6.1f%% %9s %6s %9s %6s\n", k.Name, k.Calls, k.TotalMS, k.Share, tf, tp, gb, gp)
	}
}

func fmtSeconds(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.4f", x)
	}
	return strings.Join(s, " ")
}
