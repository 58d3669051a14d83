package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// FuzzRoundTrip checks, for any input, that Encode gives ids in range, that Decode of them
// gives back the NFC-normalized text (normalized between added tokens, as HF does; invalid
// UTF-8 bytes become U+FFFD first), and that the hand-written Qwen2 scanner cuts the same
// pieces as regexp2 running Qwen2Pattern, and likewise for Qwen35Pattern. The seed corpus is in testdata/fuzz/FuzzRoundTrip.
func FuzzRoundTrip(f *testing.F) {
	tok := loadTok(f, tinyPath)
	re2, err := newRegexSplitter(Qwen2Pattern)
	if err != nil {
		f.Fatal(err)
	}
	re35, err := newRegexSplitter(Qwen35Pattern)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "func main() {\n\tfmt.Println(\"hi\")\n}\n", "I'm they'LL 'ſ"} {
		f.Add(s)
	}
	const eot = "<|endoftext|>" // the tiny tokenizer's only added token
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(ValidUTF8(s), eot)
		for i := range parts {
			parts[i] = norm.NFC.String(parts[i])
		}
		if want := strings.Join(parts, eot); got != want {
			t.Fatalf("decode(encode(%q)) = %q, want %q", s, got, want)
		}
		v := norm.NFC.String(ValidUTF8(s))
		if a, b := pieces(qwen2Splitter, v), pieces(re2, v); !slices.Equal(a, b) {
			t.Fatalf("Qwen2 split of %q: scanner %q, regexp2 %q", v, a, b)
		}
		if a, b := pieces(qwen35Splitter, v), pieces(re35, v); !slices.Equal(a, b) {
			t.Fatalf("Qwen3.5 split of %q: scanner %q, regexp2 %q", v, a, b)
		}
	})
}
