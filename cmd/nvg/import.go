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
		summary: "convert an HF checkpoint (single or sharded safetensors) into a .cmf file",
		usage:   "[--shard-bytes N] [--force] HF_DIR OUT.cmf   (with --shard-bytes, OUT is a directory of shards + model.cmf.index.json)",
		run:     runImport,
	})
}

func runImport(args []string) error {
	c := commands["import"]
	fs := newFlags(c)
	shard := fs.Int64("shard-bytes", 0, "write a sharded CMF directory with shards of at most this many bytes (0: one file)")
	force := fs.Bool("force", false, "replace OUT.cmf when it exists")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want HF_DIR and OUT.cmf, got %d arguments", fs.NArg())
	}
	if *shard < 0 {
		return usagef("--shard-bytes must be ≥ 0, got %d", *shard)
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
	return nil
}
