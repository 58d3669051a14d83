package cmf

import (
	"bytes"
	"encoding/binary"
	"github.com/nvg-project/nvg/arch"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// smallModel is a complete, valid model of a few KB: 2 layers (GatedDeltaNet, attention),
// hidden 16, vocab 32, untied head, with BF16, F32, F16 and one BLR tensor (arbitrary
// payload) and deterministic random values.
func smallModel(t testing.TB) *Model {
	t.Helper()
	cfg := arch.Config{ModelType: "qwen3_5_text", VocabSize: 32, HiddenSize: 16, NumHiddenLayers: 2, IntermediateSize: 24,
		NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 8, LinearNumKeyHeads: 1, LinearNumValueHeads: 2,
		LinearKeyHeadDim: 8, LinearValueHeadDim: 8, LinearConvKernelDim: 4, LayerTypes: []string{arch.LinearAttention, arch.FullAttention},
		RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25, EOSTokenID: 3}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewModel(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := cfg.Shapes()
	for _, n := range sortedKeys(shapes) {
		shape := shapes[n]
		var tt *Tensor
		var err error
		switch {
		case n == "model.layers.0.mlp.up_proj.weight":
			payload := make([]byte, 37)
			for i := range payload {
				payload[i] = byte(rng.IntN(256))
			}
			tt, err = NewTensor(n, BLR, shape, payload)
		default:
			d := BF16
			if strings.HasSuffix(n, "A_log") || strings.HasSuffix(n, "linear_attn.norm.weight") {
				d = F32
			} else if strings.Contains(n, "self_attn.o_proj") {
				d = F16
			}
			cnt, _ := numElements(shape)
			v := make([]float64, cnt)
			for i := range v {
				v[i] = rng.NormFloat64() * 0.1
			}
			tt, err = NewFloatTensor(n, d, shape, v)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Set(tt); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSmallModelRoundTrip(t *testing.T) {
	m := smallModel(t)
	got := roundTrip(t, m, filepath.Join(t.TempDir(), "small.cmf"))
	p := got.ParamCounts()
	if p.Head != 32*16 || p.Bytes[BLR] != 37 || p.Bytes[F16] != 2*16*16 {
		t.Fatalf("counts %+v", p)
	}
}

// fuzzSeeds builds the seed corpus of each fuzzer from real headers: the tiny teacher's,
// a CMF file of smallModel, the tiny teacher's config and a VL layout, HF and CMF indexes.
func fuzzSeeds(t *testing.T) map[string]map[string][]byte {
	t.Helper()
	teacher, err := os.ReadFile(filepath.Join(tinyDir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(teacher)
	dir := t.TempDir()
	small := smallModel(t)
	if err := WriteCMF(filepath.Join(dir, "small.cmf"), small); err != nil {
		t.Fatal(err)
	}
	smallCMF, _ := os.ReadFile(filepath.Join(dir, "small.cmf"))
	if err := WriteCMFSharded(filepath.Join(dir, "sh"), small, 1024); err != nil {
		t.Fatal(err)
	}
	cmfIndex, _ := os.ReadFile(filepath.Join(dir, "sh", CMFIndexName))
	var plain []stEntry
	for _, n := range small.Names() {
		if small.Tensors[n].DType != BLR {
			plain = append(plain, stEntry{n, small.Tensors[n]})
		}
	}
	smallST := safetensorsBytes(t, map[string]string{"format": "pt"}, plain)
	cfg, _ := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	src := openTiny(t)
	vl := vlCheckpoint(t, src)
	return map[string]map[string][]byte{
		"FuzzParseSafetensorsHeader": {
			"tiny-teacher-header-only": teacher[:8+hlen],
			"small-cmf":                smallCMF,
			"small-safetensors":        smallST,
			"small-cmf-truncated":      smallCMF[:len(smallCMF)-5],
		},
		"FuzzParseConfig": {
			"tiny-teacher":  cfg,
			"vl-nested":     vl["config.json"],
			"cmf-arch":      small.Config.JSON(),
			"interval-only": []byte(`{"vocab_size":32,"hidden_size":16,"num_hidden_layers":8,"intermediate_size":24,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,"linear_num_key_heads":1,"linear_num_value_heads":2,"linear_key_head_dim":8,"linear_value_head_dim":8,"full_attention_interval":4,"rms_norm_eps":1e-6,"rope_theta":10000,"eos_token_id":[1,2]}`),
		},
		"FuzzOpenShardIndex": {
			"hf-vl-index": vl[HFIndexName],
			"cmf-index":   cmfIndex,
			"escape":      []byte(`{"weight_map":{"model.language_model.norm.weight":"../model-00001-of-00002.safetensors"}}`),
		},
	}
}

func corpusFile(b []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n")
}

// TestFuzzSeedCorpus checks that testdata/fuzz holds the seeds fuzzSeeds builds (so the
// corpus follows format changes); NVG_WRITE_FUZZ_SEEDS=1 rewrites it.
func TestFuzzSeedCorpus(t *testing.T) {
	write := os.Getenv("NVG_WRITE_FUZZ_SEEDS") == "1"
	for fuzzer, seeds := range fuzzSeeds(t) {
		for name, b := range seeds {
			p := filepath.Join("testdata", "fuzz", fuzzer, name)
			want := corpusFile(b)
			if write {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (regenerate with NVG_WRITE_FUZZ_SEEDS=1 go test -run TestFuzzSeedCorpus ./cmf)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale; regenerate with NVG_WRITE_FUZZ_SEEDS=1 go test -run TestFuzzSeedCorpus ./cmf", p)
			}
		}
	}
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// allocBound is the most a parser may allocate for n input bytes plus fixed extra bytes
// (files the input refers to): JSON decoding takes a few tens of bytes per input byte;
// 256 per byte plus 8 MiB (the fuzzing engine's own allocations) is far below what a size
// taken from the input's numbers (a header length, a shape, a rank) would cost.
func allocBound(n int, extra uint64) uint64 { return 256*uint64(n) + extra + 8<<20 }

// checkAlloc fails t when more than allocBound(n, extra) bytes were allocated since before.
func checkAlloc(t *testing.T, before uint64, n int, extra uint64) {
	t.Helper()
	if grew := totalAlloc() - before; grew > allocBound(n, extra) {
		t.Fatalf("allocated %d bytes for %d input bytes (bound %d)", grew, n, allocBound(n, extra))
	}
}

// FuzzParseSafetensorsHeader parses arbitrary bytes as a safetensors/CMF file: no panic,
// errors name the file, allocation bounded by the input's size, and whatever is accepted
// tiles the data section exactly with tensors whose shapes match their byte counts.
func FuzzParseSafetensorsHeader(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		before := totalAlloc()
		meta, ts, err := ParseSafetensorsHeader(bytes.NewReader(data), int64(len(data)), "fuzz.cmf")
		checkAlloc(t, before, len(data), 0)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.cmf: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		var total int64
		for _, tt := range ts {
			b, err := tt.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			n, err := numElements(tt.Shape)
			if err != nil || int64(len(b)) != n*int64(tt.DType.Size()) {
				t.Fatalf("tensor %s: %d bytes for %v %s", tt.Name, len(b), tt.Shape, tt.DType)
			}
			total += int64(len(b))
		}
		if hlen := int64(binary.LittleEndian.Uint64(data)); 8+hlen+total != int64(len(data)) {
			t.Fatalf("tensors cover %d of %d data bytes", total, int64(len(data))-8-hlen)
		}
		// The CMF layer on top must not panic either; a BLR tensor it accepts is [m, n].
		if _, err := applyCMFMetadata("fuzz.cmf", meta, ts); err == nil {
			for _, tt := range ts {
				if tt.DType == BLR && (len(tt.Shape) != 2 || tt.Shape[0] <= 0 || tt.Shape[1] <= 0) {
					t.Fatalf("blr tensor %s shape %v", tt.Name, tt.Shape)
				}
			}
		} else if !strings.HasPrefix(err.Error(), "fuzz.cmf: ") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

// FuzzParseConfig parses arbitrary config.json bytes: no panic, allocation bounded by the
// input's size (layer counts and dims are capped before anything is sized by them), and an
// accepted config is valid and round-trips through its arch JSON.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		before := totalAlloc()
		c, err := arch.ParseConfig(data)
		checkAlloc(t, before, len(data), 0)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("arch.ParseConfig returned an invalid config: %v", err)
		}
		c2, err := arch.ParseConfig(c.JSON())
		if err != nil {
			t.Fatalf("arch JSON does not parse back: %v\n%s", err, c.JSON())
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("arch JSON round trip:\n%+v\n%+v", c, c2)
		}
		shapes := c.Shapes()
		if _, ok := shapes["lm_head.weight"]; ok == c.TieWordEmbeddings {
			t.Fatal("lm_head expected iff untied")
		}
	})
}

// FuzzOpenShardIndex opens the synthetic VL checkpoint (config + two shards) through a
// fuzzed index: no panic, no shard outside the directory (a name with a separator or a
// dot-dot is rejected, and no file outside ckpt/ is opened), allocation bounded by the
// input plus the checkpoint's own size, and a model that opens is valid.
func FuzzOpenShardIndex(f *testing.F) {
	f.Add([]byte(`{"weight_map":{"a":"b"}}`))
	src, err := Open(tinyDir)
	if err != nil {
		f.Fatal(err)
	}
	defer src.Close()
	vl := vlCheckpointFiles(f, src)
	var vlBytes uint64
	for _, b := range vl {
		vlBytes += uint64(len(b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if ix, err := ParseShardIndex(data); err == nil {
			for _, s := range ix.Shards() {
				if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\`) {
					t.Fatalf("shard name %q accepted", s)
				}
			}
		}
		mfs := fstest.MapFS{}
		for n, b := range vl {
			mfs["ckpt/"+n] = &fstest.MapFile{Data: b}
		}
		mfs["ckpt/"+HFIndexName] = &fstest.MapFile{Data: data}
		// Files outside the model directory that an escaping name would reach.
		mfs["model-00001-of-00002.safetensors"] = mfs["ckpt/model-00001-of-00002.safetensors"]
		mfs["other/model-00001-of-00002.safetensors"] = mfs["ckpt/model-00001-of-00002.safetensors"]
		before := totalAlloc()
		m, err := OpenFS(recordFS{mfs, t}, "ckpt")
		checkAlloc(t, before, len(data), 4*vlBytes)
		if err != nil {
			if !strings.Contains(err.Error(), "ckpt/") {
				t.Fatalf("error names no file: %v", err)
			}
			return
		}
		defer m.Close()
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

// vlCheckpointFiles is vlCheckpoint without the index (for the fuzzer, which supplies it).
func vlCheckpointFiles(tb testing.TB, src *Model) map[string][]byte {
	files := vlCheckpoint(tb, src)
	delete(files, HFIndexName)
	return files
}

// recordFS fails the test when a file outside ckpt/ is opened.
type recordFS struct {
	fsys fstest.MapFS
	t    *testing.T
}

func (r recordFS) Open(name string) (fs.File, error) {
	if name != "ckpt" && !strings.HasPrefix(name, "ckpt/") {
		r.t.Fatalf("opened %q, outside the model directory ckpt", name)
	}
	if rest := strings.TrimPrefix(name, "ckpt/"); strings.Contains(rest, "/") {
		r.t.Fatalf("opened %q, below the model directory", name)
	}
	return r.fsys.Open(name)
}
