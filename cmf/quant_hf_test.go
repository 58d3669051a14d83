package cmf

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/testkit/jsontest"
)

// hfFP8 describes a synthetic HF FP8 checkpoint built from a quantized model.
type hfFP8 struct {
	quantConfig any                            // quantization_config (nil: none)
	scaleDType  DType                          // weight_scale_inv's dtype (F32 or BF16)
	vl          bool                           // model.language_model.* names, two shards, scales in the other shard
	edit        func(files map[string]*Tensor) // changes the tensors before writing (by HF name)
}

// files returns the checkpoint's files: config.json and model.safetensors, or (vl) two
// shards and their index, each weight's weight_scale_inv in the other shard than its codes.
func (h hfFP8) files(t *testing.T, q *Model) map[string][]byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(q.Config.JSON(), &cfg); err != nil {
		t.Fatal(err)
	}
	if h.quantConfig != nil {
		cfg["quantization_config"] = h.quantConfig
	}
	ts := map[string]*Tensor{}
	name := func(n string) string {
		if h.vl && strings.HasPrefix(n, "model.") {
			return "model.language_model." + strings.TrimPrefix(n, "model.")
		}
		return n
	}
	for _, n := range q.Names() {
		tt := q.Tensors[n]
		ts[name(n)] = tt
		if tt.Quant != nil {
			s := tt.Quant.Scale
			if h.scaleDType != "" && h.scaleDType != s.DType {
				v, err := s.Float64()
				if err != nil {
					t.Fatal(err)
				}
				if s, err = NewFloatTensor(s.Name, h.scaleDType, s.Shape, v); err != nil {
					t.Fatal(err)
				}
			}
			ts[name(ScaleName(QuantFP8, n))] = s
		}
	}
	if h.edit != nil {
		h.edit(ts)
	}
	if !h.vl {
		var es []stEntry
		for _, n := range sortedKeys(ts) {
			es = append(es, stEntry{n, ts[n]})
		}
		return map[string][]byte{"config.json": jsontest.Marshal(t, cfg), HFWeightsName: safetensorsBytes(t, map[string]string{"format": "pt"}, es)}
	}
	var sh [2][]stEntry
	wm := map[string]string{}
	shard := [2]string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	for _, n := range sortedKeys(ts) {
		i := 0
		if strings.HasSuffix(n, "_scale_inv") {
			i = 1
		}
		sh[i] = append(sh[i], stEntry{n, ts[n]})
		wm[n] = shard[i]
	}
	return map[string][]byte{
		"config.json": jsontest.Marshal(t, map[string]any{"model_type": "qwen3_5", "text_config": cfg, "quantization_config": cfg["quantization_config"]}),
		HFIndexName:   jsontest.Marshal(t, map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": wm}),
		shard[0]:      safetensorsBytes(t, map[string]string{"format": "pt"}, sh[0]),
		shard[1]:      safetensorsBytes(t, map[string]string{"format": "pt"}, sh[1]),
	}
}

func (h hfFP8) open(t *testing.T, q *Model) (*Model, error) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, h.files(t, q))
	m, err := Open(dir)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

var fp8Config = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{8, 8}}

// TestOpenHFFP8 reads flat and sharded (VL-named, each scale in the other shard) HF FP8
// checkpoints: every F8_E4M3 weight comes with its weight_scale_inv and the config's block,
// the scale tensors leave the tensor list, and the values are code × scale of the stored
// scales (F32 or BF16).
func TestOpenHFFP8(t *testing.T) {
	q := quantSmall(t, QuantFP8)
	for _, h := range []hfFP8{{quantConfig: fp8Config}, {quantConfig: fp8Config, vl: true}, {quantConfig: fp8Config, scaleDType: BF16, vl: true}} {
		t.Run(string(h.scaleDType)+map[bool]string{true: "vl"}[h.vl], func(t *testing.T) {
			got, err := h.open(t, q)
			if err != nil {
				t.Fatal(err)
			}
			if h.scaleDType == "" {
				sameQuant(t, q, got)
				return
			}
			sameTensors(t, q, got)
			for n, tt := range got.Tensors {
				if q.Tensors[n].Quant == nil {
					continue
				}
				if tt.Quant == nil || tt.Quant.Scale.DType != BF16 || tt.Quant.Block != [2]int{8, 8} {
					t.Fatalf("%s: %+v", n, tt.Quant)
				}
				codes, _ := tt.QuantCodes()
				s, err := tt.QuantScales()
				if err != nil {
					t.Fatal(err)
				}
				v, err := tt.Float64()
				if err != nil {
					t.Fatal(err)
				}
				in, sc := tt.Shape[1], tt.Quant.Scale.Shape[1]
				for e, c := range codes {
					if want := float64(FP8E4M3Value(c)) * float64(s[(e/in/8)*sc+e%in/8]); v[e] != want {
						t.Fatalf("%s[%d] = %g, want %g", n, e, v[e], want)
					}
				}
			}
		})
	}
}

