package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

const (
	tinyPath   = "../../cmf/tinyteacher/model/tokenizer.json"
	qwen3Path  = "../../testdata/tokenizers/qwen3/tokenizer.json.gz"
	fixtureDir = "../../testdata/fixtures"
)

type tokCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

var (
	loadOnce  sync.Map // path → *loaded
	casesOnce sync.Map
)

type loaded struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// loadTok loads a tokenizer once per test binary.
func loadTok(t testing.TB, path string) *Tokenizer {
	t.Helper()
	v, _ := loadOnce.LoadOrStore(path, &loaded{})
	l := v.(*loaded)
	l.once.Do(func() { l.tok, l.err = Load(path) })
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.tok
}

func loadCases(t testing.TB, name string) []tokCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var cs []tokCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return cs
}

var fixtureSets = []struct{ name, tok, cases string }{
	{"tiny-go", tinyPath, "tokenizer-cases-tiny-go.json"},
	{"qwen3", qwen3Path, "tokenizer-cases-qwen3.json"},
}

// TestFixtures checks every HF-produced case of both tokenizers, ids exactly.
func TestFixtures(t *testing.T) {
	for _, set := range fixtureSets {
		t.Run(set.name, func(t *testing.T) {
			tok := loadTok(t, set.tok)
			cases := loadCases(t, set.cases)
			passed := 0
			for i, c := range cases {
				ok := t.Run(fmt.Sprintf("case%02d", i), func(t *testing.T) {
					got := tok.Encode(c.Text)
					if !slices.Equal(got, c.IDs) {
						k := 0
						for k < len(got) && k < len(c.IDs) && got[k] == c.IDs[k] {
							k++
						}
						t.Fatalf("ids differ at %d (got %d ids, want %d): got %v, want %v",
							k, len(got), len(c.IDs), got[k:min(k+8, len(got))], c.IDs[k:min(k+8, len(c.IDs))])
					}
				})
				if ok {
					passed++
				}
			}
			t.Logf("%s: %d/%d cases passed", set.name, passed, len(cases))
		})
	}
}

// TestRoundTrip checks decode(encode(s)) == NFC(s) on every fixture text and decode of the
// fixture ids alone.
func TestRoundTrip(t *testing.T) {
	for _, set := range fixtureSets {
		t.Run(set.name, func(t *testing.T) {
			tok := loadTok(t, set.tok)
			for i, c := range loadCases(t, set.cases) {
				want := norm.NFC.String(c.Text)
				got, err := tok.Decode(tok.Encode(c.Text))
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if got != want {
					t.Errorf("case %d: decode(encode(text)) differs from NFC(text)", i)
				}
				got, err = tok.Decode(c.IDs)
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if got != want {
					t.Errorf("case %d: decode(fixture ids) differs from NFC(text)", i)
				}
			}
		})
	}
}

