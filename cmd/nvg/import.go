package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "import",
		summary: "convert an HF checkpoint (single or sharded safetensors, bf16/f16/f32 or block-wise FP8) into a .cmf file",
		usage: "[--quantize q8|fp8] [--shard-bytes N] [--force] HF_DIR OUT.cmf   (with --shard-bytes, OUT is a directory of shards + model.cmf.index.json)\n\n" +
			"An FP8 checkpoint's weights are stored as they are (e4m3 codes and their weight_scale_inv). --quantize q8\n" +
			"stores every decoder projection of a bf16/f16/f32 checkpoint in 8 bits: int8 codes and an f16 scale per\n" +
			"row and 128 inputs (8.125 bits per weight; DESIGN.md §4); --quantize fp8 in HF's block-wise FP8.",
		run: runImport,
	})
}

func runImport(args []string) error {
	c := commands["import"]
	fs := newFlags(c)
	shard := fs.Int64("shard-bytes", 0, "write a sharded CMF directory with shards of at most this many bytes (0: one file)")
	force := fs.Bool("force", false, "replace OUT.cmf when it exists")
	quantize := fs.String("quantize", "", "store the decoder projections in 8 bits: q8 (int8, an f16 scale per row and 128 inputs) or fp8 (e4m3, an f32 scale per 128×128 block)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want HF_DIR and OUT.cmf, got %d arguments", fs.NArg())
	}
	if *shard < 0 {
		return usagef("--shard-bytes must be ≥ 0, got %d", *shard)
	}
	if q := cmf.QuantScheme(*quantize); q != "" && q != cmf.QuantQ8 && q != cmf.QuantFP8 {
		return usagef("--quantize must be q8 or fp8, got %q", *quantize)
	}
	in, out := fs.Arg(0), fs.Arg(1)
	if *shard == 0 {
		if err := checkOutFile("OUT", out, *force); err != nil {
			return err
		}
	} else if st, err := os.Stat(filepath.Dir(filepath.Clean(out))); err != nil || !st.IsDir() {
		return usagef("OUT %s: directory %s does not exist", out, filepath.Dir(filepath.Clean(out)))
	}
	start := time.Now()
	m, err := train.OpenModel(in)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Validate(); err != nil {
		return err
	}
	if *quantize != "" {
		if m, err = cmf.QuantizeModel(m, cmf.QuantScheme(*quantize)); err != nil { // a view: computed as it is written
			return err
		}
	}
	if *shard > 0 {
		err = cmf.WriteCMFSharded(out, m, *shard)
	} else {
		err = cmf.WriteCMF(out, m)
	}
	if err != nil {
		return err
	}
	pc := m.ParamCounts()
	fmt.Printf("wrote %s: %d tensors, %d parameters, %s in %.1fs\n", out, len(m.Tensors), pc.Total(), humanBytes(pc.TotalBytes()), time.Since(start).Seconds())
	printQuantization(m)
	return nil
}
