package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// gitHead returns the checkout's HEAD commit, skipping the test outside a git checkout.
func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// A build without VCS stamping (-buildvcs=false, as GOFLAGS may set) still tells its
// commit: nvg --version finds it through git in the compiled-in source directory.
func TestVersionBuildVCSFalse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nvg")
	}
	head := gitHead(t)
	bin := filepath.Join(t.TempDir(), "nvg")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=false: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("nvg --version: %v", err)
	}
	s := string(out)
	if !strings.HasPrefix(s, "nvg (devel) ("+head[:12]) || !strings.Contains(s, "commit from git") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("nvg --version = %q, want the commit %s from git and %s", s, head[:12], runtime.Version())
	}
}