// TestRegexMatchesScanner checks that the hand-written scanner and regexp2 cut the same
// pieces for Qwen2Pattern and Qwen35Pattern, on the fixtures and on edge cases of every
// alternative.
func TestRegexMatchesScanner(t *testing.T) {
	texts := []string{
		"", " ", "  ", "a", "I'm you'RE they'll we'VE he'D it'S she'M 'x 'll 'L 'Ll",
		"'ſ 'ſt", "x  y", "x \ty", "x\n\n  y", "  \n \t", "a\r\n\tb", " 3.14159 12345",
		"foo()\n\n}\n", "a == b", " != \n", "日本語 🙂 한국어 عربى", "\u00a0x\u3000\u3000y \u2028",
		"naïve — “quotes”", "é\u0301x", "\u0301abc", "x\u0301", "$$\r\n\r\n", "\t\tfoo",
		"नमस्ते दुनिया", " \u0301\u0301x", ".\u0301", "\n\u0301a", "3\u0301", "'\u0301s", "ก่อน",
	}
	for _, set := range fixtureSets {
		for _, c := range loadCases(t, set.cases) {
			texts = append(texts, c.Text)
		}
	}
	for _, p := range []struct {
		pattern string
		scanner qwenSplitter
	}{{Qwen2Pattern, qwen2Splitter}, {Qwen35Pattern, qwen35Splitter}} {
		re, err := newRegexSplitter(p.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range texts {
			want := pieces(re, s)
			got := pieces(p.scanner, s)
			if !slices.Equal(got, want) {
				t.Errorf("%s: text %d %q: scanner %q, regexp2 %q", p.pattern[40:60], i, s[:min(len(s), 60)], got, want)
			}
		}
	}
}

func pieces(sp splitter, s string) []string {
	var out []string
	sp.split(s, func(a, b int) { out = append(out, s[a:b]) })
	return out
}

// TestQwenSplitKnown checks the split of hand-worked strings (what the regex must give).
func TestQwenSplitKnown(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"I'm you'RE", []string{"I", "'m", " you", "'RE"}},
		{"x  y", []string{"x", " ", " y"}},
		{"x \n\n  y", []string{"x", " \n\n", " ", " y"}},
		{" 3.14", []string{" ", "3", ".", "1", "4"}},
		{"a();\n}", []string{"a", "();\n", "}"}},
		{"\tfoo", []string{"\tfoo"}},
		{"x   ", []string{"x", "   "}},
		{"it'ſ", []string{"it", "'ſ"}},
		{"x\u0301y", []string{"x", "\u0301y"}},
	}
	for _, c := range cases {
		if got := pieces(qwen2Splitter, c.in); !slices.Equal(got, c.want) {
			t.Errorf("Qwen2 %q: got %q, want %q", c.in, got, c.want)
		}
	}
	// Qwen3.5 keeps combining marks inside words.
	cases35 := []struct {
		in   string
		want []string
	}{
		{"x\u0301y", []string{"x\u0301y"}},
		{"नमस्ते दुनिया", []string{"नमस्ते", " दुनिया"}},
		{"a.\u0301", []string{"a", ".\u0301"}},
		{"I'm  x", []string{"I", "'m", " ", " x"}},
	}
	for _, c := range cases35 {
		if got := pieces(qwen35Splitter, c.in); !slices.Equal(got, c.want) {
			t.Errorf("Qwen3.5 %q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestExpandCaseFold(t *testing.T) {
	got := expandCaseFold(`(?i:'s|'t)|x(?i:a\d)`)
	want := `(?:'[sſS]|'[tT])|x(?i:a\d)` // orbit order of unicode.SimpleFold from the letter
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestHeapMatchesScan checks the heap merge against the quadratic merge on long words.
func TestHeapMatchesScan(t *testing.T) {
	tok := loadTok(t, qwen3Path)
	words := []string{
		strings.Repeat("=", 200), strings.Repeat("ab", 70), strings.Repeat(" ", 130),
		"internationalizationinternationalizationinternationalization", strings.Repeat("/", 97),
	}
	for _, w := range words {
		var a, b []int32
		for i := 0; i < len(w); i++ {
			a = append(a, tok.byteID[w[i]])
			b = append(b, tok.byteID[w[i]])
		}
		// merge on a word longer than smallWord uses the heap; mergeScan forces the scan on b.
		got := tok.merges.mergeHeap(a)
		want := tok.merges.mergeScan(b)
		if !slices.Equal(got, want) {
			t.Errorf("%q: heap %v, scan %v", w[:20], got, want)
		}
	}
}

// TestAddedTokens checks that added tokens are matched before splitting, longest first.
func TestAddedTokens(t *testing.T) {
	tok := loadTok(t, qwen3Path)
	eot, ok := tok.TokenID("<|endoftext|>")
	if !ok || eot != 151643 {
		t.Fatalf("<|endoftext|> = %d, %v; want 151643 (tokenizer.json added_tokens)", eot, ok)
	}
	think, _ := tok.TokenID("<think>")
	if think != 151667 {
		t.Fatalf("<think> = %d, want 151667", think)
	}
	got := tok.Encode("<think>a<|endoftext|><|endoftext|")
	if got[0] != 151667 || got[2] != 151643 || len(got) < 4 {
		t.Fatalf("got %v", got)
	}
	s, err := tok.Decode(got)
	if err != nil || s != "<think>a<|endoftext|><|endoftext|" {
		t.Fatalf("decode: %q, %v", s, err)
	}
	if !tok.IsSpecial(151643) || tok.IsSpecial(151667) || tok.IsSpecial(-1) {
		t.Fatal("IsSpecial disagrees with tokenizer.json's special flags")
	}
	tiny := loadTok(t, tinyPath)
	if id, ok := tiny.TokenID("<|endoftext|>"); !ok || id != 0 {
		t.Fatalf("tiny <|endoftext|> = %d, %v; want 0 (MODEL_CARD.md)", id, ok)
	}
	if tiny.VocabSize() != 8192 || tok.VocabSize() != 151669 {
		t.Fatalf("vocab sizes %d, %d; want 8192, 151669", tiny.VocabSize(), tok.VocabSize())
	}
}

func TestDecodeErrors(t *testing.T) {
	tok := loadTok(t, tinyPath)
	for _, ids := range [][]int{{-1}, {8192}, {5, 1 << 40}} {
		if _, err := tok.Decode(ids); err == nil {
			t.Errorf("Decode(%v): no error", ids)
		}
	}
}

// TestDecodeLossy checks Rust from_utf8_lossy's maximal-subpart replacement.
func TestDecodeLossy(t *testing.T) {
	cases := []struct{ in, want string }{
		{"a\xe2\x82b", "a\uFFFDb"},             // truncated 3-byte sequence: one U+FFFD
		{"\xf0\x9f\x99", "\uFFFD"},             // truncated 4-byte sequence
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED then A0 is ill-formed
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xc3\xa9", "é"},
	}
	for _, c := range cases {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEncodeBatch(t *testing.T) {
	tok := loadTok(t, tinyPath)
	cases := loadCases(t, "tokenizer-cases-tiny-go.json")
	texts := make([]string, len(cases))
	for i, c := range cases {
		texts[i] = c.Text
	}
	for i, ids := range tok.EncodeBatch(texts) {
		if !slices.Equal(ids, cases[i].IDs) {
			t.Errorf("case %d differs", i)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	tok := loadTok(t, tinyPath)
	s, err := tok.Decode(tok.Encode("a\xffb"))
	if err != nil || s != "a\uFFFDb" {
		t.Fatalf("got %q, %v", s, err)
	}
}

// TestUnsupported checks that configurations outside the supported set are rejected with
// an error naming the part.
func TestUnsupported(t *testing.T) {
	base := `{"added_tokens":[],"normalizer":%s,"pre_tokenizer":%s,"post_processor":null,"decoder":%s,"model":%s}`
	bl := `{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}`
	vocab := `{`
	for b := 0; b < 256; b++ {
		if b > 0 {
			vocab += ","
		}
		k, _ := json.Marshal(string(byteToRune[b]))
		vocab += fmt.Sprintf("%s:%d", k, b)
	}
	vocab += `,"ab":256}`
	model := `{"type":"BPE","vocab":` + vocab + `,"merges":["a b"]}`
	modelPairs := `{"type":"BPE","vocab":` + vocab + `,"merges":[["a","b"]]}`
	good := fmt.Sprintf(base, `{"type":"NFC"}`, bl, bl, model)
	tk, err := FromJSON([]byte(good))
	if err != nil {
		t.Fatalf("minimal config rejected: %v", err)
	}
	if got := tk.Encode("abc"); !slices.Equal(got, []int{256, 'c'}) {
		t.Fatalf("minimal Encode(abc) = %v, want [256 99]", got)
	}
	tk, err = FromJSON([]byte(fmt.Sprintf(base, `null`, bl, bl, modelPairs)))
	if err != nil || !slices.Equal(tk.Encode("ab"), []int{256}) {
		t.Fatalf("pair merges: %v", err)
	}
	bad := []struct{ json, want string }{
		{fmt.Sprintf(base, `{"type":"Lowercase"}`, bl, bl, model), "normalizer type \"Lowercase\" not supported"},
		{fmt.Sprintf(base, `null`, `{"type":"Whitespace"}`, bl, model), "pre_tokenizer type \"Whitespace\" not supported"},
		{fmt.Sprintf(base, `null`, `{"type":"ByteLevel","add_prefix_space":true}`, bl, model), "add_prefix_space"},
		{fmt.Sprintf(base, `null`, `{"type":"Split","pattern":{"Regex":"x"},"behavior":"Isolated","invert":false}`, bl, model), "no ByteLevel"},
		{fmt.Sprintf(base, `null`, `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"x"},"behavior":"Removed","invert":false},`+bl+`]}`, bl, model), "behavior \"Removed\" not supported"},
		{fmt.Sprintf(base, `null`, bl, `{"type":"WordPiece"}`, model), "decoder type \"WordPiece\" not supported"},
		{fmt.Sprintf(base, `null`, bl, bl, `{"type":"Unigram","vocab":[]}`), "model type \"Unigram\" not supported"},
		{fmt.Sprintf(base, `null`, bl, bl, `{"type":"BPE","vocab":`+vocab+`,"merges":["a zz"]}`), "\"zz\" is not in the vocab"},
		{fmt.Sprintf(base, `null`, bl, bl, `{"type":"BPE","vocab":`+vocab+`,"merges":["ab"]}`), "merges[0]"},
		{fmt.Sprintf(base, `null`, bl, bl, `{"type":"BPE","vocab":{"a":0},"merges":[]}`), "lacks the token"},
		{fmt.Sprintf(base, `null`, bl, bl, `{"type":"BPE","byte_fallback":true,"vocab":`+vocab+`,"merges":[]}`), "byte_fallback"},
		{`[1,2]`, "not a tokenizer.json"},
	}
	for _, c := range bad {
		_, err := FromJSON([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error containing %q, got %v", c.want, err)
		}
	}
	if _, err := Load("no/such/tokenizer.json"); err == nil || !strings.Contains(err.Error(), "no/such/tokenizer.json") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestFromJSONNotATokenizer: valid JSON that is not a tokenizer.json (a model's config.json,
// an empty object, a model without a vocab) is named as such, wrapping ErrNotTokenizerJSON,
// instead of failing on its first missing section ("no pre_tokenizer").
func TestFromJSONNotATokenizer(t *testing.T) {
	cfg, err := os.ReadFile("../../cmf/tinyteacher/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]byte{cfg, []byte(`{}`), []byte(`{"model": {"type": "BPE"}}`), []byte(`{"model": null}`), []byte(`{"model": 3}`)} {
		_, err := FromJSON(in)
		if !errors.Is(err, ErrNotTokenizerJSON) || !strings.Contains(err.Error(), "not a tokenizer.json (no model.vocab)") {
			t.Errorf("%.40s…: err = %v, want ErrNotTokenizerJSON", in, err)
		}
	}
}

// TestFromJSONDuplicateKeys: a key named twice in an object of tokenizer.json (issue 34: a
// vocabulary entry given two ids took the last one silently) is refused, naming the key and
// where, as config.json and the safetensors headers are.
func TestFromJSONDuplicateKeys(t *testing.T) {
	orig, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromJSON(orig); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{`"vocab": {`, `"vocab": {"!": 7, `, `duplicate key "!" in model.vocab`},
		{`"normalizer": {`, `"normalizer": null, "normalizer": {`, `duplicate key "normalizer" at the top level`},
		{`"type": "NFC"`, `"type": "NFD", "type": "NFC"`, `duplicate key "type" in normalizer`},
	} {
		in := strings.Replace(string(orig), c.old, c.new, 1)
		if in == string(orig) {
			t.Fatalf("%q is not in %s", c.old, tinyPath)
		}
		_, err := FromJSON([]byte(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.new, err, c.want)
		}
	}
}
