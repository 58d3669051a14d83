package main

import (
	"strings"
	"testing"
)

// TestTokenizeNotATokenizer: `tokenize --tokenizer config.json` (valid JSON, not a
// tokenizer) is a usage error that says so, not "no pre_tokenizer".
func TestTokenizeNotATokenizer(t *testing.T) {
	const p = "../../cmf/tinyteacher/model/config.json"
	_, stderr, code := capture(t, []string{"tokenize", "--tokenizer", p})
	if want := "--tokenizer " + p + " is not a tokenizer.json (no model.vocab)"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}
