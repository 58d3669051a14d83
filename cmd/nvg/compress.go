package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/nvgkit/ui"
)

func init() {
	register(&command{
		name:    "compress",
		summary: "compress a teacher into a binary-low-rank student (.cmf) at a bits-per-weight budget",
		usage:   "[--bpw 1.0] [--paths auto|1|2] [--init dual-svid|refine [--calib-windows 16] [--calib-t 256] [--calib-gram-max 4096] [--train-files a.go,…] [--tokenizer F]] [--seed N] [--workers N] [--power-iters 2] [--products cpu-f64|cpu-f32|gpu-f32] -o STUDENT.cmf [--json REPORT.json] [--force] [TEACHER]   (TEACHER: HF dir or .cmf; default the embedded tiny teacher)",
		run:     runCompress,
	})
}

// compressReport is the --json output of nvg compress.
type compressReport struct {
	Teacher    string                  `json:"teacher"`
	Output     string                  `json:"output"`
	TargetBPW  float64                 `json:"target_bits_per_weight"`
	Paths      string                  `json:"paths"`
	Init       string                  `json:"init"`
	Seed       uint64                  `json:"seed"`
	Products   string                  `json:"products"`         // the randomised SVDs' large products: cpu-f64, cpu-f32 or gpu-f32 (train.ProductsName)
	Device     string                  `json:"device,omitempty"` // the GPU adapter of gpu-f32
	OverallBPW float64                 `json:"overall_bits_per_weight"`
	Seconds    float64                 `json:"seconds"`
	Kinds      []compress.KindSummary  `json:"kinds"`
	Tensors    []compress.TensorReport `json:"tensors"`
}

// compressFlags are nvg compress's flags.
type compressFlags struct {
	bpw                 float64
	paths, products     string
	seed                uint64
	workers, powerIters int
	out, json           string
	force               bool
	pm                  compress.PathMode // paths, parsed
	init                string
	init0               compress.Init // init, parsed
	calib               calibFlags
	trainFiles          []string
	tokenizer           string
}

