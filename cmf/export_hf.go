package cmf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/internal/atomicfile"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// File names ExportHF writes besides the weights.
const (
	HFTokenizerName       = "tokenizer.json"        // HF tokenizers file
	HFTokenizerConfigName = "tokenizer_config.json" // transformers tokenizer settings
)

// DefaultHFShardBytes is the default largest shard ExportHF writes: 5 GB (5·10⁹ bytes of
// tensor data, transformers' classic max_shard_size "5GB"). A model whose tensor data
// fit in it is written as one model.safetensors.
const DefaultHFShardBytes int64 = 5_000_000_000

// DefaultMaxPositionEmbeddings is the max_position_embeddings ExportHF writes when neither
// the options nor a base config.json give one (the released Qwen3.5 text configs' value).
const DefaultMaxPositionEmbeddings = 262144

// ExportHFOptions tune ExportHFWith. The zero value is valid.
type ExportHFOptions struct {
	// TokenizerConfigJSON, when not empty, is written as tokenizer_config.json; it must be
	// a JSON object.
	TokenizerConfigJSON []byte
	// BaseConfigJSON, when not empty, is the config.json of the checkpoint the student
	// was made from (flat or with a nested text_config). Its text-config fields that
	// arch.Config does not hold (max_position_embeddings, bos_token_id, pad_token_id,
	// initializer_range, …) are kept in the exported config.json; every field arch.Config does
	// hold is written from the model. It must parse (arch.ParseConfig) to the model's
	// architecture, else ExportHFWith fails naming the first differing field.
	// quantization_config, auto_map, architectures, dtype/torch_dtype and
	// transformers_version are never copied.
	BaseConfigJSON []byte
	// MaxShardBytes is the most tensor data per safetensors file (0: DefaultHFShardBytes).
	// A single tensor larger than that gets a shard of its own.
	MaxShardBytes int64
	// MaxPositionEmbeddings overrides max_position_embeddings in config.json (0: the base
	// config's value, else DefaultMaxPositionEmbeddings).
	MaxPositionEmbeddings int
}

// ExportHF is ExportHFWith with the default options: writes m into directory dir as a
// dense HuggingFace Qwen3.5 text checkpoint with tokenizerJSON as tokenizer.json.
func ExportHF(dir string, m *Model, tokenizerJSON []byte) error {
	return ExportHFWith(dir, m, tokenizerJSON, ExportHFOptions{})
}

