package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/internal/version"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "benchmark the teacher pass and the student step on synthetic Qwen3.5 geometries (or render a report)",
		usage: "[--model 0.8B,4B,9B,27B|tiny] [--nb 8] [--t 512] [--k 32] [--steps 5] [--reps 3] [--teacher auto|resident|streamed] [--json FILE]\n" +
			"       nvg bench --report NVG.json [--before OLD.json] [--peer PEER.txt] [--cpu CPU.json] [--format md|text]",
		run: runBench,
	})
}

// benchKernel is one row of a phase's per-kernel profile.
type benchKernel struct {
	Name    string  `json:"name"`
	Calls   int     `json:"calls"`
	TotalMS float64 `json:"total_ms"`
	Share   float64 `json:"share_pct"` // of the profiled phase's GPU time
	TFLOPs  float64 `json:"tflops,omitempty"`
	GBps    float64 `json:"gbps,omitempty"`
}

// benchPhase is the measurement of one phase (teacher pass or student step).
type benchPhase struct {
	Seconds     []float64     `json:"seconds"`  // each timed run, wall clock with a GPU sync
	MedianS     float64       `json:"median_s"` // median of Seconds
	TokS        float64       `json:"tok_s"`    // tokens / MedianS
	PeakBytes   uint64        `json:"peak_bytes"`
	PeakGiB     float64       `json:"peak_GiB"`
	WeightBytes uint64        `json:"weight_bytes"`        // all the net's weights (Net.WeightBytes; streamed: most stay on the host)
	PlanBytes   uint64        `json:"plan_bytes"`          // nvgkit.SyntheticMemory's estimate
	BuildS      float64       `json:"build_s"`             // making the synthetic net
	ProfileMS   float64       `json:"profile_ms"`          // GPU time of the profiled run
	Truncated   bool          `json:"truncated,omitempty"` // runs or the profile dropped to meet --deadline
	Profile     []benchKernel `json:"profile,omitempty"`
}

// benchResult is one geometry.
type benchResult struct {
	Geom        string `json:"geom"`
	NB          int    `json:"nb"`
	T           int    `json:"t"`
	K           int    `json:"k"`
	Tokens      int    `json:"tokens"`
	TeacherMode string `json:"teacher_mode"`
	// KeepActivations: the student step kept every layer's activations (nvg bench
	// --keep-activations) instead of recomputing them in the backward.
	KeepActivations bool `json:"keep_activations,omitempty"`
	// TrainSigns: the student step also trained the signs (nvg bench --train-signs: sign
	// scores in the backward, nvgkit.SignStep after Adam, nvgkit.DefaultSigns).
	TrainSigns    bool        `json:"train_signs,omitempty"`
	Params        int64       `json:"params"`
	BLRWeights    int64       `json:"blr_weights"`
	BLRBits       int64       `json:"blr_bits"`
	SignBits      int64       `json:"sign_bits"`
	BitsPerWeight float64     `json:"bits_per_weight"`
	Trainables    int64       `json:"trainables"`
	Teacher       *benchPhase `json:"teacher,omitempty"`
	Student       *benchPhase `json:"student,omitempty"`
	Loss          float64     `json:"loss"`
	GradNorm      float64     `json:"grad_norm"`
	Error         string      `json:"error,omitempty"`

	// Ranks and StudentTokSAll: a data-parallel run's number of ranks (each running NB × T
	// tokens per step, the gradients summed over ranks in every timed step) and the student
	// step's tokens/s summed over the ranks (omitted for one process).
	Ranks          int     `json:"ranks,omitempty"`
	StudentTokSAll float64 `json:"student_tok_s_all_ranks,omitempty"`
}