func (f *compressFlags) bind(c *command) *flag.FlagSet {
	fs := newFlags(c)
	fs.Float64Var(&f.bpw, "bpw", 1.0, "target bits per weight of every compressed linear (0 < bpw ≤ 32)")
	fs.StringVar(&f.paths, "paths", "auto", "BLR paths per tensor: auto (lower error at the same budget), 1 or 2")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the randomised SVD sketches (same seed and SVD products, same student: the defaults write the student nvg distill trains)")
	fs.IntVar(&f.workers, "workers", 0, "tensors compressed at once (0: GOMAXPROCS)")
	fs.IntVar(&f.powerIters, "power-iters", 2, "power iterations of the randomised SVD (0: none; 1 is ~1.35× faster at ~0.4 % higher error)")
	fs.StringVar(&f.products, "products", "cpu-f64", "where and in what precision the randomised SVDs' large products run: cpu-f64 (gonum, float64: the library's and nvg distill's default), cpu-f32 (~2× faster, relative errors within ~1e-4) or gpu-f32 (the WebGPU device, float32: much faster on a real GPU). Each gives a slightly different student")
	fs.StringVar(&f.out, "o", "", "output student .cmf file (written atomically)")
	fs.StringVar(&f.json, "json", "", "also write the per-tensor report as JSON to this file")
	fs.BoolVar(&f.force, "force", false, "replace -o (and --json) when they exist")
	fs.StringVar(&f.init, "init", "dual-svid", "initial factorisation: dual-svid, or refine (a calibration pass of the teacher on the GPU over windows of the training text, then signs and scales refined in the metric of its input statistics, as nvg distill --init refine)")
	f.calib.bind(fs, train.CalibrationConfig{})
	fs.Var(fileList{&f.trainFiles}, "train-files", "with --init refine: comma-separated `sources` of the calibration text (default: the Go standard library training split, as nvg distill's)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "with --init refine: tokenizer.json (default: beside the teacher, or the embedded one)")
	return fs
}

// check validates the flags (and parses --paths) before any work.
func (f *compressFlags) check(nargs int) error {
	if nargs > 1 {
		return usagef("want at most one TEACHER, got %d arguments", nargs)
	}
	if f.out == "" {
		return usagef("-o STUDENT.cmf is required")
	}
	if err := checkOutFile("-o", f.out, f.force); err != nil {
		return err
	}
	if f.json != "" {
		if filepath.Clean(f.json) == filepath.Clean(f.out) {
			return usagef("--json %s is the same file as -o", f.json)
		}
		if err := checkOutFile("--json", f.json, f.force); err != nil {
			return err
		}
	}
	if !(f.bpw > 0 && f.bpw <= 32) || math.IsNaN(f.bpw) {
		return usagef("--bpw must be in (0, 32], got %g", f.bpw)
	}
	var err error
	if f.pm, err = compress.ParsePathMode(f.paths); err != nil {
		return usagef("--%v", err)
	}
	if err := f.calib.check(f.init); err != nil {
		return err
	}
	f.init0, _ = compress.ParseInit(f.init)
	if f.trainFiles != nil {
		if f.init0 != compress.InitRefine {
			return usagef("--train-files is the calibration text of --init refine")
		}
		if f.trainFiles, err = expandCorpus("train-files", f.trainFiles); err != nil {
			return err
		}
	}
	switch {
	case f.powerIters < 0:
		return usagef("--power-iters must be ≥ 0, got %d", f.powerIters)
	case f.workers < 0:
		return usagef("--workers must be ≥ 0, got %d", f.workers)
	case f.products != "cpu-f64" && f.products != "cpu-f32" && f.products != "gpu-f32":
		return usagef("--products must be cpu-f64, cpu-f32 or gpu-f32, got %q", f.products)
	}
	return nil
}

// options are the compressor's options of the flags.
func (f *compressFlags) options() compress.Options {
	pi := f.powerIters
	if pi == 0 {
		pi = -1 // SVDOptions: negative means none, 0 the default
	}
	opt := compress.Options{BitsPerWeight: f.bpw, Paths: f.pm, Seed: f.seed, Workers: f.workers, SVD: compress.SVDOptions{PowerIters: pi}, Init: f.init0}
	if f.products == "cpu-f32" {
		opt.Products = compress.CPUProducts{Float32: true}
	}
	return opt
}

func runCompress(args []string) error {
	c := commands["compress"]
	var f compressFlags
	fs := f.bind(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if err := f.check(fs.NArg()); err != nil {
		return err
	}
	path := fs.Arg(0)
	teacher, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer teacher.Close()
	var dev *gpu.Device
	where := f.products
	if f.products == "gpu-f32" || f.init0 == compress.InitRefine {
		if dev, err = gpu.Open(); err != nil {
			return fmt.Errorf("--products %s, --init %s: %w", f.products, f.init, err)
		}
		defer dev.Close()
	}
	opts := f.options()
	start := time.Now()
	if f.init0 == compress.InitRefine {
		if opts.Calibration, err = f.calibrate(dev, teacher, path); err != nil {
			return err
		}
	}
	products := dev
	if f.products != "gpu-f32" {
		products = nil // the GPU was opened for the calibration only
	} else {
		where += " on " + dev.Info().Name
	}
	fmt.Fprintf(os.Stderr, "compressing %s at %g bits/weight, paths %s, init %s, seed %d, SVD products %s\n", train.ModelName(path), f.bpw, f.pm, f.init0, f.seed, where)
	bar := train.NewProgress(os.Stderr, "compress")
	student, reports, err := compress.ModelOn(products, teacher, opts, func(done, total int, name string) {
		bar.Update(done, total, name)
	})
	bar.Finish("")
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if err := cmf.WriteCMF(f.out, student); err != nil {
		return err
	}
	if err := compress.WriteTable(os.Stdout, reports); err != nil {
		return err
	}
	if hasInitErrors(reports) {
		fmt.Println("reconstruction error per layer (mean over its tensors):")
		if err := ui.WriteLayerReconstruction(os.Stdout, train.SessionReports(reports)); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %s (%.1fs)\n", f.out, secs)
	bpwMissWarning(f.bpw, compress.OverallBitsPerWeight(reports))
	if f.json == "" {
		return nil
	}
	rep := compressReport{Teacher: train.ModelName(path), Output: f.out, TargetBPW: f.bpw, Paths: f.pm.String(), Init: f.init0.String(), Seed: f.seed, Products: f.products,
		OverallBPW: compress.OverallBitsPerWeight(reports), Seconds: secs, Kinds: compress.SummarizeByKind(reports), Tensors: reports}
	if dev != nil {
		rep.Device = dev.Info().Name
	}
	b, err := json.MarshalIndent(rep, "", " ")
	if err == nil {
		err = atomicfile.WriteBytes(f.json, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// calibrate runs the calibration pass of --init refine on dev: the teacher (at path) loaded
// as a Teacher net, the training split of the corpus (--train-files, else the Go standard
// library's) tokenized, and train.Calibrate with the --calib-* flags and --seed, as nvg
// distill --init refine does before it compresses.
func (f *compressFlags) calibrate(dev *gpu.Device, teacher *cmf.Model, path string) (*compress.Calibration, error) {
	tok, err := train.OpenTokenizer(f.tokenizer, path, teacher.Config, logf)
	if err != nil {
		return nil, err
	}
	var corpus *data.Corpus
	if f.trainFiles != nil {
		corpus, err = data.FilesCorpus(f.trainFiles, nil)
	} else {
		corpus, err = data.StdlibCorpus()
	}
	if err != nil {
		return nil, err
	}
	ids, err := corpus.Tokens(tok, data.Train, train.TokenCacheDir())
	if err != nil {
		return nil, fmt.Errorf("calibration text: %w", err)
	}
	net, err := nvgkit.LoadNet(dev, teacher, nvgkit.Teacher)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	c := f.calib.config().Resolved()
	fmt.Fprintf(os.Stderr, "calibration: %d windows × %d tokens of the training text through the teacher on %s, Grams of inputs of at most %d features\n", c.Windows, c.T, dev.Info().Name, c.GramMax)
	bar := train.NewProgress(os.Stderr, "calibrate")
	cal, err := train.Calibrate(context.Background(), net, ids, c, f.seed, func(done, total int) { bar.Update(done, total, "") })
	bar.Finish("")
	return cal, err
}
