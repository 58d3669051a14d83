package diskspace

import (
	"path/filepath"
	"runtime"
	"testing"
)

// TestAvailable: a temporary directory's file system reports some free space; a missing
// directory is an error.
func TestAvailable(t *testing.T) {
	b, ok, err := Available(t.TempDir())
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		if ok || err != nil {
			t.Fatalf("Available on %s: %d, %v, %v; want not reported", runtime.GOOS, b, ok, err)
		}
		return
	}
	if err != nil || !ok || b <= 0 {
		t.Fatalf("Available(temp dir) = %d, %v, %v; want > 0 bytes", b, ok, err)
	}
	if _, _, err := Available(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Available(missing dir): no error")
	}
}