// TestOpenHFFP8Errors: what the HF reader refuses, each with a message naming the file or
// tensor and the problem.
func TestOpenHFFP8Errors(t *testing.T) {
	q := quantSmall(t, QuantFP8)
	cfgWith := func(k string, v any) map[string]any {
		c := maps.Clone(fp8Config)
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	const w = "model.layers.1.mlp.down_proj.weight"
	for _, c := range []struct {
		name string
		h    hfFP8
		want string
	}{
		{"awq", hfFP8{quantConfig: map[string]any{"quant_method": "awq", "bits": 4}}, `quant_method "awq" is not supported; nvg reads f32, f16 and bf16 checkpoints and block-wise FP8`},
		{"no method", hfFP8{quantConfig: cfgWith("quant_method", nil)}, "quantization_config: no quant_method"},
		{"e5m2", hfFP8{quantConfig: cfgWith("fmt", "e5m2")}, `fmt "e5m2" is not supported`},
		{"static", hfFP8{quantConfig: cfgWith("activation_scheme", "static")}, `activation_scheme "static"`},
		{"per-tensor", hfFP8{quantConfig: cfgWith("weight_block_size", nil)}, "no weight_block_size"},
		{"bad block", hfFP8{quantConfig: cfgWith("weight_block_size", []int{8})}, "weight_block_size [8], want [rows, columns]"},
		{"no config", hfFP8{}, "tensor model.layers.0.linear_attn.in_proj_a.weight: dtype F8_E4M3, but"},
		{"block mismatch", hfFP8{quantConfig: cfgWith("weight_block_size", []int{128, 128})}, "needs [1 1]"},
		{"no scales", hfFP8{quantConfig: fp8Config, edit: func(ts map[string]*Tensor) { delete(ts, ScaleName(QuantFP8, w)) }},
			"tensor " + w + ": F8_E4M3 weight without its scales " + w + "_scale_inv"},
		{"orphan scales", hfFP8{quantConfig: fp8Config, edit: func(ts map[string]*Tensor) {
			ts["model.norm.weight_scale_inv"] = ts[ScaleName(QuantFP8, w)]
		}}, "scales without an F8_E4M3 weight model.norm.weight"},
		{"scale dtype", hfFP8{quantConfig: fp8Config, scaleDType: F64}, "fp8 scales of dtype F64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.h.open(t, q)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestCMFQuantHeaderErrors: a CMF file whose cmf.tensors entry of a quantized tensor
// disagrees with the file is refused, naming the file and tensor.
func TestCMFQuantHeaderErrors(t *testing.T) {
	q := quantSmall(t, QuantQ8)
	path := filepath.Join(t.TempDir(), "q.cmf")
	if err := WriteCMF(path, q); err != nil {
		t.Fatal(err)
	}
	raw := mustRead(t, path)
	const w = "model.layers.0.mlp.gate_proj.weight"
	editMeta := func(f func(e map[string]any)) func(h map[string]any) {
		return func(h map[string]any) {
			meta := h["__metadata__"].(map[string]any)
			var ct map[string]map[string]any
			if err := json.Unmarshal([]byte(meta[MetaCMFTensors].(string)), &ct); err != nil {
				t.Fatal(err)
			}
			f(ct[w])
			meta[MetaCMFTensors] = string(jsontest.Marshal(t, ct))
		}
	}
	for _, c := range []struct {
		name string
		edit func(h map[string]any)
		want string
	}{
		{"block", editMeta(func(e map[string]any) { e["block"] = []int{1, 8} }), "tensor " + w + "_scale: scales of shape [24 1], but weight " + w + " [24 16] in blocks of [1 8] needs [24 2]"},
		{"scale name", editMeta(func(e map[string]any) { e["scale"] = "nope" }), "tensor " + w + ": its scale tensor nope is not in the model"},
		{"no scale", editMeta(func(e map[string]any) { delete(e, "scale") }), "tensor " + w + ": cmf.tensors entry names no scale tensor"},
		{"shape", editMeta(func(e map[string]any) { e["shape"] = []int{16, 24} }), "tensor " + w + ": cmf.tensors shape [16 24] disagrees with its stored shape [24 16]"},
		{"scheme", editMeta(func(e map[string]any) { e["dtype"] = "q4" }), `tensor ` + w + `: cmf.tensors dtype "q4", want "blr", "fp8" or "q8"`},
		{"dtype", func(h map[string]any) { entry(h, w)["dtype"] = "U8" }, "tensor " + w + ": a q8 weight stores I8 codes, found U8"},
		{"shared scale", editMeta(func(e map[string]any) { e["scale"] = "model.layers.0.mlp.up_proj.weight_scale" }), "model.layers.0.mlp.up_proj.weight_scale"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.cmf")
			writeFiles(t, filepath.Dir(bad), map[string][]byte{"bad.cmf": rewriteHeader(t, raw, c.edit)})
			_, err := Open(bad)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.cmf") {
				t.Fatalf("error %v, want %q and the file", err, c.want)
			}
		})
	}
}