// ExportHFWith writes m (typically a distilled BLR student) into directory dir (created
// if missing) as a dense HuggingFace checkpoint that transformers' Qwen3_5ForCausalLM
// (model_type qwen3_5_text) and cmf.Open load:
//
//   - every BLR tensor [m, n] expanded to the dense Ŵ = Σ_p diag(h_p)·U_p·diag(ℓ_p)·V_p·diag(g_p)
//     (computed in float64 from the stored float16 scales, exactly as BLRWeight.Dense) and
//     rounded to bf16 (nearest even), row-major [m, n] under the same HF name;
//   - every other tensor copied byte for byte in its own dtype (the bf16 embedding, the
//     f32 A_log and gated-norm gains of a Qwen3.5 checkpoint stay as they are);
//   - model.safetensors, or, when the tensor data exceed opt.MaxShardBytes, shards
//     model-0000i-of-0000N.safetensors (filled in the order below) plus
//     model.safetensors.index.json {"metadata": {"total_size": bytes}, "weight_map": {…}}.
//     Each file has __metadata__ {"format": "pt"} and its tensors ordered by element size
//     (largest first) then name, so every tensor starts aligned to its element size;
//   - config.json in HF's flat qwen3_5_text layout (keys sorted, as transformers writes
//     them): the arch.Config fields with layer_types, rope_parameters {rope_theta,
//     partial_rotary_factor, rope_type "default"} (partial_rotary_factor also at the top
//     level), tie_word_embeddings, eos_token_id, plus the fields transformers'
//     Qwen3_5TextConfig serialises that arch.Config lacks (hidden_act "silu",
//     max_position_embeddings, initializer_range 0.02, attention_bias false,
//     attention_dropout 0, use_cache true, bos/pad_token_id null unless the base config
//     gives them), "architectures": ["Qwen3_5ForCausalLM"] and "dtype": "bfloat16";
//   - tokenizer.json (tokenizerJSON, required, a JSON object) and, when given,
//     tokenizer_config.json.
//
// Checked with transformers 5.17 (TestExportHFLoadsInTransformers, NVG_TRANSFORMERS_CHECK=1):
// AutoModelForCausalLM loads an export of the tiny teacher's BLR student as
// Qwen3_5ForCausalLM with no missing or unexpected weights, and its float32 forward
// matches the host forward of the export to 1.5e-5 in log-probabilities.
//
// Every file is written atomically (temporary file, fsync, rename, directory fsync); the set
// of files as a whole is not: the weights go first, then the index, config and tokenizer
// files, and last the weight files of an earlier export that the new layout does not use
// (stale shards, a model.safetensors replaced by shards or an index replaced by one file)
// are removed. Data of file-backed tensors are streamed, and BLR tensors are expanded a
// block of rows at a time, so memory stays near the largest BLR factor pair, not the model.
//
// Errors: m fails Model.Validate; tokenizerJSON empty or not a JSON object; a bad option
// (negative sizes, TokenizerConfigJSON not a JSON object, BaseConfigJSON unparsable or
// of another architecture); dir holds a CMF model (model.cmf or model.cmf.index.json,
// which would make the directory ambiguous to Open); a quantized tensor (export
// Model.Dequantized instead); a tensor that cannot be read or decoded (named); any I/O error
// (naming the file).
func ExportHFWith(dir string, m *Model, tokenizerJSON []byte, opt ExportHFOptions) error {
	fail := func(err error) error { return fmt.Errorf("export %s: %w", dir, err) }
	if m == nil {
		return fail(errors.New("nil model"))
	}
	if err := m.Validate(); err != nil {
		return fail(err)
	}
	if err := checkJSONObject(HFTokenizerName, tokenizerJSON, true); err != nil {
		return fail(err)
	}
	if err := checkJSONObject(HFTokenizerConfigName, opt.TokenizerConfigJSON, false); err != nil {
		return fail(err)
	}
	if opt.MaxShardBytes < 0 {
		return fail(fmt.Errorf("MaxShardBytes must be ≥ 0, got %d", opt.MaxShardBytes))
	}
	if opt.MaxShardBytes == 0 {
		opt.MaxShardBytes = DefaultHFShardBytes
	}
	if opt.MaxPositionEmbeddings < 0 {
		return fail(fmt.Errorf("MaxPositionEmbeddings must be ≥ 0, got %d", opt.MaxPositionEmbeddings))
	}
	cfgJSON, err := HFConfigJSON(m.Config, opt.BaseConfigJSON, opt.MaxPositionEmbeddings)
	if err != nil {
		return fail(err)
	}
	for _, n := range []string{CMFFileName, CMFIndexName} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return fail(fmt.Errorf("directory holds a CMF model (%s); export into another directory", n))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}

	// Plan: entries ordered by element size (largest first) then name, cut into shards.
	ents := make([]hfEntry, 0, len(m.Tensors))
	for _, n := range m.Names() {
		t := m.Tensors[n]
		if t.Quant != nil {
			return fail(fmt.Errorf("tensor %s is %s-quantized: export the model's dense view (Model.Dequantized)", n, t.Quant.Scheme))
		}
		e := hfEntry{t: t, dtype: t.DType, shape: t.Shape}
		if t.DType == BLR {
			e.dtype = BF16
		}
		ne, err := numElements(e.shape)
		if err != nil {
			return fail(fmt.Errorf("tensor %s: %w", n, err))
		}
		e.size = ne * int64(e.dtype.Size())
		if t.DType != BLR && e.size != t.size {
			return fail(fmt.Errorf("tensor %s: %d bytes for shape %v of dtype %s", n, t.size, t.Shape, t.DType))
		}
		ents = append(ents, e)
	}
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].dtype.Size() > ents[j].dtype.Size() })
	shards, total := shardBySize(ents, func(e hfEntry) int64 { return e.size }, opt.MaxShardBytes)
	if len(shards) > 99999 {
		return fail(fmt.Errorf("%d shards exceed the 5-digit shard numbering; raise MaxShardBytes", len(shards)))
	}

	keep := map[string]bool{}
	wm := map[string]string{}
	for i, sh := range shards {
		name := HFWeightsName
		if len(shards) > 1 {
			name = HFShardName(i+1, len(shards))
		}
		keep[name] = true
		if err := writeHFSafetensors(filepath.Join(dir, name), sh); err != nil {
			return fail(err)
		}
		for _, e := range sh {
			wm[e.t.Name] = name
		}
	}
	writeSmall := func(name string, data []byte) error {
		return atomicfile.WriteBytes(filepath.Join(dir, name), data)
	}
	if len(shards) > 1 {
		ix := ShardIndex{Metadata: map[string]any{"total_size": total}, WeightMap: wm}
		data, err := json.MarshalIndent(ix, "", "  ")
		if err != nil {
			return fail(err)
		}
		if err := writeSmall(HFIndexName, append(data, '\n')); err != nil {
			return fail(err)
		}
		keep[HFIndexName] = true
	}
	if err := writeSmall(HFConfigName, cfgJSON); err != nil {
		return fail(err)
	}
	if err := writeSmall(HFTokenizerName, tokenizerJSON); err != nil {
		return fail(err)
	}
	if len(opt.TokenizerConfigJSON) > 0 {
		if err := writeSmall(HFTokenizerConfigName, opt.TokenizerConfigJSON); err != nil {
			return fail(err)
		}
	}
	// Remove the weight files of an earlier export that this layout does not use.
	des, err := os.ReadDir(dir)
	if err != nil {
		return fail(fmt.Errorf("listing old weight files: %w", err))
	}
	for _, de := range des {
		n := de.Name()
		if (n == HFWeightsName || n == HFIndexName || hfShardNameRE.MatchString(n)) && !keep[n] {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fail(fmt.Errorf("removing stale %s: %w", n, err))
			}
		}
	}
	return atomicfile.SyncDir(dir)
}

