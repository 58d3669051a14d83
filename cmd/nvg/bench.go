package main

import (
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "benchmark the teacher pass and the student step on synthetic Qwen3.5 geometries (or render a report)",
		usage: "[--model 0.8B,4B,9B,27B|tiny] [--nb 8] [--t 512] [--k 32] [--steps 5] [--reps 3] [--teacher auto|resident|streamed] [--teacher-dtype f16,fp8,q8] [--tensor-cores auto|on|off|on,off] [--keep-activations] [--activation-budget-mib MiB] [--train-signs] [--hidden-loss mse|cosine [--hidden-weight 1] [--hidden-layers all|every:K|3,7]] [--json FILE]\n" +
			"       nvg bench --report NVG.json [--before OLD.json] [--peer PEER.txt] [--cpu CPU.json] [--format md|text]",
		run: runBench,
	})
}

// benchFlags are nvg bench's flags: the measuring options (bench.Options) and the report's.
type benchFlags struct {
	o                                                  bench.Options
	models, json, report, peer, before, cpu, notes, fm string
	tensorCores                                        string
	deadline                                           time.Duration
	dtypes                                             []string // --teacher-dtype
	gap                                                bool     // --teacher-gap
}

// newBenchFlags binds nvg bench's flags to f.
func newBenchFlags(c *command, f *benchFlags) *flag.FlagSet {
	fs, o := newFlags(c), &f.o
	fs.StringVar(&f.models, "model", "", "comma-separated geometries: "+strings.Join(bench.Geometries, ", ")+" (default: 0.8B,4B,9B,27B on a GPU, tiny on a CPU adapter)")
	fs.IntVar(&o.NB, "nb", 8, "windows per pass (2 on a CPU adapter unless given)")
	fs.IntVar(&o.T, "t", 512, "tokens per window (128 on a CPU adapter unless given)")
	fs.IntVar(&o.K, "k", 32, "teacher top-k")
	fs.IntVar(&o.Steps, "steps", 5, "timed student steps (after 2 warm-up steps); the median is reported")
	fs.IntVar(&o.Reps, "reps", 3, "timed teacher passes (after 1 warm-up pass); the median is reported")
	fs.IntVar(&o.Warmup, "warmup", -1, "untimed runs before the timed ones, for both phases (-1: 1 teacher pass and 2 student steps; the run's own first teacher pass, which makes its top-k, is always made)")
	fs.StringVar(&o.Teacher, "teacher", "auto", "teacher weights: auto (streamed for 9B and 27B), resident or streamed")
	fs.Func("teacher-dtype", "comma-separated teacher projection formats, each measured per geometry (the student step with the first only): "+strings.Join(bench.TeacherDTypes, ", ")+" (default f16)", func(v string) error {
		f.dtypes = strings.Split(v, ",")
		for _, d := range f.dtypes {
			if _, err := bench.ParseTeacherDType(d); err != nil {
				return err
			}
		}
		return nil
	})
	fs.BoolVar(&f.gap, "teacher-gap", false, "with 8-bit --teacher-dtype: first measure each 8-bit teacher's top-k KL and top-1 agreement against the f16 teacher (both streamed, the 8-bit weights the quantized f16 ones) on nb windows of t+1 random tokens")
	fs.StringVar(&f.tensorCores, "tensor-cores", "auto", "the GEMM paths to measure each geometry on, comma-separated: auto (the device's choice: tensor cores where nvg can use them, NVG_TENSOR_CORES), on (the cooperative-matrix kernels), off (the WGSL f32 kernels); on,off measures every geometry on both, for an A/B in one run")
	fs.StringVar(&f.json, "json", "", "write the results as JSON to FILE (rewritten after every geometry)")
	fs.Float64Var(&o.PeakTF, "peak-tflops", 67, "the device's f32 (non-tensor) ceiling in TFLOP/s, for the roofline columns (H200: ~67)")
	fs.Float64Var(&o.PeakGB, "peak-gbps", 4800, "the device's memory bandwidth in GB/s, for the roofline columns (H200: ~4800)")
	fs.Float64Var(&o.PeakTensorTF, "peak-tensor-tflops", 989, "the device's tensor-core ceiling in TFLOP/s (f16 operands, f32 accumulation, dense), for the roofline of the runs on tensor cores (H200: ~989; 0: none)")
	fs.BoolVar(&o.Profile, "profile", true, "profile one teacher pass and one student step per geometry (needs timestamp queries)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the synthetic weights and token ids")
	fs.Float64Var(&o.Clip, "clip", 1, "gradient-norm clipping threshold of the student step")
	fs.BoolVar(&o.Signs, "train-signs", false, "the student step also trains the BLR signs (int8 scores in the backward, flips after Adam; nvg distill --train-signs with its default knobs)")
	fs.BoolVar(&o.Keep, "keep-activations", false, "the student step keeps every layer's activations instead of recomputing them in the backward (faster, more memory; nvg distill --keep-activations)")
	fs.Var(mibFlag{&o.ActivationBudget}, "activation-budget-mib", "GPU `MiB` the student step may spend on kept activations without --keep-activations: all of them when they fit, else the layers that fit, the others recomputed (nvg distill --activation-budget-mib; 0: recompute every layer, the least memory)")
	fs.StringVar(&o.HiddenLoss, "hidden-loss", "", "the student step also has the hidden-state loss: mse or cosine (nvg distill --hidden-loss; the teacher's states are taken in the run's teacher pass)")
	fs.Float64Var(&o.HiddenWeight, "hidden-weight", 1, "with --hidden-loss: its weight λ")
	fs.StringVar(&o.HiddenLayers, "hidden-layers", "all", "with --hidden-loss: the matched layers: all, every:K or a list such as 3,7")
	fs.Float64Var(&o.MemoryGiB, "memory-gib", 0, "GPU memory in GiB for the dry check before each geometry (0: not checked)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the host during the timed student steps to FILE, one file per geometry (cpu.prof → cpu-0.8B.prof; read with go tool pprof)")
	fs.DurationVar(&f.deadline, "deadline", 0, "finish within this wall time (e.g. 9m): beyond one warm-up and one timed run per phase, runs and profiles that would not fit are dropped (marked truncated), and geometries not started in time are skipped (0: no limit)")
	fs.StringVar(&f.report, "report", "", "render a report from this nvg bench JSON instead of measuring")
	fs.StringVar(&f.peer, "peer", "", "with --report: the PyTorch peer's output (its RESULT lines)")
	fs.StringVar(&f.before, "before", "", "with --report: an earlier run's nvg bench JSON (comma-separated files merged as --report's) to compare against (runs of the same nb × t, k and modes): throughput, peak memory and per-kernel times before and after")
	fs.StringVar(&f.cpu, "cpu", "", "render the CPU section from an nvg bench JSON measured on a CPU adapter (lavapipe); alone, a report with the GPU figures pending")
	fs.StringVar(&f.fm, "format", "md", "with --report: md (docs/BENCHMARKS.md) or text (the ratio table)")
	fs.StringVar(&f.notes, "notes", "", "with --report: a markdown file inserted after the throughput table (the targets and what explains each miss)")
	return fs
}

