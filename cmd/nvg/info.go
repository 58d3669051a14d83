package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "info",
		summary: "print a model's architecture, parameter counts per tensor kind, dtypes and bytes",
		usage:   "[--json] [MODEL]   (MODEL: HF directory, .cmf file or sharded CMF directory; default: the embedded tiny teacher)",
		run:     runInfo,
	})
}

func runInfo(args []string) error {
	c := commands["info"]
	fs := newFlags(c)
	asJSON := fs.Bool("json", false, "print the config, counts and bytes as JSON")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("want at most one MODEL, got %d arguments", fs.NArg())
	}
	path := fs.Arg(0)
	m, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer m.Close()
	valid := m.Validate()
	pc := m.ParamCounts()
	if *asJSON {
		out := map[string]any{"model": train.ModelName(path), "config": m.Config, "params": pc, "total_params": pc.Total(), "total_bytes": pc.TotalBytes()}
		if q := m.Quantization(); q != nil {
			out["quantization"] = quantJSON(q)
		}
		if valid != nil {
			out["invalid"] = valid.Error()
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	cfg := m.Config
	fmt.Printf("model          %s\n", train.ModelName(path))
	fmt.Printf("architecture   %s, %d layers (%s), hidden_size %d, intermediate_size %d, vocab_size %d\n",
		orDefault(cfg.ModelType, "qwen3_5_text"), cfg.NumHiddenLayers, layerPattern(cfg), cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize)
	fmt.Printf("attention      %d query heads / %d KV heads of head_dim %d, rotary dims %d of %d, rope_theta %g\n",
		cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim, cfg.RotaryDim(), cfg.HeadDim, cfg.RopeTheta)
	fmt.Printf("GatedDeltaNet  %d key heads × %d, %d value heads × %d, conv kernel %d\n",
		cfg.LinearNumKeyHeads, cfg.LinearKeyHeadDim, cfg.LinearNumValueHeads, cfg.LinearValueHeadDim, cfg.LinearConvKernelDim)
	fmt.Printf("head           tied to the embedding: %v; rms_norm_eps %g\n\n", cfg.TieWordEmbeddings, cfg.RMSNormEps)
	fmt.Printf("%-16s %14s\n", "tensor kind", "parameters")
	for _, r := range []struct {
		k string
		n int64
	}{{"embedding", pc.Embedding}, {"attention", pc.Attention}, {"GatedDeltaNet", pc.GatedDeltaNet}, {"MLP", pc.MLP}, {"norms", pc.Norms}, {"head", pc.Head}, {"other", pc.Other}} {
		if r.n > 0 || r.k != "other" {
			fmt.Printf("%-16s %14d\n", r.k, r.n)
		}
	}
	fmt.Printf("%-16s %14d\n\n", "total", pc.Total())
	var dts []string
	for d := range pc.Bytes {
		dts = append(dts, string(d))
	}
	sort.Strings(dts)
	fmt.Printf("%-16s %14s\n", "dtype", "bytes")
	for _, d := range dts {
		fmt.Printf("%-16s %14s\n", d, humanBytes(pc.Bytes[cmf.DType(d)]))
	}
	fmt.Printf("%-16s %14s (%d tensors)\n", "total", humanBytes(pc.TotalBytes()), len(m.Tensors))
	printQuantization(m)
	if valid != nil {
		return valid
	}
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// layerPattern summarises layer_types as runs, e.g. "3×GatedDeltaNet+1×attention ×2".
func layerPattern(cfg arch.Config) string {
	var parts []string
	for i := 0; i < len(cfg.LayerTypes); {
		j := i
		for j < len(cfg.LayerTypes) && cfg.LayerTypes[j] == cfg.LayerTypes[i] {
			j++
		}
		kind := "GatedDeltaNet"
		if cfg.LayerTypes[i] == arch.FullAttention {
			kind = "attention"
		}
		parts = append(parts, fmt.Sprintf("%d×%s", j-i, kind))
		i = j
	}
	return strings.Join(parts, ", ")
}
