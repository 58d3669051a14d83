package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGitHeadStale: the run-time git lookup names the checkout's commit only while the
// checkout is unchanged since the executable was written; a commit or an edit after it
// makes the commit unknown instead of naming a tree the binary was not built from.
func TestGitHeadStale(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	file := filepath.Join(dir, "a.go")
	if err := os.WriteFile(file, []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "a.go")
	git("commit", "-qm", "one")
	head := git("rev-parse", "HEAD")
	later := time.Now().Add(time.Hour)
	if c, dirty, err := gitHeadAt(dir, later); err != nil || c != head || dirty {
		t.Errorf("built after the commit: %q %v %v, want %s clean", c, dirty, err, head)
	}
	if c, _, err := gitHeadAt(dir, time.Now().Add(-time.Hour)); err == nil {
		t.Errorf("built before the commit: %q accepted", c)
	}
	if err := os.WriteFile(file, []byte("package a // edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, dirty, err := gitHeadAt(dir, later); err != nil || c != head || !dirty {
		t.Errorf("edited before the build: %q %v %v, want %s modified", c, dirty, err, head)
	}
	future := time.Now().Add(2 * time.Hour)
	if err := os.Chtimes(file, future, future); err != nil {
		t.Fatal(err)
	}
	if c, _, err := gitHeadAt(dir, later); err == nil || !strings.Contains(err.Error(), "a.go changed after") {
		t.Errorf("edited after the build: %q, %v", c, err)
	}
}