var hfShardNameRE = regexp.MustCompile(`^model-[0-9]{5}-of-[0-9]{5}\.safetensors$`)

// HFShardName is the file name of HF safetensors shard i (1-based) of n:
// model-0000i-of-0000N.safetensors.
func HFShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n) }

// hfEntry is one tensor of an export: its source and its stored dtype, shape and size.
type hfEntry struct {
	t     *Tensor
	dtype DType
	shape []int
	size  int64
}

func checkJSONObject(name string, data []byte, required bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if required {
			return fmt.Errorf("%s is empty", name)
		}
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("%s is not a JSON object: %w", name, err)
	}
	if obj == nil {
		return fmt.Errorf("%s is not a JSON object: null", name)
	}
	return nil
}

// writeHFSafetensors writes one plain safetensors file of the entries (in order),
// expanding BLR tensors to bf16.
func writeHFSafetensors(path string, ents []hfEntry) error {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, e := range ents {
		shape := make([]int64, len(e.shape))
		for i, d := range e.shape {
			shape[i] = int64(d)
		}
		header[e.t.Name] = headerEntry{DType: string(e.dtype), Shape: shape, DataOffsets: []int64{off, off + e.size}}
		off += e.size
	}
	h, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	h = padHeader(h)
	return atomicfile.Write(path, func(w io.Writer) error {
		if err := writeHeader(w, h); err != nil {
			return err
		}
		for _, e := range ents {
			if e.t.DType != BLR {
				if _, err := e.t.WriteTo(w); err != nil {
					return err
				}
				continue
			}
			bw, err := BLRFromTensor(e.t)
			if err != nil {
				return err
			}
			if err := writeDenseBF16(w, bw); err != nil {
				return fmt.Errorf("tensor %s: %w", e.t.Name, err)
			}
		}
		return nil
	})
}

// denseBlockRows is the number of rows of Ŵ expanded at a time by writeDenseBF16.
const denseBlockRows = 256