// benchReport is the JSON nvg bench writes.
type benchReport struct {
	Device     string        `json:"device"`
	Driver     string        `json:"driver"`
	Backend    string        `json:"backend"`
	CPU        bool          `json:"cpu_adapter"`
	Date       string        `json:"date"`
	Command    string        `json:"command"`
	GoVersion  string        `json:"go_version"`
	Build      string        `json:"build"` // version.Info.String(): the commit measured
	PeakTFLOPs float64       `json:"peak_tflops"`
	PeakGBps   float64       `json:"peak_gbps"`
	Results    []benchResult `json:"results"`
}

// benchOpts are the parsed flags of a measuring run.
type benchOpts struct {
	models           []string
	nb, t, k         int
	steps, reps      int
	warmup           int // < 0: the defaults (1 teacher pass, 2 student steps)
	teacher          string
	jsonPath         string
	peakTF, peakGB   float64
	profile          bool
	seed             uint64
	clip             float64
	keep             bool // the student step keeps activations (nvgkit.KeepActivations)
	signs            bool // the student step trains the signs (nvgkit.EnableSigns, SignStep)
	memoryGiB        float64
	deadline         time.Time // zero: none (--deadline)
	cpuProfile       string    // --cpuprofile: the host's CPU profile of the timed student steps
	stdout, progress io.Writer
	comm             train.Comm // data-parallel ranks under mpirun (nil: one process)
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
// --cpuprofile is set (the file name gets "-geom" before its extension) and returns the
// function that stops it and closes the file (a no-op without --cpuprofile).
func (o *benchOpts) startCPUProfile(geom string) (stop func() error, err error) {
	if o.cpuProfile == "" {
		return func() error { return nil }, nil
	}
	ext := filepath.Ext(o.cpuProfile)
	name := strings.TrimSuffix(o.cpuProfile, ext) + "-" + geom + ext
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
		fmt.Fprintf(o.progress, "nvg bench: %s: CPU profile of the timed student steps in %s\n", geom, name)
		return nil
	}, nil
}

