package main

import (
	"encoding/json"
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
)

func init() {
	register(&command{
		name:    "compress",
		summary: "compress a teacher into a binary-low-rank student (.cmf) at a bits-per-weight budget",
		usage:   "[--bpw 1.0] [--paths auto|1|2] [--seed N] [--workers N] [--power-iters 2] [--products cpu-f64|cpu-f32|gpu-f32] -o STUDENT.cmf [--json REPORT.json] [--force] [TEACHER]   (TEACHER: HF dir or .cmf; default the embedded tiny teacher)",
		run:     runCompress,
	})
}

// compressReport is the --json output of nvg compress.
type compressReport struct {
	Teacher    string                  `json:"teacher"`
	Output     string                  `json:"output"`
	TargetBPW  float64                 `json:"target_bits_per_weight"`
	Paths      string                  `json:"paths"`
	Seed       uint64                  `json:"seed"`
	Products   string                  `json:"products"`         // the randomised SVDs' large products: cpu-f64, cpu-f32 or gpu-f32 (train.ProductsName)
	Device     string                  `json:"device,omitempty"` // the GPU adapter of gpu-f32
	OverallBPW float64                 `json:"overall_bits_per_weight"`
	Seconds    float64                 `json:"seconds"`
	Kinds      []compress.KindSummary  `json:"kinds"`
	Tensors    []compress.TensorReport `json:"tensors"`
}

func runCompress(args []string) error {
	c := commands["compress"]
	fs := newFlags(c)
	bpw := fs.Float64("bpw", 1.0, "target bits per weight of every compressed linear (0 < bpw ≤ 32)")
	paths := fs.String("paths", "auto", "BLR paths per tensor: auto (lower error at the same budget), 1 or 2")
	seed := fs.Uint64("seed", 1, "seed of the randomised SVD sketches (same seed and SVD products, same student: the defaults write the student nvg distill trains)")
	workers := fs.Int("workers", 0, "tensors compressed at once (0: GOMAXPROCS)")
	powerIters := fs.Int("power-iters", 2, "power iterations of the randomised SVD (0: none; 1 is ~1.35× faster at ~0.4 % higher error)")
	products := fs.String("products", "cpu-f64", "where and in what precision the randomised SVDs' large products run: cpu-f64 (gonum, float64: the library's and nvg distill's default), cpu-f32 (~2× faster, relative errors within ~1e-4) or gpu-f32 (the WebGPU device, float32: much faster on a real GPU). Each gives a slightly different student")
	out := fs.String("o", "", "output student .cmf file (written atomically)")
	jsonOut := fs.String("json", "", "also write the per-tensor report as JSON to this file")
	force := fs.Bool("force", false, "replace -o (and --json) when they exist")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("want at most one TEACHER, got %d arguments", fs.NArg())
	}
	if *out == "" {
		return usagef("-o STUDENT.cmf is required")
	}
	if err := checkOutFile("-o", *out, *force); err != nil {
		return err
	}
	if *jsonOut != "" {
		if filepath.Clean(*jsonOut) == filepath.Clean(*out) {
			return usagef("--json %s is the same file as -o", *jsonOut)
		}
		if err := checkOutFile("--json", *jsonOut, *force); err != nil {
			return err
		}
	}
	if !(*bpw > 0 && *bpw <= 32) || math.IsNaN(*bpw) {
		return usagef("--bpw must be in (0, 32], got %g", *bpw)
	}
	pm, err := compress.ParsePathMode(*paths)
	if err != nil {
		return usagef("--%v", err)
	}
	if *powerIters < 0 {
		return usagef("--power-iters must be ≥ 0, got %d", *powerIters)
	}
	if *workers < 0 {
		return usagef("--workers must be ≥ 0, got %d", *workers)
	}
	switch *products {
	case "cpu-f64", "cpu-f32", "gpu-f32":
	default:
		return usagef("--products must be cpu-f64, cpu-f32 or gpu-f32, got %q", *products)
	}
	path := fs.Arg(0)
	teacher, err := openModel(path)
	if err != nil {
		return err
	}
	defer teacher.Close()

	var dev *gpu.Device
	devName := ""
	if *products == "gpu-f32" {
		if dev, err = gpu.Open(); err != nil {
			return fmt.Errorf("--products gpu-f32: %w", err)
		}
		defer dev.Close()
		devName = dev.Info().Name
	}
	pi := *powerIters
	if pi == 0 {
		pi = -1 // SVDOptions: negative means none, 0 the default
	}
	opt := compress.Options{BitsPerWeight: *bpw, Paths: pm, Seed: *seed, Workers: *workers, SVD: compress.SVDOptions{PowerIters: pi}}
	if *products == "cpu-f32" {
		opt.Products = compress.CPUProducts{Float32: true}
	}
	where := *products
	if devName != "" {
		where += " on " + devName
	}
	fmt.Fprintf(os.Stderr, "compressing %s at %g bits/weight, paths %s, seed %d, SVD products %s\n", modelName(path), *bpw, pm, *seed, where)
	bar := train.NewProgress(os.Stderr, "compress")
	start := time.Now()
	student, reports, err := compress.ModelOn(dev, teacher, opt, func(done, total int, name string) {
		bar.Update(done, total, name)
	})
	bar.Finish("")
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if err := cmf.WriteCMF(*out, student); err != nil {
		return err
	}
	if err := compress.WriteTable(os.Stdout, reports); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%.1fs)\n", *out, secs)
	bpwMissWarning(*bpw, compress.OverallBitsPerWeight(reports))
	if *jsonOut != "" {
		rep := compressReport{Teacher: modelName(path), Output: *out, TargetBPW: *bpw, Paths: pm.String(), Seed: *seed, Products: *products, Device: devName,
			OverallBPW: compress.OverallBitsPerWeight(reports), Seconds: secs, Kinds: compress.SummarizeByKind(reports), Tensors: reports}
		b, err := json.MarshalIndent(rep, "", " ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteBytes(*jsonOut, append(b, '\n')); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	return nil
}