// writeDenseBF16 writes Ŵ = Σ_p diag(h)·U·diag(ℓ)·V·diag(g) row-major as little-endian bf16,
// denseBlockRows rows at a time. Each block is the same float64 GEMM as BLRWeight.Dense
// restricted to those rows (the test checks bf16(Dense()) bit for bit).
func writeDenseBF16(w io.Writer, bw *BLRWeight) error {
	if err := bw.Validate(); err != nil {
		return err
	}
	type factors struct{ left, right []float64 }
	fs := make([]factors, len(bw.Paths))
	for p := range bw.Paths {
		fs[p].left, fs[p].right = bw.PathFactors(p)
	}
	M, N, R := bw.M, bw.N, bw.Rank
	block := make([]float64, min(denseBlockRows, M)*N)
	buf := make([]byte, len(block)*2)
	for r0 := 0; r0 < M; r0 += denseBlockRows {
		rows := min(denseBlockRows, M-r0)
		out := block[:rows*N]
		clear(out)
		c := blas64.General{Rows: rows, Cols: N, Stride: N, Data: out}
		for _, f := range fs {
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
				blas64.General{Rows: rows, Cols: R, Stride: R, Data: f.left[r0*R : (r0+rows)*R]},
				blas64.General{Rows: R, Cols: N, Stride: N, Data: f.right}, 1, c)
		}
		b := buf[:2*len(out)]
		for i, x := range out {
			v := BF16Bits(float32(x))
			b[2*i], b[2*i+1] = byte(v), byte(v>>8)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// HFConfigJSON returns the config.json ExportHFWith writes for architecture c (see there):
// indented JSON with sorted keys in HF's flat qwen3_5_text layout, ending in a newline.
// base, when not empty, is the source checkpoint's config.json whose extra text-config
// fields are kept (see ExportHFOptions.BaseConfigJSON); maxPos overrides
// max_position_embeddings when positive. Errors: c invalid (arch.Config.Validate), base
// unparsable or of another architecture (naming the first differing field).
func HFConfigJSON(c arch.Config, base []byte, maxPos int) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if len(bytes.TrimSpace(base)) > 0 {
		bc, err := arch.ParseConfig(base)
		if err != nil {
			return nil, fmt.Errorf("base config.json: %w", err)
		}
		if f := configDiff(bc, c); f != "" {
			return nil, fmt.Errorf("base config.json describes another architecture: %s differs from the model's", f)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(base, &top); err != nil {
			return nil, fmt.Errorf("base config.json: %w", err)
		}
		fields := top
		if tc, ok := top["text_config"]; ok && string(tc) != "null" {
			fields = nil
			if err := json.Unmarshal(tc, &fields); err != nil {
				return nil, fmt.Errorf("base config.json: text_config: %w", err)
			}
			// A vision-language checkpoint's token ids may sit at the top level only.
			for _, k := range []string{"bos_token_id", "pad_token_id"} {
				if _, ok := fields[k]; !ok {
					if v, ok := top[k]; ok {
						fields[k] = v
					}
				}
			}
		}
		for k, v := range fields {
			switch k {
			case "quantization_config", "auto_map", "architectures", "dtype", "torch_dtype",
				"transformers_version", "text_config", "vision_config":
				continue
			}
			out[k] = v
		}
	}
	setDefault := func(k string, v any) {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	setDefault("hidden_act", "silu")
	setDefault("initializer_range", 0.02)
	setDefault("attention_bias", false)
	setDefault("attention_dropout", 0.0)
	setDefault("use_cache", true)
	setDefault("bos_token_id", nil)
	setDefault("pad_token_id", nil)
	setDefault("max_position_embeddings", DefaultMaxPositionEmbeddings)
	if maxPos > 0 {
		out["max_position_embeddings"] = maxPos
	}
	delete(out, "full_attention_interval")
	if c.FullAttentionInterval > 0 {
		out["full_attention_interval"] = c.FullAttentionInterval
	}
	// Everything arch.Config holds comes from the model.
	out["architectures"] = []string{"Qwen3_5ForCausalLM"}
	out["dtype"] = "bfloat16"
	out["model_type"] = "qwen3_5_text"
	out["vocab_size"] = c.VocabSize
	out["hidden_size"] = c.HiddenSize
	out["num_hidden_layers"] = c.NumHiddenLayers
	out["intermediate_size"] = c.IntermediateSize
	out["num_attention_heads"] = c.NumAttentionHeads
	out["num_key_value_heads"] = c.NumKeyValueHeads
	out["head_dim"] = c.HeadDim
	out["linear_num_key_heads"] = c.LinearNumKeyHeads
	out["linear_num_value_heads"] = c.LinearNumValueHeads
	out["linear_key_head_dim"] = c.LinearKeyHeadDim
	out["linear_value_head_dim"] = c.LinearValueHeadDim
	out["linear_conv_kernel_dim"] = c.LinearConvKernelDim
	out["layer_types"] = c.LayerTypes
	out["rms_norm_eps"] = c.RMSNormEps
	out["partial_rotary_factor"] = c.PartialRotaryFactor
	out["rope_parameters"] = map[string]any{
		"rope_type":             "default",
		"rope_theta":            c.RopeTheta,
		"partial_rotary_factor": c.PartialRotaryFactor,
	}
	delete(out, "rope_theta") // legacy top-level spelling; rope_parameters holds it
	delete(out, "rope_scaling")
	out["tie_word_embeddings"] = c.TieWordEmbeddings
	out["eos_token_id"] = c.EOSTokenID
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// configDiff names the first field (by its JSON name) in which a and b differ, ignoring
// full_attention_interval and eos_token_id (the layer_types and the model's own token ids
// decide those), or returns "".
func configDiff(a, b arch.Config) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	ty := va.Type()
	for i := range ty.NumField() {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		if name == "full_attention_interval" || name == "eos_token_id" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return name
		}
	}
	return ""
}
