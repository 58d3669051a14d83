package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files (slash-separated relative path → contents) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, s := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestExpandSources: files, directories (recursive, text extensions only, hidden
// directories skipped), patterns, order and duplicates.
func TestExpandSources(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"a.go": "", "b.TXT": "", "c.bin": "", "sub/d.jsonl": "", "sub/e.md": "", "sub/deep/f.py": "",
		".git/g.txt": "", "sub/.cache/h.go": "", "x/y.go": "", "x/z.png": "",
	})
	j := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, filepath.Join(dir, filepath.FromSlash(r)))
		}
		return out
	}
	for _, tc := range []struct {
		src  []string
		want []string
	}{
		{[]string{filepath.Join(dir, "sub")}, j("sub/d.jsonl", "sub/deep/f.py", "sub/e.md")},
		{[]string{dir}, j("a.go", "b.TXT", "sub/d.jsonl", "sub/deep/f.py", "sub/e.md", "x/y.go")},
		{[]string{filepath.Join(dir, "c.bin")}, j("c.bin")}, // a file named is taken whatever its extension
		{[]string{filepath.Join(dir, "*.go"), filepath.Join(dir, "?.bin")}, j("a.go", "c.bin")},
		{[]string{filepath.Join(dir, "[sx]*")}, j("sub/d.jsonl", "sub/deep/f.py", "sub/e.md", "x/y.go")}, // matched directories are walked
		{[]string{filepath.Join(dir, "x/y.go"), "", filepath.Join(dir, "x"), filepath.Join(dir, "a.go")}, j("x/y.go", "a.go")},
		{[]string{filepath.Join(dir, ".git")}, j(".git/g.txt")}, // a hidden directory named itself is walked
	} {
		got, err := ExpandSources(tc.src)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ExpandSources(%q) = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		src  []string
		want string
	}{
		{[]string{filepath.Join(dir, "missing.go")}, "missing.go: no such file or directory"},
		{[]string{filepath.Join(dir, "*.rs")}, `*.rs" matches no file`},
		{[]string{filepath.Join(dir, "[")}, "syntax error in pattern"},
		{[]string{""}, "no corpus files given"},
		{nil, "no corpus files given"},
	} {
		_, err := ExpandSources(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ExpandSources(%q): error %v, want one containing %q", tc.src, err, tc.want)
		}
	}
	empty := writeTree(t, map[string]string{"a.bin": "", ".hidden/b.go": ""})
	if _, err := ExpandSources([]string{empty}); err == nil || !strings.Contains(err.Error(), "holds no file with a text extension (.c .cc") {
		t.Errorf("a directory with no text file: error %v", err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(empty, "dangling.go")); err != nil {
		t.Fatal(err)
	}
	if _, err := ExpandSources([]string{filepath.Join(empty, "dangling.go")}); err == nil || !strings.Contains(err.Error(), "dangling.go: no such file or directory") {
		t.Errorf("a dangling symlink: error %v", err)
	}
}

// TestTokenizeJSONL: every line of a .jsonl file is one document (its "text"; other fields
// ignored; blank lines skipped), tokenized as the HF tokenizer does (the fixture ids), and
// mixed with plain files in the given order.
func TestTokenizeJSONL(t *testing.T) {
	tok := loadTiny(t)
	cs := loadCases(t)
	var lines []string
	var want []int
	for i, c := range cs[:20] {
		b, _ := json.Marshal(map[string]any{"id": i, "text": c.Text, "meta": map[string]int{"n": i}})
		lines = append(lines, string(b))
		if i == 5 {
			lines = append(lines, "", "  ")
		}
		want = append(append(want, c.IDs...), 0)
	}
	dir := writeTree(t, map[string]string{"c.jsonl": strings.Join(lines, "\n") + "\n", "d.txt": cs[20].Text})
	want = append(append(want, cs[20].IDs...), 0)
	got, err := TokenizeFiles(tok, []string{filepath.Join(dir, "c.jsonl"), filepath.Join(dir, "d.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("JSONL + text stream differs from the fixture ids (%d vs %d tokens)", len(got), len(want))
	}
	// The token cache tells a JSONL file apart from the same bytes read as text.
	c, err := FilesCorpus([]string{filepath.Join(dir, "c.jsonl")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	for range 2 {
		s, err := c.Tokens(tok, Train, cache)
		if err != nil || !slices.Equal(s, want[:len(want)-len(cs[20].IDs)-1]) {
			t.Fatalf("cached JSONL stream: %d tokens, %v", len(s), err)
		}
	}
}

// TestJSONLErrors: a bad line is an error naming file:line; an unreadable file names it.
func TestJSONLErrors(t *testing.T) {
	tok := loadTiny(t)
	for _, tc := range []struct{ body, want string }{
		{`{"text": "a"}` + "\n" + `{"text": "b"` + "\n", "bad.jsonl:2: want a JSON object"},
		{`{"text": "a"}` + "\n\n" + `{"content": "b"}`, `bad.jsonl:3: no "text" string`},
		{`{"text": null}`, `bad.jsonl:1: no "text" string`},
		{`{"text": 7}`, `bad.jsonl:1: want a JSON object with a "text" string: "text" is a JSON number`},
		{`["text"]`, "bad.jsonl:1: want a JSON object with a \"text\" string: the line is a JSON array"},
		{"{\"text\": \"a\x00\"}", "bad.jsonl: a NUL byte at offset 11: a binary file"},
		{"text\n", "bad.jsonl:1: want a JSON object"},
	} {
		dir := writeTree(t, map[string]string{"bad.jsonl": tc.body})
		_, err := TokenizeFiles(tok, []string{filepath.Join(dir, "bad.jsonl")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.body, err, tc.want)
		}
	}
	// A binary file matched by a pattern (taken whatever its extension) is refused.
	bin := writeTree(t, map[string]string{"img.png": "\x89PNG\r\n\x1a\n\x00\x00"})
	if _, err := TokenizeFiles(tok, []string{filepath.Join(bin, "img.png")}); err == nil || !strings.Contains(err.Error(), "img.png: a NUL byte at offset 8") {
		t.Errorf("a binary file: error %v", err)
	}
	// A path that cannot be read as a file (here a directory) is named in the error.
	dir := t.TempDir()
	if _, err := TokenizeFiles(tok, []string{dir}); err == nil || !strings.Contains(err.Error(), dir+": is a directory") {
		t.Errorf("a directory read as a file: error %v", err)
	}
	if os.Geteuid() == 0 {
		t.Log("running as root: file permissions do not stop reading, the unreadable-file case is not checked")
		return
	}
	dir = writeTree(t, map[string]string{"locked.txt": "x"})
	p := filepath.Join(dir, "locked.txt")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := TokenizeFiles(tok, []string{p}); err == nil || !strings.Contains(err.Error(), "locked.txt: permission denied") {
		t.Errorf("unreadable file: error %v", err)
	}
}
