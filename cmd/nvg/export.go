package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "export",
		summary: "export a (distilled) student as a dense HuggingFace checkpoint (BLR expanded to bf16) for transformers and other tools",
		usage: "--hf OUT_DIR [--tokenizer FILE|DIR] [--max-shard-bytes N] [--max-position-embeddings N] STUDENT   " +
			"(STUDENT: a .cmf file, a sharded CMF directory or an HF directory)",
		run: runExport,
	})
}

func runExport(args []string) error {
	c := commands["export"]
	fset := newFlags(c)
	out := fset.String("hf", "", "output directory of the HF checkpoint (created if missing; every file written atomically)")
	tok := fset.String("tokenizer", "", "tokenizer.json file, or a directory holding it (default: beside STUDENT, else the embedded tiny teacher's for a student of its architecture)")
	shard := fset.Int64("max-shard-bytes", 0, "largest safetensors shard in bytes of tensor data (0: 5000000000, transformers' 5GB)")
	maxPos := fset.Int("max-position-embeddings", 0, "max_position_embeddings of config.json (0: the source config's, else 262144)")
	force := fset.Bool("force", false, "write into OUT_DIR even if it already holds files (an earlier export's files are replaced)")
	if err := parseFlags(c, fset, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--hf OUT_DIR is required")
	}
	if des, err := os.ReadDir(*out); err == nil && len(des) > 0 && !*force {
		return usagef("--hf %s is not empty (%d entries): choose a new directory, or pass --force to replace an earlier export there", *out, len(des))
	} else if err != nil && !os.IsNotExist(err) {
		return usagef("--hf %s: %v", *out, err)
	}
	if fset.NArg() != 1 {
		return usagef("want exactly one STUDENT (a .cmf file or a model directory), got %d arguments", fset.NArg())
	}
	if *shard < 0 {
		return usagef("--max-shard-bytes must be ≥ 0, got %d", *shard)
	}
	if *maxPos < 0 {
		return usagef("--max-position-embeddings must be ≥ 0, got %d", *maxPos)
	}
	path := fset.Arg(0)
	student, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer student.Close()
	src, err := train.ExportFiles(*tok, path, student.Config, logf)
	if err != nil {
		return err
	}
	opt := cmf.ExportHFOptions{TokenizerConfigJSON: src.TokenizerConfig, BaseConfigJSON: src.Config, MaxShardBytes: *shard, MaxPositionEmbeddings: *maxPos}
	nBLR := 0
	for _, t := range student.Tensors {
		if t.DType == cmf.BLR {
			nBLR++
		}
	}
	fmt.Fprintf(os.Stderr, "exporting %s (%d BLR tensors to expand) to %s\n", path, nBLR, *out)
	if err := cmf.ExportHFWith(*out, student, src.Tokenizer, opt); err != nil {
		return err
	}
	fmt.Printf("tokenizer: %s\n", src.TokenizerFrom)
	if src.ConfigFrom != "" {
		fmt.Printf("config fields beyond the architecture: %s\n", src.ConfigFrom)
	}
	des, err := os.ReadDir(*out)
	if err != nil {
		return err
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(*out, n)); err == nil && st.Mode().IsRegular() {
			fmt.Printf("  %-40s %s\n", n, humanBytes(st.Size()))
		}
	}
	fmt.Printf("wrote %s\n", *out)
	return nil
}
