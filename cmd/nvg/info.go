package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "info",
		summary: "print a model's architecture, parameter counts per tensor kind, dtypes and bytes (--gpu: the GPU and its tensor cores)",
		usage: "[--json] [MODEL]   (MODEL: HF directory, .cmf file or sharded CMF directory; default: the embedded tiny teacher)\n" +
			"       nvg info --gpu [--json]",
		run: runInfo,
	})
}

func runInfo(args []string) error {
	c := commands["info"]
	fs := newFlags(c)
	asJSON := fs.Bool("json", false, "print the config, counts and bytes (with --gpu: the adapter and its tensor cores) as JSON")
	gpuInfo := fs.Bool("gpu", false, "open the GPU nvg would use and print its adapter, driver, limits and tensor cores (whether the GEMMs run on cooperative matrices, or why not) instead of a model")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if *gpuInfo {
		if fs.NArg() > 0 {
			return usagef("--gpu describes the GPU, not a model: give MODEL without --gpu")
		}
		return printGPU(*asJSON)
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
			out["quantization"] = q
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
		cmp.Or(cfg.ModelType, "qwen3_5_text"), cfg.NumHiddenLayers, cfg.LayerPattern(), cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize)
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

// printGPU opens the GPU nvg would use (NVG_ADAPTER, NVG_TENSOR_CORES) and prints its
// adapter and limits and its tensor cores: "on (16×16×16 f16→f32, subgroup 32)" or "off:
// reason", the self-test at Open, the cooperative-matrix types the device lists and the
// coopmat2 GEMM's status (VK_NV_cooperative_matrix2: available, chosen, or why not).
func printGPU(asJSON bool) error {
	dev, err := gpu.Open()
	if err != nil {
		return err
	}
	defer dev.Close()
	in, tc := dev.Info(), dev.TensorCores()
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"adapter": in, "tensor_cores": map[string]any{
			"status": tc.String(), "on": tc.On, "available": tc.Available, "reason": tc.Reason, "shape": tc.Shape,
			"subgroup_size": tc.SubgroupSize, "shapes": tc.Shapes, "self_test": tc.SelfTest, "features": tc.Features,
			"coopmat2": map[string]any{"available": tc.Coopmat2, "on": tc.Coopmat2 && tc.Coopmat2On, "reason": tc.Coopmat2Reason,
				"self_test": tc.Coopmat2SelfTest, "limits": tc.Coopmat2Limits, "flex_shapes": tc.FlexShapes,
				"pipeline_robustness": tc.PipelineRobustness}}})
	}
	fmt.Printf("adapter        %s (%s, %s)\n", in.Name, in.Type, in.Backend)
	fmt.Printf("driver         %s\n", strings.Join(strings.Fields(in.Vendor+" "+in.Description), " "))
	fmt.Printf("features       shader-f16 %v, subgroups %v, timestamps %v", in.ShaderF16, in.Subgroups, in.Timestamps)
	if len(in.Missing) > 0 {
		fmt.Printf(" (missing: %s)", strings.Join(in.Missing, ", "))
	}
	fmt.Printf("\nlimits         largest buffer %s, storage binding %s, workgroup memory %s, %d invocations per workgroup\n",
		humanBytes(int64(in.MaxBufferSize)), humanBytes(int64(in.MaxStorageBindingSize)), humanBytes(int64(in.MaxWorkgroupStorage)), in.MaxInvocations)
	fmt.Printf("tensor cores   %s\n", tc)
	if tc.SelfTest != "" {
		fmt.Printf("  self-test    %s\n", tc.SelfTest)
	}
	if len(tc.Shapes) > 0 {
		shapes := make([]string, len(tc.Shapes))
		for i, s := range tc.Shapes {
			shapes[i] = fmt.Sprintf("%s (%s)", s, s.Scope)
		}
		fmt.Printf("  device lists %s\n", strings.Join(shapes, ", "))
	}
	switch {
	case tc.Coopmat2:
		use := "available, not chosen (NVG_COOPMAT2=on chooses it)"
		if tc.Coopmat2On {
			use = "on: the dense GEMMs use it"
		}
		fmt.Printf("  coopmat2     %s; self-test: %s\n", use, tc.Coopmat2SelfTest)
	case tc.Available && tc.Coopmat2Reason != "":
		fmt.Printf("  coopmat2     off: %s\n", tc.Coopmat2Reason)
	}
	return nil
}
