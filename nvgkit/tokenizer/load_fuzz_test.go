package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// smallTokenizerJSON is a complete byte-level BPE tokenizer.json of a few KB in the
// configuration family FromJSON supports: the 256 byte tokens, a few merges (as strings
// and as pairs), two added tokens, NFC and a Split + ByteLevel pre-tokenizer sequence.
func smallTokenizerJSON(tb testing.TB) []byte {
	tb.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b + 1
	}
	merges := []any{"h e", "l l", []string{"he", "ll"}, "Ġ w"}
	for _, tok := range []string{"he", "ll", "hell", "Ġw"} {
		vocab[tok] = len(vocab) + 1
	}
	f := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<|endoftext|>", "special": true},
			{"id": len(vocab) + 1, "content": "<tool>", "special": false, "normalized": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": Qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// loadSeeds are the seed corpus of FuzzFromJSON: the small tokenizer, variants with a
// different pre-tokenizer and normalizer, and ids far beyond the number of tokens listed.
func loadSeeds(tb testing.TB) map[string][]byte {
	small := string(smallTokenizerJSON(tb))
	return map[string][]byte{
		"small":          []byte(small),
		"bytelevel-only": []byte(strings.Replace(small, `"type":"Sequence"`, `"type":"ByteLevel","x":"Sequence"`, 1)),
		"nfkd":           []byte(strings.Replace(small, `"NFC"`, `"NFKD"`, 1)),
		"huge-vocab-id":  []byte(strings.Replace(small, `"he":257`, `"he":2147483000`, 1)),
		"huge-added-id":  []byte(strings.Replace(small, `"id":0,`, `"id":2000000000,`, 1)),
	}
}

// TestLoadFuzzSeedCorpus keeps testdata/fuzz/FuzzFromJSON equal to loadSeeds;
// NVG_WRITE_FUZZ_SEEDS=1 rewrites it.
func TestLoadFuzzSeedCorpus(t *testing.T) {
	write := os.Getenv("NVG_WRITE_FUZZ_SEEDS") == "1"
	for name, b := range loadSeeds(t) {
		p := filepath.Join("testdata", "fuzz", "FuzzFromJSON", name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if write {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (%v); regenerate with NVG_WRITE_FUZZ_SEEDS=1 go test -run TestLoadFuzzSeedCorpus ./nvgkit/tokenizer", p, err)
		}
	}
}

// TestFromJSONHugeIDs: a file that declares an id far beyond the tokens it lists is
// rejected (it used to size the id tables by the largest id: 2^31 entries, tens of GB).
func TestFromJSONHugeIDs(t *testing.T) {
	seeds := loadSeeds(t)
	if _, err := FromJSON(seeds["small"]); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"huge-vocab-id", "huge-added-id"} {
		before := totalAlloc()
		_, err := FromJSON(seeds[name])
		if err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: err = %v, want an id out of range", name, err)
		}
		if grew := totalAlloc() - before; grew > allocBound(len(seeds[name])) {
			t.Errorf("%s: allocated %d bytes for a %d-byte file", name, grew, len(seeds[name]))
		}
	}
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// allocBound is the most FromJSON may allocate for an n-byte file: JSON decoding into maps
// and the id tables take a few tens of bytes per input byte; 256 per byte plus 8 MiB
// (regexp compilation, the fuzzing engine's own allocations) is far below what a size
// taken from the file's numbers would cost.
func allocBound(n int) uint64 { return 256*uint64(n) + 8<<20 }

// FuzzFromJSON loads arbitrary tokenizer.json bytes: no panic, no hang, no allocation
// beyond allocBound of the input's size; a tokenizer that loads encodes a fixed text to ids
// in range that decode back.
func FuzzFromJSON(f *testing.F) {
	for _, b := range loadSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before := totalAlloc()
		tok, err := FromJSON(data)
		if grew := totalAlloc() - before; grew > allocBound(len(data)) {
			t.Fatalf("allocated %d bytes for a %d-byte file", grew, len(data))
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error without the tokenizer: prefix: %v", err)
			}
			return
		}
		const text = "hello world<|endoftext|> héllo\n"
		ids := tok.Encode(text)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("id %d out of range [0, %d)", id, tok.VocabSize())
			}
		}
		if _, err := tok.Decode(ids); err != nil {
			t.Fatal(err)
		}
	})
}
