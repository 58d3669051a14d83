package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceHashIgnoresOutputs: the server binary's source hash (which names the nvg binary
// Attach builds) changes when a file that builds it changes — a Go file of a linked package,
// an embedded file, go.mod — and not when a run writes a large checkpoint under out/, a
// scratch file appears beside the source, or a test file changes (every `nvg distill` used to
// rebuild the server, and every Attach read every checkpoint). The hash is cached by the
// stamps of what it read.
func TestSourceHashIgnoresOutputs(t *testing.T) {
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hashtest\n\ngo 1.22\n")
	write("cmd/nvg/main.go", "package main\n\nimport \"example.com/hashtest/lib\"\n\nfunc main() { lib.F() }\n")
	write("lib/lib.go", "package lib\n\nimport _ \"embed\"\n\n//go:embed shader.wgsl\nvar shader string\n\nfunc F() { println(shader) }\n")
	write("lib/shader.wgsl", "// a shader\n")
	write("unused/unused.go", "package unused\n")
	hash := func() string {
		t.Helper()
		h, err := sourceHash(root)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h0 := hash()
	if len(h0) != 16 {
		t.Fatalf("hash %q, want 16 hex digits", h0)
	}
	// What a run and a researcher leave beside the source: no change.
	big := make([]byte, 64<<20)
	big[12345] = 1
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "out", "checkpoint-000100.safetensors"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	write("scratch.txt", "notes")
	write("lib/scratch.json", "{}")
	write("lib/lib_test.go", "package lib\n")
	write("unused/unused.go", "package unused\n\nvar X = 1\n")
	write("notebooks/x.ipynb", "{}")
	if h := hash(); h != h0 {
		t.Errorf("hash changed from %s to %s after writing outputs, scratch, test and unlinked files", h0, h)
	}
	// What builds the binary: a change each.
	seen := map[string]string{h0: "the start"}
	for _, e := range []struct{ rel, text string }{
		{"lib/lib.go", "package lib\n\nimport _ \"embed\"\n\n//go:embed shader.wgsl\nvar shader string\n\nfunc F() { println(shader, 2) }\n"},
		{"lib/shader.wgsl", "// another shader\n"},
		{"cmd/nvg/main.go", "package main\n\nimport \"example.com/hashtest/lib\"\n\nfunc main() { lib.F(); lib.F() }\n"},
		{"go.mod", "module example.com/hashtest\n\ngo 1.23\n"},
	} {
		write(e.rel, e.text)
		h := hash()
		if prev, ok := seen[h]; ok {
			t.Errorf("editing %s left the hash %s (as after %s)", e.rel, h, prev)
		}
		seen[h] = e.rel
	}
	// The cache: a hash recorded with the files' stamps is reused while they hold (the
	// recorded value is replaced by a marker to see it reused), and taken again when a source
	// file is edited or a file appears in a package's directory.
	cache := filepath.Join(t.TempDir(), "source-hash.json")
	want := hash()
	if h, err := cachedSourceHash(root, cache); err != nil || h != want {
		t.Fatalf("cachedSourceHash = %s, %v; want %s", h, err, want)
	}
	mark := func() {
		t.Helper()
		b, err := os.ReadFile(cache)
		if err != nil {
			t.Fatal(err)
		}
		var c hashCache
		if err := json.Unmarshal(b, &c); err != nil || c.Hash != want || len(c.Stamps) < 5 {
			t.Fatalf("cache %s: %+v, %v", cache, c, err)
		}
		c.Hash = "marker"
		if b, err = json.Marshal(c); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cache, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mark()
	if err := os.WriteFile(filepath.Join(root, "out", "checkpoint-000200.safetensors"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if h, err := cachedSourceHash(root, cache); err != nil || h != "marker" {
		t.Errorf("after a checkpoint was written: %s, %v; want the cached value", h, err)
	}
	for _, e := range []struct{ rel, text string }{
		{"lib/shader.wgsl", "// a third shader\n"},
		{"lib/new.go", "package lib\n\nvar Y = 2\n"},
	} {
		write(e.rel, e.text)
		want = hash()
		if h, err := cachedSourceHash(root, cache); err != nil || h != want {
			t.Errorf("after writing %s: %s, %v; want %s (taken again)", e.rel, h, err, want)
		}
		mark()
	}
	// A package that does not build is an error naming go list, not a silent hash.
	write("lib/broken.go", "package lib\n\nimport \"example.com/hashtest/missing\"\n")
	if _, err := sourceHash(root); err == nil || !strings.Contains(err.Error(), "go list -deps ./cmd/nvg") {
		t.Errorf("hash of a module whose import is missing: %v", err)
	}
}