func runBench(args []string) error {
	c := commands["bench"]
	fs := newFlags(c)
	models := fs.String("model", "", "comma-separated geometries: "+strings.Join(nvgkit.SyntheticGeometries, ", ")+" (default: 0.8B,4B,9B,27B on a GPU, tiny on a CPU adapter)")
	nb := fs.Int("nb", 8, "windows per pass (2 on a CPU adapter unless given)")
	t := fs.Int("t", 512, "tokens per window (128 on a CPU adapter unless given)")
	k := fs.Int("k", 32, "teacher top-k")
	steps := fs.Int("steps", 5, "timed student steps (after 2 warm-up steps); the median is reported")
	reps := fs.Int("reps", 3, "timed teacher passes (after 1 warm-up pass); the median is reported")
	warmup := fs.Int("warmup", -1, "untimed runs before the timed ones, for both phases (-1: 1 teacher pass and 2 student steps)")
	teacher := fs.String("teacher", "auto", "teacher weights: auto (streamed for 9B and 27B), resident or streamed")
	jsonPath := fs.String("json", "", "write the results as JSON to FILE (rewritten after every geometry)")
	peakTF := fs.Float64("peak-tflops", 67, "the device's f32 (non-tensor) ceiling in TFLOP/s, for the roofline columns (H200: ~67)")
	peakGB := fs.Float64("peak-gbps", 4800, "the device's memory bandwidth in GB/s, for the roofline columns (H200: ~4800)")
	profile := fs.Bool("profile", true, "profile one teacher pass and one student step per geometry (needs timestamp queries)")
	seed := fs.Uint64("seed", 1, "seed of the synthetic weights and token ids")
	clip := fs.Float64("clip", 1, "gradient-norm clipping threshold of the student step")
	signs := fs.Bool("train-signs", false, "the student step also trains the BLR signs (int8 scores in the backward, flips after Adam; nvg distill --train-signs with its default knobs)")
	keep := fs.Bool("keep-activations", false, "the student step keeps every layer's activations instead of recomputing them in the backward (faster, more memory; nvg distill --keep-activations)")
	memGiB := fs.Float64("memory-gib", 0, "GPU memory in GiB for the dry check before each geometry (0: not checked)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the host during the timed student steps to FILE, one file per geometry (cpu.prof → cpu-0.8B.prof; read with go tool pprof)")
	deadline := fs.Duration("deadline", 0, "finish within this wall time (e.g. 9m): beyond one warm-up and one timed run per phase, runs and profiles that would not fit are dropped (marked truncated), and geometries not started in time are skipped (0: no limit)")
	report := fs.String("report", "", "render a report from this nvg bench JSON instead of measuring")
	peer := fs.String("peer", "", "with --report: the PyTorch peer's output (its RESULT lines)")
	before := fs.String("before", "", "with --report: an earlier run's nvg bench JSON (comma-separated files merged as --report's) to compare against (runs of the same nb × t, k and modes): throughput, peak memory and per-kernel times before and after")
	cpu := fs.String("cpu", "", "render the CPU section from an nvg bench JSON measured on a CPU adapter (lavapipe); alone, a report with the GPU figures pending")
	format := fs.String("format", "md", "with --report: md (docs/BENCHMARKS.md) or text (the ratio table)")
	notes := fs.String("notes", "", "with --report: a markdown file inserted after the throughput table (the targets and what explains each miss)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *before != "" && *report == "" {
		return usagef("--before goes with --report")
	}
	if *report != "" || *cpu != "" {
		for _, n := range []string{"model", "nb", "t", "k", "steps", "reps", "warmup", "teacher", "json", "deadline", "cpuprofile"} {
			if set[n] {
				return usagef("--%s measures; it cannot be combined with --report", n)
			}
		}
		if *format != "md" && *format != "text" {
			return usagef("--format must be md or text, got %q", *format)
		}
		if *report == "" && (*format != "md" || *peer != "" || *notes != "") {
			return usagef("--format text and --peer need --report")
		}
		return renderBenchReport(os.Stdout, *report, *before, *peer, *cpu, *notes, *format)
	}
	if *peer != "" || *cpu != "" || *notes != "" || set["format"] {
		return usagef("--peer, --cpu, --notes and --format go with --report")
	}
	o := benchOpts{nb: *nb, t: *t, k: *k, steps: *steps, reps: *reps, warmup: *warmup, teacher: *teacher, jsonPath: *jsonPath,
		peakTF: *peakTF, peakGB: *peakGB, profile: *profile, seed: *seed, clip: *clip, keep: *keep, signs: *signs, memoryGiB: *memGiB,
		cpuProfile: *cpuProfile, stdout: os.Stdout, progress: os.Stderr}
	if *models != "" {
		o.models = strings.Split(*models, ",")
	}
	if err := o.validate(); err != nil {
		return err
	}
	if *deadline < 0 {
		return usagef("--deadline must be ≥ 0, got %v", *deadline)
	}
	if *deadline > 0 {
		o.deadline = time.Now().Add(*deadline)
	}
	mr, err := startMPI()
	if err != nil {
		return err
	}
	defer mr.finish()
	if R := mr.comm.Size(); R > 1 {
		if *deadline > 0 {
			return usagef("--deadline cannot be used with %d ranks (each rank would stop at another step)", R)
		}
		o.comm = mr.comm
		if mr.comm.Rank() != 0 { // rank 0 prints and writes the JSON and the CPU profile
			o.stdout, o.progress, o.jsonPath, o.cpuProfile = io.Discard, io.Discard, "", ""
		}
	}
	dev, err := openDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	if dev.Info().CPU {
		if !set["nb"] {
			o.nb = 2
		}
		if !set["t"] {
			o.t = 128
		}
	}
	if o.models == nil {
		o.models = []string{"0.8B", "4B", "9B", "27B"}
		if dev.Info().CPU {
			o.models = []string{"tiny"}
		}
	}
	rep := benchReport{Device: dev.Info().Name, Driver: dev.Info().Description, Backend: dev.Info().Backend, CPU: dev.Info().CPU,
		Date: time.Now().UTC().Format(time.RFC3339), Command: "nvg bench " + strings.Join(args, " "), GoVersion: runtime.Version(),
		Build: version.Get().String(), PeakTFLOPs: o.peakTF, PeakGBps: o.peakGB}
	failed := 0
	for _, name := range o.models {
		var res benchResult
		if !o.fits(0) {
			res = benchResult{Geom: name, NB: o.nb, T: o.t, K: o.k, Tokens: o.nb * o.t, Error: "skipped: the --deadline passed"}
		} else {
			res = benchGeometry(dev, name, o)
		}
		if err := benchSumRanks(&res, o); err != nil {
			return err
		}
		if res.Error != "" {
			failed++
			fmt.Fprintf(o.stdout, "%s: FAILED: %s\n\n", name, res.Error)
		}
		rep.Results = append(rep.Results, res)
		if o.jsonPath != "" {
			if err := writeBenchJSON(o.jsonPath, &rep); err != nil {
				return err
			}
		}
	}
	if failed == len(o.models) {
		return fmt.Errorf("every geometry failed (%d)", failed)
	}
	return nil
}

