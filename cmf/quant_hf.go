package cmf

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// hfQuantConfig is the part of an HF config.json's quantization_config nvg reads.
type hfQuantConfig struct {
	QuantMethod      *string `json:"quant_method"`
	Fmt              *string `json:"fmt"`
	ActivationScheme *string `json:"activation_scheme"`
	WeightBlockSize  []int   `json:"weight_block_size"`
}

// hfReadsWhat is what the HF reader understands, for the messages that refuse the rest.
const hfReadsWhat = `nvg reads f32, f16 and bf16 checkpoints and block-wise FP8 ones ("quant_method": "fp8" with "weight_block_size" [rows, columns], F8_E4M3 weights and a weight_scale_inv per block)`

// parseHFQuant reads the quantization_config of an HF config.json (at the top level, as
// transformers writes it, else inside text_config) and returns the FP8 block, or ok false
// when there is none. Errors name cfgPath: another quant_method (naming it), an fmt other
// than e4m3, static activation scales, a missing or malformed weight_block_size.
func parseHFQuant(cfgPath string, cfg []byte) (block [2]int, ok bool, err error) {
	var top struct {
		Q    json.RawMessage `json:"quantization_config"`
		Text struct {
			Q json.RawMessage `json:"quantization_config"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(cfg, &top); err != nil {
		return block, false, fmt.Errorf("%s: %w", cfgPath, err)
	}
	raw := top.Q
	if len(raw) == 0 || string(raw) == "null" {
		raw = top.Text.Q
	}
	if len(raw) == 0 || string(raw) == "null" {
		return block, false, nil
	}
	var q hfQuantConfig
	if err := json.Unmarshal(raw, &q); err != nil {
		return block, false, fmt.Errorf("%s: quantization_config: %w", cfgPath, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: quantization_config: %s; %s", cfgPath, fmt.Sprintf(format, a...), hfReadsWhat)
	}
	switch {
	case q.QuantMethod == nil:
		return block, false, bad("no quant_method")
	case *q.QuantMethod != "fp8":
		return block, false, bad("quant_method %q is not supported", *q.QuantMethod)
	case q.Fmt != nil && *q.Fmt != "e4m3":
		return block, false, bad("fmt %q is not supported (only e4m3)", *q.Fmt)
	case q.ActivationScheme != nil && *q.ActivationScheme == "static":
		return block, false, bad(`activation_scheme "static" (per-tensor activation scales) is not supported; nvg computes activations in f32 and reads "dynamic" checkpoints`)
	case q.WeightBlockSize == nil:
		return block, false, bad("no weight_block_size (per-tensor FP8 scales are not supported)")
	case len(q.WeightBlockSize) != 2 || q.WeightBlockSize[0] <= 0 || q.WeightBlockSize[1] <= 0:
		return block, false, bad("weight_block_size %v, want [rows, columns] of positive sizes", q.WeightBlockSize)
	}
	return [2]int{q.WeightBlockSize[0], q.WeightBlockSize[1]}, true, nil
}

// attachHFFP8 pairs the F8_E4M3 weights of an HF checkpoint's tensors (already under nvg's
// names) with their "<name>_scale_inv" tensors, which it removes from ts: each weight gets
// Quant{QuantFP8, the config's block, its scales}, checked by checkQuant. Errors name the
// file and tensor: F8_E4M3 weights without an fp8 quantization_config (or the config's own
// errors, parseHFQuant), a weight without its scales, scales without an F8_E4M3 weight,
// scales of the wrong shape or dtype.
func attachHFFP8(cfgPath string, cfg []byte, ts map[string]*Tensor) error {
	block, fp8, err := parseHFQuant(cfgPath, cfg)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(ts))
	for _, n := range names {
		t := ts[n]
		if w, isScale := strings.CutSuffix(n, "_scale_inv"); isScale {
			if wt := ts[w]; wt == nil || wt.DType != F8E4M3 {
				return fmt.Errorf("%s: scales without an F8_E4M3 weight %s", t.Where(), w)
			}
			continue
		}
		if t.DType != F8E4M3 {
			continue
		}
		if !fp8 {
			return fmt.Errorf("%s: dtype F8_E4M3, but %s has no quantization_config {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}", t.Where(), cfgPath)
		}
		s := ts[ScaleName(QuantFP8, n)]
		if s == nil {
			return fmt.Errorf("%s: F8_E4M3 weight without its scales %s", t.Where(), ScaleName(QuantFP8, n))
		}
		t.Quant = &Quant{Scheme: QuantFP8, Block: block, Scale: s}
		if err := checkQuant(t); err != nil {
			return err
		}
	}
	for _, n := range names {
		if t := ts[n]; t != nil && t.Quant != nil {
			delete(ts, t.Quant.Scale.Name)
		}
	}
	return nil
}
