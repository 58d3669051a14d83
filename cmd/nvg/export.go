package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/nvg-project/nvg/arch"
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

// exportSources are the files nvg export takes from beside the student (or from the
// embedded tiny teacher when the student has its architecture and nothing is beside it).
type exportSources struct {
	tok, tokCfg, baseCfg []byte
	tokFrom, cfgFrom     string // where they came from, for the printed summary
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
	src, err := exportFiles(*tok, path, student.Config)
	if err != nil {
		return err
	}
	opt := cmf.ExportHFOptions{TokenizerConfigJSON: src.tokCfg, BaseConfigJSON: src.baseCfg, MaxShardBytes: *shard, MaxPositionEmbeddings: *maxPos}
	nBLR := 0
	for _, t := range student.Tensors {
		if t.DType == cmf.BLR {
			nBLR++
		}
	}
	fmt.Fprintf(os.Stderr, "exporting %s (%d BLR tensors to expand) to %s\n", path, nBLR, *out)
	if err := cmf.ExportHFWith(*out, student, src.tok, opt); err != nil {
		return err
	}
	fmt.Printf("tokenizer: %s\n", src.tokFrom)
	if src.cfgFrom != "" {
		fmt.Printf("config fields beyond the architecture: %s\n", src.cfgFrom)
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

// exportFiles finds tokenizer.json (explicit, else beside the model), the
// tokenizer_config.json beside it, and a config.json of the same architecture beside the
// model (the HF directory's own, or one next to a .cmf); for a student of the embedded
// tiny teacher's architecture, missing ones come from the embedded teacher. No tokenizer
// at all is a usage error.
func exportFiles(explicit, modelPath string, cfg arch.Config) (exportSources, error) {
	var s exportSources
	dir := modelPath
	if st, err := os.Stat(modelPath); err == nil && !st.IsDir() {
		dir = filepath.Dir(modelPath)
	}
	tokDir := dir
	if explicit != "" {
		b, err := train.TokenizerJSON(explicit, "", nil, logf)
		if err != nil {
			return s, err
		}
		s.tok, s.tokFrom = b, explicit
		tokDir = explicit
		if st, err := os.Stat(explicit); err == nil && !st.IsDir() {
			tokDir = filepath.Dir(explicit)
		}
	} else if p := filepath.Join(dir, cmf.HFTokenizerName); exists(p) {
		b, err := os.ReadFile(p)
		if err != nil {
			return s, err
		}
		s.tok, s.tokFrom = b, p
	}
	if s.tok != nil {
		if p := filepath.Join(tokDir, cmf.HFTokenizerConfigName); exists(p) {
			b, err := os.ReadFile(p)
			if err != nil {
				return s, err
			}
			s.tokCfg = b
		}
	}
	if p := filepath.Join(dir, cmf.HFConfigName); exists(p) {
		if b, err := os.ReadFile(p); err == nil {
			if _, err := cmf.HFConfigJSON(cfg, b, 0); err == nil {
				s.baseCfg, s.cfgFrom = b, p
			} else {
				fmt.Fprintf(os.Stderr, "note: ignoring %s: %v\n", p, err)
			}
		}
	}
	if train.IsDefaultArchitecture(cfg) {
		read := func(name string) []byte {
			b, _ := train.DefaultModelFile(name)
			return b
		}
		if s.tok == nil {
			s.tok, s.tokCfg, s.tokFrom = read(cmf.HFTokenizerName), read(cmf.HFTokenizerConfigName), train.DefaultModelName+" (same architecture)"
		}
		if s.baseCfg == nil {
			s.baseCfg, s.cfgFrom = read(cmf.HFConfigName), train.DefaultModelName+" (same architecture)"
		}
	}
	if s.tok == nil {
		return s, usagef("no tokenizer.json beside %s: pass --tokenizer FILE", modelPath)
	}
	return s, nil
}
