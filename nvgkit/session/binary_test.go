package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNvgBinaryBuiltOnce: without NVG_BIN and with no nvg on PATH, the server binary is
// built from this module's source into the session directory, named by the source hash,
// and a second Attach reuses it instead of building again.
func TestNvgBinaryBuiltOnce(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	t.Setenv("NVG_BIN", "")
	t.Setenv("PATH", filepath.Dir(goBin)+":/usr/bin:/bin") // go and the C compiler cgo needs
	if p, err := exec.LookPath("nvg"); err == nil {
		t.Fatalf("nvg is on PATH (%s): this test needs a PATH without it", p)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "nvg-0123456789abcdef") // a binary of an older source version
	if err := os.WriteFile(stale, []byte("old"), 0o700); err != nil {
		t.Fatal(err)
	}
	bin, err := nvgBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := sourceHash(root)
	if err != nil {
		t.Fatal(err)
	}
	if bin != filepath.Join(dir, "nvg-"+hash) || len(hash) != 16 {
		t.Errorf("binary %s, want %s/nvg-<16 hex digits of the source hash %s>", bin, dir, hash)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the older version's binary %s is still there after a build (%v)", stale, err)
	}
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode()&0o100 == 0 {
		t.Fatalf("built binary: %v, %v", fi, err)
	}
	out, err := exec.Command(bin, "session", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "usage: nvg session start NAME") {
		t.Errorf("the built nvg: %v\n%s", err, out)
	}
	again, err := nvgBinary(dir)
	fi2, _ := os.Stat(again)
	if err != nil || again != bin || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("second lookup: %s, %v; want the same file, not rebuilt", again, err)
	}
	if h2, _ := sourceHash(root); h2 != hash {
		t.Errorf("source hash not stable: %s then %s", hash, h2)
	}
}