func runBench(args []string) error {
	c := commands["bench"]
	var f benchFlags
	fs := newBenchFlags(c, &f)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.before != "" && f.report == "" {
		return usagef("--before goes with --report")
	}
	if f.report != "" || f.cpu != "" {
		return renderBench(f, set)
	}
	if f.peer != "" || f.cpu != "" || f.notes != "" || set["format"] {
		return usagef("--peer, --cpu, --notes and --format go with --report")
	}
	if f.models != "" {
		f.o.Models = strings.Split(f.models, ",")
	}
	f.o.TensorCores = strings.Split(f.tensorCores, ",")
	for i, m := range f.o.TensorCores {
		f.o.TensorCores[i] = strings.TrimSpace(m)
	}
	if err := f.o.Validate(); err != nil {
		return usagef("%v", err)
	}
	if f.deadline < 0 {
		return usagef("--deadline must be ≥ 0, got %v", f.deadline)
	}
	if f.gap && !slices.ContainsFunc(f.dtypes, func(d string) bool { return d != "f16" }) {
		return usagef("--teacher-gap needs an 8-bit --teacher-dtype (fp8 or q8)")
	}
	if f.deadline > 0 {
		f.o.Deadline = time.Now().Add(f.deadline)
	}
	return measureBench(f, set, args)
}

// renderBench renders a report (--report, --cpu) instead of measuring.
func renderBench(f benchFlags, set map[string]bool) error {
	for _, n := range []string{"model", "nb", "t", "k", "steps", "reps", "warmup", "teacher", "teacher-dtype", "teacher-gap", "tensor-cores", "json", "deadline", "cpuprofile"} {
		if set[n] {
			return usagef("--%s measures; it cannot be combined with --report", n)
		}
	}
	// The roofline's ceilings are the measuring run's, kept in its JSON: a report cannot
	// change them (they were silently ignored here before).
	for _, n := range []string{"peak-tflops", "peak-gbps", "peak-tensor-tflops"} {
		if set[n] {
			return usagef("--%s is the measuring run's ceiling, kept in its JSON; give it when measuring, not with --report", n)
		}
	}
	if f.fm != "md" && f.fm != "text" {
		return usagef("--format must be md or text, got %q", f.fm)
	}
	if f.report == "" && (f.fm != "md" || f.peer != "" || f.notes != "") {
		return usagef("--format text and --peer need --report")
	}
	return bench.RenderReport(os.Stdout, f.report, f.before, f.peer, f.cpu, f.notes, f.fm)
}

// measureBench measures every geometry of f (bench.Suite.Run; rank 0 of a data-parallel run
// prints and writes the JSON, after every geometry). It fails when every geometry failed.
func measureBench(f benchFlags, set map[string]bool, args []string) error {
	o := &f.o
	o.Stdout, o.Progress = os.Stdout, os.Stderr
	mr, err := startMPI()
	if err != nil {
		return err
	}
	defer mr.finish()
	if R := mr.comm.Size(); R > 1 {
		if f.deadline > 0 {
			return usagef("--deadline cannot be used with %d ranks (each rank would stop at another step)", R)
		}
		o.Comm = mr.comm
		if mr.comm.Rank() != 0 { // rank 0 prints and writes the JSON and the CPU profile
			o.Stdout, o.Progress, f.json, o.CPUProfile = io.Discard, io.Discard, "", ""
		}
	}
	dev, err := openDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	cpuDefaults(o, dev, set)
	if err := o.CheckTensorCores(dev); err != nil {
		return err
	}
	rep := bench.NewReport(dev, o, "nvg bench "+strings.Join(args, " "))
	return bench.Suite{DTypes: f.dtypes, Gap: f.gap, JSON: f.json}.Run(dev, *o, rep)
}

// cpuDefaults sizes a run on a CPU adapter (lavapipe) down, unless the flags say otherwise:
// 2 windows of 128 tokens, the tiny geometry; a GPU's default geometries are the peer's.
func cpuDefaults(o *bench.Options, dev *gpu.Device, set map[string]bool) {
	cpu := dev.Info().CPU
	if cpu && !set["nb"] {
		o.NB = 2
	}
	if cpu && !set["t"] {
		o.T = 128
	}
	if o.Models == nil {
		o.Models = []string{"0.8B", "4B", "9B", "27B"}
		if cpu {
			o.Models = []string{"tiny"}
		}
	}
}
