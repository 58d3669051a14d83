package cmf_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// fp8FixtureDir holds a small HF FP8 checkpoint: two decoder layers of the tiny teacher
// (its layers 2 and 3, a GatedDeltaNet and an attention layer) with the first 1024 rows of
// its vocabulary, every projection quantized to block-wise FP8 by cmf.QuantizeFP8 (the rule
// of transformers' Fp8Quantize, the public checkpoints'), written as HF lays such a
// checkpoint out: config.json with quantization_config, model.safetensors with F8_E4M3
// weights and F32 weight_scale_inv per 128×128 block (2.2 MB). TestFP8Fixture rebuilds it from the
// embedded teacher and compares; go test ./cmf -run TestFP8Fixture -update-fp8-fixture
// rewrites it.
const fp8FixtureDir = "../testdata/fixtures/tiny-fp8"

var updateFP8Fixture = flag.Bool("update-fp8-fixture", false, "rewrite "+fp8FixtureDir+" from the embedded tiny teacher")

// fp8FixtureFiles builds the fixture's files from the embedded tiny teacher.
func fp8FixtureFiles(t *testing.T) map[string][]byte {
	t.Helper()
	src, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	const vocab, first = 1024, 2
	var cfg map[string]any
	if err := json.Unmarshal(ok(fs.ReadFile(tinyteacher.FS(), "config.json")).T(t), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["num_hidden_layers"] = 2
	cfg["layer_types"] = cfg["layer_types"].([]any)[first : first+2]
	cfg["vocab_size"] = vocab
	cfg["quantization_config"] = map[string]any{"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": []int{128, 128}}
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// The two layers, renumbered 0 and 1, and the embedding's first rows, as a dense model.
	sub := tinytest.SubModel(t, src, []int{first, first + 1})
	sub.Config.VocabSize = vocab
	emb := sub.Tensors["model.embed_tokens.weight"]
	b := ok(emb.Bytes()).T(t)
	sub.Tensors[emb.Name] = ok(cmf.NewTensor(emb.Name, emb.DType, []int{vocab, emb.Shape[1]}, b[:vocab*emb.Shape[1]*emb.DType.Size()])).T(t)
	q, err := cmf.QuantizeModel(sub, cmf.QuantFP8)
	if err != nil {
		t.Fatal(err)
	}
	var ts []*cmf.Tensor
	for _, n := range q.Names() {
		tt := q.Tensors[n]
		ts = append(ts, tt)
		if tt.Quant != nil {
			ts = append(ts, tt.Quant.Scale)
		}
	}
	var st bytes.Buffer
	if err := cmf.EncodeSafetensors(&st, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"config.json": append(cfgJSON, '\n'), "model.safetensors": st.Bytes()}
}

// TestFP8Fixture: the fixture is what the quantizer makes of the embedded teacher today,
// it opens as an FP8 model (every projection F8_E4M3 with its scales, in_proj_a/b's 2 rows
// a ragged block), one of its blocks matches a quantization worked out independently
// (amax, 448/amax and the nearest e4m3 value of each weight by search over all codes), and
// every weight is within e4m3's half step (2⁻⁴ relative, 2⁻¹⁰·scale absolute) of the bf16
// teacher's; written as a .cmf, it reads back the same.
func TestFP8Fixture(t *testing.T) {
	files := fp8FixtureFiles(t)
	if *updateFP8Fixture {
		if err := os.MkdirAll(fp8FixtureDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for n, b := range files {
			if err := os.WriteFile(filepath.Join(fp8FixtureDir, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for n, b := range files {
		got, err := os.ReadFile(filepath.Join(fp8FixtureDir, n))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s differs from what the quantizer makes now (%v): rerun with -update-fp8-fixture after checking why", n, err)
		}
	}
	m, err := cmf.Open(fp8FixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	src, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	sum := m.Quantization()
	if len(sum) != 1 || sum[0].Scheme != cmf.QuantFP8 || sum[0].Block != [2]int{128, 128} || sum[0].Tensors != 5+4+6 {
		t.Fatalf("Quantization %+v", sum)
	}
	a := m.Tensors["model.layers.0.linear_attn.in_proj_a.weight"]
	if a.Quant == nil || !slices.Equal(a.Quant.Scale.Shape, []int{1, 2}) {
		t.Fatalf("in_proj_a: %+v", a.Quant)
	}
	// One block by hand: rows 128…255, columns 256…383 of layer 0's down_proj.
	const name = "model.layers.0.mlp.down_proj.weight"
	q, w := m.Tensors[name], src.Tensors["model.layers.2.mlp.down_proj.weight"]
	wv, codes, inv := ok(w.Float64()).T(t), ok(q.QuantCodes()).T(t), ok(q.QuantScales()).T(t)
	in := w.Shape[1]
	var amax float32
	for i := 128; i < 256; i++ {
		for j := 256; j < 384; j++ {
			amax = max(amax, float32(math.Abs(wv[i*in+j])))
		}
	}
	s := float32(448) / amax
	if inv[1*q.Quant.Scale.Shape[1]+2] != 1/s {
		t.Fatalf("block (1, 2): weight_scale_inv %g, want 1/(448/%g) = %g", inv[1*q.Quant.Scale.Shape[1]+2], amax, 1/s)
	}
	for i := 128; i < 256; i++ {
		for j := 256; j < 384; j++ {
			x := float64(float32(wv[i*in+j]) * s)
			best, bestC := math.Inf(1), byte(0)
			for c := 0; c < 256; c++ {
				v := float64(cmf.FP8E4M3Value(byte(c)))
				if d := math.Abs(v - x); !math.IsNaN(v) && math.Signbit(v) == math.Signbit(x) && (d < best || d == best && c&1 == 0) {
					best, bestC = d, byte(c)
				}
			}
			if codes[i*in+j] != bestC {
				t.Fatalf("[%d, %d]: %g·s = %g → code %#02x, nearest e4m3 is %#02x", i, j, wv[i*in+j], x, codes[i*in+j], bestC)
			}
		}
	}
	// Stored in a .cmf as it is: the same codes, scales and blocks come back.
	path := filepath.Join(t.TempDir(), "fp8.cmf")
	if err := cmf.WriteCMF(path, m); err != nil {
		t.Fatal(err)
	}
	back := ok(cmf.Open(path)).T(t)
	defer back.Close()
	if fmt.Sprint(back.Quantization()) != fmt.Sprint(sum) {
		t.Fatalf("the .cmf holds %+v, the checkpoint %+v", back.Quantization(), sum)
	}
	for _, n := range m.Names() {
		qt, bt := m.Tensors[n], back.Tensors[n]
		if !bytes.Equal(ok(qt.Bytes()).T(t), ok(bt.Bytes()).T(t)) || qt.Quant != nil && !bytes.Equal(ok(qt.Quant.Scale.Bytes()).T(t), ok(bt.Quant.Scale.Bytes()).T(t)) {
			t.Fatalf("%s: the .cmf's bytes differ", n)
		}
	}
	for _, n := range m.Names() {
		qt := m.Tensors[n]
		if qt.Quant == nil {
			continue
		}
		ref := src.Tensors[strings.Replace(strings.Replace(n, "layers.1.", "layers.3.", 1), "layers.0.", "layers.2.", 1)]
		rv, qv := ok(ref.Float64()).T(t), ok(qt.Float64()).T(t)
		sc, s := qt.Quant.Scale.Shape[1], ok(qt.QuantScales()).T(t)
		for e := range rv {
			bound := math.Abs(rv[e])/16 + float64(s[(e/qt.Shape[1]/128)*sc+e%qt.Shape[1]/128])*0x1p-10
			if d := math.Abs(qv[e] - rv[e]); d > bound*(1+1e-6) {
				t.Fatalf("%s[%d]: %g, teacher %g (|err| %g > %g)", n, e, qv[e], rv[e], d, bound)
			}
		}
	}
}

// ok carries a (value, error) pair so that ok(f(…)).T(t) fails the test on the error.
type okResult[T any] struct {
	v   T
	err error
}

func ok[T any](v T, err error) okResult[T] { return okResult[T]{v, err} }

func (r okResult[T]) T(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}
