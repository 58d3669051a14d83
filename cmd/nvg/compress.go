package main

import (
	"cmp"
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

// compressFlags are nvg compress's flags: s holds those a run of nvg distill shares (the
// teacher, bits per weight, paths, init, seed, and --init refine's calibration text and
// tokenizer), the rest say how this compression runs and where it writes.
type compressFlags struct {
	s                   train.Setup
	products            string
	workers, powerIters int
	out, json           string
	force               bool
	calib               calibFlags
	opts                compress.Options // the compressor's options, made by check
}

func (f *compressFlags) bind(c *command) *flag.FlagSet {
	fs := newFlags(c)
	fs.Float64Var(&f.s.BitsPerWeight, "bpw", 1.0, "target bits per weight of every compressed linear (0 < bpw ≤ 32)")
	fs.StringVar(&f.s.Paths, "paths", "auto", "BLR paths per tensor: auto (lower error at the same budget), 1 or 2")
	fs.Uint64Var(&f.s.Train.Seed, "seed", 1, "seed of the randomised SVD sketches (same seed and SVD products, same student: the defaults write the student nvg distill trains)")
	fs.IntVar(&f.workers, "workers", 0, "tensors compressed at once (0: GOMAXPROCS)")
	fs.IntVar(&f.powerIters, "power-iters", 2, "power iterations of the randomised SVD (0: none; 1 is ~1.35× faster at ~0.4 % higher error)")
	fs.StringVar(&f.products, "products", "cpu-f64", "where and in what precision the randomised SVDs' large products run: cpu-f64 (gonum, float64: the library's and nvg distill's default), cpu-f32 (~2× faster, relative errors within ~1e-4) or gpu-f32 (the WebGPU device, float32: much faster on a real GPU). Each gives a slightly different student")
	fs.StringVar(&f.out, "o", "", "output student .cmf file (written atomically)")
	fs.StringVar(&f.json, "json", "", "also write the per-tensor report as JSON to this file")
	fs.BoolVar(&f.force, "force", false, "replace -o (and --json) when they exist")
	fs.StringVar(&f.s.Init, "init", "dual-svid", "initial factorisation: dual-svid, or refine (a calibration pass of the teacher on the GPU over windows of the training text, then signs and scales refined in the metric of its input statistics, as nvg distill --init refine)")
	f.calib.bind(fs, train.CalibrationConfig{})
	fs.Var(fileList{&f.s.TrainFiles}, "train-files", "with --init refine: comma-separated `sources` of the calibration text (default: the Go standard library training split, as nvg distill's)")
	fs.StringVar(&f.s.Tokenizer, "tokenizer", "", "with --init refine: tokenizer.json (default: beside the teacher, or the embedded one)")
	return fs
}

// check validates the flags before any work and makes the compressor's options (f.opts:
// train.Setup.Compression and this command's workers, power iterations and products).
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
	if !(f.s.BitsPerWeight > 0 && f.s.BitsPerWeight <= 32) || math.IsNaN(f.s.BitsPerWeight) {
		return usagef("--bpw must be in (0, 32], got %g", f.s.BitsPerWeight)
	}
	if _, err := compress.ParsePathMode(f.s.Paths); err != nil {
		return usagef("--%v", err)
	}
	if err := f.calib.check(f.s.Init); err != nil {
		return err
	}
	f.s.Calibration = f.calib.config()
	f.opts, _ = f.s.Compression() // paths, init and calibration checked above
	if f.s.TrainFiles != nil {
		if f.opts.Init != compress.InitRefine {
			return usagef("--train-files is the calibration text of --init refine")
		}
		var err error
		if f.s.TrainFiles, err = expandCorpus("train-files", f.s.TrainFiles); err != nil {
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
	f.opts.Workers, f.opts.SVD.PowerIters = f.workers, cmp.Or(f.powerIters, -1) // SVDOptions: negative means none, 0 the default
	if f.products == "cpu-f32" {
		f.opts.Products = compress.CPUProducts{Float32: true}
	}
	return nil
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
	f.s.Teacher = path
	teacher, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer teacher.Close()
	var dev *gpu.Device
	where := f.products
	if f.products == "gpu-f32" || f.opts.Init == compress.InitRefine {
		if dev, err = gpu.Open(); err != nil {
			return fmt.Errorf("--products %s, --init %s: %w", f.products, f.s.Init, err)
		}
		defer dev.Close()
	}
	opts := f.opts
	start := time.Now()
	if opts.Init == compress.InitRefine {
		bar := train.NewProgress(os.Stderr, "calibrate")
		opts.Calibration, err = train.CalibrateTeacher(context.Background(), dev, teacher, f.s, logf, func(done, total int) { bar.Update(done, total, "") })
		bar.Finish("")
		if err != nil {
			return err
		}
	}
	products := dev
	if f.products != "gpu-f32" {
		products = nil // the GPU was opened for the calibration only
	} else {
		where += " on " + dev.Info().Name
	}
	fmt.Fprintf(os.Stderr, "compressing %s at %g bits/weight, paths %s, init %s, seed %d, SVD products %s\n", train.ModelName(path), opts.BitsPerWeight, opts.Paths, opts.Init, opts.Seed, where)
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
	bpwMissWarning(opts.BitsPerWeight, compress.OverallBitsPerWeight(reports))
	return f.writeReport(reports, opts, path, dev, secs)
}

// writeReport writes --json: the compression's compress.ModelReport.
func (f *compressFlags) writeReport(reports []compress.TensorReport, opts compress.Options, path string, dev *gpu.Device, secs float64) error {
	if f.json == "" {
		return nil
	}
	rep := compress.NewModelReport(reports, opts)
	rep.Teacher, rep.Output, rep.Products, rep.Seconds = train.ModelName(path), f.out, f.products, secs
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
