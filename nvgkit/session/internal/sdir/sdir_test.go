package sdir

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestDirIgnoresGPURuntimeDir checks the session directory's sources in order: NVG_SESSION_DIR,
// then XDG_RUNTIME_DIR unless it is the stand-in package gpu sets when it opens a device (a
// process that opened a GPU before attaching would otherwise look for its sessions elsewhere:
// nvg session bench failed so), then /tmp/nvg-UID.
func TestDirIgnoresGPURuntimeDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(EnvDir, "")
	want := filepath.Join(tmp, "nvg-"+strconv.Itoa(os.Getuid()))
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(tmp, "nvg-runtime-"+strconv.Itoa(os.Getuid())))
	if d, err := Dir(); err != nil || d != want {
		t.Errorf("with gpu's stand-in XDG_RUNTIME_DIR: Dir = %q, %v; want %q", d, err, want)
	}
	xdg := filepath.Join(tmp, "xdg")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if d, err := Dir(); err != nil || d != filepath.Join(xdg, "nvg") {
		t.Errorf("with a user's XDG_RUNTIME_DIR: Dir = %q, %v; want %q", d, err, filepath.Join(xdg, "nvg"))
	}
	explicit := filepath.Join(tmp, "explicit")
	t.Setenv(EnvDir, explicit)
	if d, err := Dir(); err != nil || d != explicit {
		t.Errorf("with %s: Dir = %q, %v; want %q", EnvDir, d, err, explicit)
	}
	if fi, err := os.Stat(explicit); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s not created 0700: %v %v", explicit, fi, err)
	}
}
