package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// entries lists dir's file names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// onlyEntry fails unless dir holds exactly the file name (no temporary file is left).
func onlyEntry(t *testing.T, dir, name string) {
	t.Helper()
	if got := entries(t, dir); len(got) != 1 || got[0] != name {
		t.Fatalf("directory holds %q, want only %q", got, name)
	}
}

// TestWriteReplaces: a new file and a replaced one hold exactly what fill wrote (more than
// the 1 MiB buffer, so the buffer is flushed in between), with Mode whatever the old mode.
func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	want := make([]byte, 3<<20+17)
	for i := range want {
		want[i] = byte(i*7 + i>>11)
	}
	for round, mode := range []os.FileMode{0, 0o600} {
		if mode != 0 {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		err := Write(p, func(w io.Writer) error {
			for off := 0; off < len(want); off += 4096 { // many small writes
				if _, err := w.Write(want[off:min(off+4096, len(want))]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: read back %d bytes (%v), want the %d written", round, len(got), err, len(want))
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "windows" && st.Mode().Perm() != 0o644 {
			t.Errorf("round %d: mode %v, want -rw-r--r--", round, st.Mode().Perm())
		}
		onlyEntry(t, dir, "out.bin")
		want = want[:len(want)/2]
	}
}

// TestWriteBytes writes a small file and an empty one.
func TestWriteBytes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	for _, want := range []string{"{\"a\": 1}\n", ""} {
		if err := WriteBytes(p, []byte(want)); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Fatalf("read back %q (%v), want %q", got, err, want)
		}
	}
	onlyEntry(t, dir, "r.json")
}

// TestWriteFillFails: fill fails after writing part of the content (more than the buffer,
// so part of it reached the temporary file): the old file is intact, no temporary file is
// left, and the error names path and wraps fill's error.
func TestWriteFillFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.cmf")
	if err := os.WriteFile(p, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(p, func(w io.Writer) error {
		if _, err := w.Write(make([]byte, 2<<20)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "write "+p+": ") {
		t.Fatalf("error %v, want one naming %s and wrapping boom", err, p)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "old content" {
		t.Fatalf("old file now %q (%v)", got, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Errorf("old file's mode changed to %v", st.Mode().Perm())
	}
	onlyEntry(t, dir, "model.cmf")
}

// TestWriteRenameFails: the target is a non-empty directory, so the rename (the last step
// before the directory sync) fails: the directory is intact, no temporary file is left and
// the error names path.
func TestWriteRenameFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(p, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteBytes(p, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "write "+p+": ") {
		t.Fatalf("error %v, want one naming %s", err, p)
	}
	onlyEntry(t, dir, "taken")
	if got := entries(t, p); len(got) != 1 || got[0] != "inner" {
		t.Fatalf("target directory now holds %q", got)
	}
}

// TestWriteNoDirectory: a path in a missing directory is an error naming it, and fill is
// not called.
func TestWriteNoDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	called := false
	err := Write(p, func(io.Writer) error { called = true; return nil })
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "write "+p+": ") || called {
		t.Fatalf("error %v (fill called %v), want a not-exist error naming %s", err, called, p)
	}
}

// TestWriteReadOnlyDirectory: a directory the process may not write to is an error naming
// path, and the old file is intact (skipped where permissions do not bind: root, Windows).
func TestWriteReadOnlyDirectory(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		t.Skip("directory permissions do not bind here")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	err := WriteBytes(p, []byte("new"))
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "write "+p+": ") {
		t.Fatalf("error %v, want a permission error naming %s", err, p)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "old" {
		t.Fatalf("old file now %q (%v)", got, err)
	}
	onlyEntry(t, dir, "f")
}

// TestSyncDir: a directory syncs; a missing one is an error naming it.
func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "windows" {
		return
	}
	missing := filepath.Join(t.TempDir(), "gone")
	if err := SyncDir(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("SyncDir(missing) = %v, want an error naming %s", err, missing)
	}
}