// validate checks the measuring flags.
func (o *benchOpts) validate() error {
	known := map[string]bool{}
	for _, g := range nvgkit.SyntheticGeometries {
		known[g] = true
	}
	seen := map[string]bool{}
	for i, m := range o.models {
		m = strings.TrimSpace(m)
		o.models[i] = m
		if !known[m] {
			return usagef("--model: unknown geometry %q (known: %s)", m, strings.Join(nvgkit.SyntheticGeometries, ", "))
		}
		if seen[m] {
			return usagef("--model: geometry %q given twice", m)
		}
		seen[m] = true
	}
	if o.cpuProfile != "" {
		if err := checkWritableFile(o.cpuProfile); err != nil {
			return usagef("--cpuprofile: %v", err)
		}
	}
	if o.nb < 1 || o.t < 1 {
		return usagef("--nb = %d and --t = %d must be ≥ 1", o.nb, o.t)
	}
	if o.k < 1 || o.k > 64 {
		return usagef("--k = %d must be in 1..64", o.k)
	}
	if o.steps < 1 || o.reps < 1 {
		return usagef("--steps = %d and --reps = %d must be ≥ 1", o.steps, o.reps)
	}
	switch o.teacher {
	case "auto", "resident", "streamed":
	default:
		return usagef("--teacher must be auto, resident or streamed, got %q", o.teacher)
	}
	if !(o.peakTF > 0) || !(o.peakGB > 0) {
		return usagef("--peak-tflops and --peak-gbps must be > 0")
	}
	if !(o.clip > 0) || math.IsInf(o.clip, 0) {
		return usagef("--clip must be finite and > 0")
	}
	if o.memoryGiB < 0 {
		return usagef("--memory-gib must be ≥ 0")
	}
	return nil
}

// fits reports whether d more seconds of work end before the deadline (always without one).
func (o benchOpts) fits(d time.Duration) bool {
	return o.deadline.IsZero() || time.Until(o.deadline) > d
}

