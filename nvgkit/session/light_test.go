package session_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package must stay light: a notebook cell that imports it must not link the GPU engine
// (issue 14). go list -deps names every package it depends on; none may be nvg's gpu, host,
// wgsl or nvgkit package (or below gpu, host, wgsl), the wgpu-native binding, or any
// non-standard package with cgo files.
func TestLabPackageIsLight(t *testing.T) {
	const module = "github.com/nvg-project/nvg/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 5 {
		t.Fatalf("go list -deps printed only %d lines:\n%s", len(lines), out)
	}
	self := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("unexpected go list line %q", l)
		}
		path, std, cgo := f[0], f[1] == "true", f[2] != "0"
		if path == module+"nvgkit/session" {
			self = true
		}
		heavy := path == module+"nvgkit" || strings.Contains(path, "oliverbestmann/webgpu")
		for _, p := range []string{"gpu", "host", "wgsl"} {
			heavy = heavy || path == module+p || strings.HasPrefix(path, module+p+"/")
		}
		if heavy || (!std && cgo) {
			t.Errorf("nvgkit/session depends on %s (heavy: GPU engine, host reference or cgo)", path)
		}
	}
	if !self {
		t.Fatalf("go list -deps did not list nvgkit/session itself:\n%s", out)
	}
}