func dur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func writeBenchJSON(path string, rep *benchReport) error {
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
func profileRows(p gpu.Profile) ([]benchKernel, float64) {
	tot := p.Total()
	var rows []benchKernel
	for _, k := range p {
		share := 0.0
		if tot > 0 {
			share = 100 * float64(k.Total) / float64(tot)
		}
		rows = append(rows, benchKernel{Name: k.Name, Calls: k.Calls, TotalMS: float64(k.Total) / 1e6, Share: share, TFLOPs: k.TFLOPs(), GBps: k.GBps()})
	}
	return rows, float64(tot) / 1e6
}

// benchGeometry measures one geometry; every error (and panic) ends up in res.Error, and
// every GPU buffer of the geometry is released before it returns.
func benchGeometry(dev *gpu.Device, name string, o benchOpts) (res benchResult) {
	res = benchResult{Geom: name, NB: o.nb, T: o.t, K: o.k, Tokens: o.nb * o.t}
	defer func() {
		if r := recover(); r != nil {
			res.Error = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	if err := benchGeometryErr(dev, name, o, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func benchGeometryErr(dev *gpu.Device, name string, o benchOpts, res *benchResult) error {
	out := o.stdout
	cfg, err := nvgkit.SyntheticConfig(name)
	if err != nil {
		return err
	}
	streamed := o.teacher == "streamed" || o.teacher == "auto" && (name == "9B" || name == "27B")
	res.TeacherMode = map[bool]string{false: "resident", true: "streamed"}[streamed]
	res.KeepActivations, res.TrainSigns = o.keep, o.signs
	tp, err := nvgkit.SyntheticMemory(cfg, nvgkit.Teacher, o.nb, o.t, o.k, streamed)
	if err != nil {
		return err
	}
	sp, err := nvgkit.SyntheticMemory(cfg, nvgkit.Student, o.nb, o.t, o.k, false)
	if err != nil {
		return err
	}
	res.Params, res.BLRWeights, res.BLRBits, res.SignBits = sp.Params, sp.BLRWeights, sp.BLRBits, sp.SignBits
	res.BitsPerWeight, res.Trainables = sp.BitsPerWeight(), sp.Trainables
	info := dev.Info()
	mem := uint64(o.memoryGiB * (1 << 30))
	for _, x := range []struct {
		what string
		p    nvgkit.SyntheticPlan
	}{{"teacher pass", tp}, {"student step", sp}} {
		if err := x.p.Check(info.MaxBufferSize, info.MaxStorageBindingSize, mem); err != nil {
			return fmt.Errorf("dry check of the %s: %w", x.what, err)
		}
	}
	fmt.Fprintf(out, "== %s: %d layers, hidden %d, vocab %d, %.3fB parameters; nb %d × t %d = %d tokens, top-%d; teacher %s\n",
		name, cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, float64(res.Params)/1e9, o.nb, o.t, res.Tokens, o.k, res.TeacherMode)
	fmt.Fprintf(out, "   student: %.1fM BLR weights at %.3f bits/weight (%d paths, peer's rank rule), %.2fM trained values\n",
		float64(res.BLRWeights)/1e6, res.BitsPerWeight, nvgkit.SyntheticPaths, float64(res.Trainables)/1e6)
	rng := rand.New(rand.NewPCG(o.seed, 0x6e7667))
	ids := make([][]int, o.nb)
	for b := range ids {
		ids[b] = make([]int, o.t)
		for i := range ids[b] {
			ids[b][i] = rng.IntN(cfg.VocabSize)
		}
	}
	progress := func(what string) nvgkit.LoadOption {
		last := time.Now()
		return nvgkit.SyntheticProgress(func(done, total int) {
			if time.Since(last) > 2*time.Second || done == total {
				fmt.Fprintf(o.progress, "nvg bench: %s %s: %d/%d layers\n", name, what, done, total)
				last = time.Now()
			}
		})
	}
	profile := o.profile && info.Timestamps

	// Teacher pass.
	top, err := func() (*nvgkit.TopK, error) {
		ph := &benchPhase{PlanBytes: tp.TotalBytes()}
		res.Teacher = ph
		dev.ResetPeak()
		t0 := time.Now()
		opts := []nvgkit.LoadOption{nvgkit.SyntheticSeed(uint32(o.seed)), progress("teacher")}
		if streamed {
			opts = append(opts, nvgkit.StreamLayers())
		}
		net, err := nvgkit.NewSyntheticNet(dev, cfg, nvgkit.Teacher, opts...)
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		defer net.Release()
		ph.BuildS = time.Since(t0).Seconds()
		ph.WeightBytes = net.WeightBytes()
		work, err := nvgkit.NewWork(dev, net, o.nb, o.t)
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		defer work.Release()
		warm := 1 // the first pass compiles the pipelines
		if o.warmup >= 0 {
			warm = o.warmup
		}
		var top *nvgkit.TopK
		last := 0.0
		for i := 0; i < warm+o.reps; i++ {
			// Beyond the first warm-up and the first timed pass, keep time for the student's
			// (≈ 4 passes per step, 3 steps at least).
			if i > 0 && i != warm && !o.fits(dur(13*last)) {
				ph.Truncated = true
				if i > warm {
					break
				}
				i = warm // skip the remaining warm-ups
			}
			t0 := time.Now()
			tk, err := nvgkit.TeacherTopK(net, work, ids, o.k)
			if err != nil {
				return nil, fmt.Errorf("teacher pass: %w", err)
			}
			if err := dev.Sync(); err != nil {
				return nil, err
			}
			last = time.Since(t0).Seconds()
			if i >= warm {
				ph.Seconds = append(ph.Seconds, last)
			}
			if top == nil {
				top = tk
			}
		}
		ph.MedianS = median(ph.Seconds)
		ph.TokS = float64(res.Tokens) / ph.MedianS
		if profile && !o.fits(dur(14*last)) {
			ph.Truncated = true
		} else if profile {
			if err := dev.SetProfiling(true); err != nil {
				return nil, err
			}
			dev.ResetProfile()
			_, err := nvgkit.TeacherTopK(net, work, ids, o.k)
			dev.SetProfiling(false)
			if err != nil {
				return nil, fmt.Errorf("profiled teacher pass: %w", err)
			}
			ph.Profile, ph.ProfileMS = profileRows(dev.Profile())
		}
		ph.PeakBytes = dev.MemStats().PeakBytes
		ph.PeakGiB = float64(ph.PeakBytes) / (1 << 30)
		what := "teacher pass"
		if streamed {
			what += " (streamed: ≤ 2 layers on the GPU)"
		}
		printPhase(out, what, res.Tokens, ph, o)
		return top, nil
	}()
	if err != nil {
		return err
	}
	if err := dev.Sync(); err != nil {
		return err
	}

	// Student step: ZeroGrads, Step, ClipGrads, Adam (as the trainer and the peer's step).
	ph := &benchPhase{PlanBytes: sp.TotalBytes()}
	res.Student = ph
	dev.ResetPeak()
	t0 := time.Now()
	net, err := nvgkit.NewSyntheticNet(dev, cfg, nvgkit.Student, nvgkit.SyntheticSeed(uint32(o.seed)+1), progress("student"))
	if err != nil {
		return fmt.Errorf("student: %w", err)
	}
	defer net.Release()
	ph.BuildS = time.Since(t0).Seconds()
	ph.WeightBytes = net.WeightBytes()
	var wopts []nvgkit.WorkOption
	if o.keep {
		wopts = append(wopts, nvgkit.KeepActivations())
	}
	work, err := nvgkit.NewWork(dev, net, o.nb, o.t, wopts...)
	if err != nil {
		return fmt.Errorf("student: %w", err)
	}
	defer work.Release()
	if o.signs {
		if err := nvgkit.EnableSigns(net, nvgkit.DefaultSigns()); err != nil {
			return fmt.Errorf("student: %w", err)
		}
	}
	opt := optim.Default()
	nstep := 0
	step := func() error {
		if err := nvgkit.ZeroGrads(net); err != nil {
			return err
		}
		st, err := nvgkit.Step(net, work, ids, top)
		if err != nil {
			return err
		}
		res.Loss = st.Loss
		if o.comm != nil { // data parallel: the gradient exchange is part of the step
			if err := train.SumGrads(net, o.comm); err != nil {
				return err
			}
		}
		gn, err := nvgkit.ClipGrads(net, o.clip)
		if err != nil {
			return err
		}
		res.GradNorm = gn
		nstep++
		if err := nvgkit.Adam(net, opt, 1e-4, nstep); err != nil {
			return err
		}
		if o.signs {
			if err := nvgkit.SignStep(net, nstep); err != nil {
				return err
			}
		}
		return dev.Sync()
	}
	warm := 2 // as the peer
	if o.warmup >= 0 {
		warm = o.warmup
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
	stopCPU, err := o.startCPUProfile(res.Geom)
	if err != nil {
		return err
	}
	for i := 0; i < o.steps; i++ {
		if i > 0 && !o.fits(dur(1.2*last)) {
			ph.Truncated = true
			break
		}
		t0 := time.Now()
		if err := step(); err != nil {
			stopCPU()
			return fmt.Errorf("student step: %w", err)
		}
		last = time.Since(t0).Seconds()
		ph.Seconds = append(ph.Seconds, last)
	}
	if err := stopCPU(); err != nil {
		return err
	}
	ph.MedianS = median(ph.Seconds)
	ph.TokS = float64(res.Tokens) / ph.MedianS
	if profile && !o.fits(dur(1.5*last)) {
		ph.Truncated = true
	} else if profile {
		if err := dev.SetProfiling(true); err != nil {
			return err
		}
		dev.ResetProfile()
		err := step()
		dev.SetProfiling(false)
		if err != nil {
			return fmt.Errorf("profiled student step: %w", err)
		}
		ph.Profile, ph.ProfileMS = profileRows(dev.Profile())
	}
	ph.PeakBytes = dev.MemStats().PeakBytes
	ph.PeakGiB = float64(ph.PeakBytes) / (1 << 30)
	printPhase(out, "student step", res.Tokens, ph, o)
	fmt.Fprintf(out, "   loss %.4f, gradient norm %.4g\n\n", res.Loss, res.GradNorm)
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		return errors.New("the student's loss is not finite")
	}
	return nil
}

// benchSumRanks, in a data-parallel bench (o.comm set), sums the student step's tokens/s
// over the ranks into res and prints it (rank 0's stdout); a rank whose geometry failed adds 0.
func benchSumRanks(res *benchResult, o benchOpts) error {
	if o.comm == nil {
		return nil
	}
	v := []float64{0}
	if res.Student != nil && res.Error == "" {
		v[0] = res.Student.TokS
	}
	if err := o.comm.SumFloat64(v); err != nil {
		return err
	}
	res.Ranks, res.StudentTokSAll = o.comm.Size(), v[0]
	fmt.Fprintf(o.stdout, "%s data parallel: %d ranks × %d tokens per step: student %.0f tokens/s summed over the ranks\n\n",
		res.Geom, res.Ranks, res.Tokens, res.StudentTokSAll)
	return nil
}

// printPhase prints a phase's figures and its kernel table.
func printPhase(w io.Writer, what string, tokens int, ph *benchPhase, o benchOpts) {
	fmt.Fprintf(w, "   %s: %.0f tokens/s (median %.4f s of %d: %s), peak GPU %.2f GiB (weights %.2f GiB, plan %.2f GiB), built in %.1f s\n",
		what, ph.TokS, ph.MedianS, len(ph.Seconds), fmtSeconds(ph.Seconds), ph.PeakGiB,
		float64(ph.WeightBytes)/(1<<30), float64(ph.PlanBytes)/(1<<30), ph.BuildS)
	if ph.Truncated {
		fmt.Fprintf(w, "   (truncated to meet --deadline: fewer runs than asked%s)\n", map[bool]string{true: ", no profile", false: ""}[len(ph.Profile) == 0 && o.profile])
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
			tf, tp = fmt.Sprintf("%.2f", k.TFLOPs), fmt.Sprintf("%.1f", 100*k.TFLOPs/o.peakTF)
		}
		if k.GBps > 0 {
			gb, gp = fmt.Sprintf("%.1f", k.GBps), fmt.Sprintf("%.1f", 100*k.GBps/o.peakGB)
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
