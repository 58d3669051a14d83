package sdir

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// isolate points every candidate directory into a fresh temporary directory: TMPDIR, the
// parent of the per-user runtime directories, and no NVG_SESSION_DIR or XDG_RUNTIME_DIR.
func isolate(t *testing.T) (tmp, run string) {
	t.Helper()
	tmp = t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(EnvDir, "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	run = filepath.Join(tmp, "run-user")
	old := RunUser
	RunUser = run
	t.Cleanup(func() { RunUser = old })
	return tmp, filepath.Join(run, strconv.Itoa(os.Getuid()))
}

// TestDirIgnoresGPURuntimeDir checks the session directory's sources in order: NVG_SESSION_DIR,
// then XDG_RUNTIME_DIR unless it is the stand-in package gpu sets when it opens a device (a
// process that opened a GPU before attaching would otherwise look for its sessions elsewhere:
// nvg session bench failed so), then (with no /run/user/UID) $TMPDIR/nvg-UID.
func TestDirIgnoresGPURuntimeDir(t *testing.T) {
	tmp, _ := isolate(t)
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
	if ds, err := Dirs(); err != nil || !reflect.DeepEqual(ds, []string{explicit}) {
		t.Errorf("with %s: Dirs = %q, %v; want only it", EnvDir, ds, err)
	}
}

// TestSessionsFoundAcrossEnvironments: a session started by a process without
// XDG_RUNTIME_DIR (a notebook kernel) is found by one with it (a terminal) and the other way
// round. Without the variable a process uses /run/user/UID/nvg when that directory is the
// user's (what the variable names in a login session); a client looks in its own directory
// and then in the others; the first running server of the name wins, a dead one's files are
// found too. An XDG_RUNTIME_DIR of its own (not /run/user/UID: a test's) keeps a process to
// its directory.
func TestSessionsFoundAcrossEnvironments(t *testing.T) {
	tmp, run := isolate(t)
	tmpDir := filepath.Join(tmp, "nvg-"+strconv.Itoa(os.Getuid()))

	// No runtime directory at all: TMPDIR/nvg-UID, alone.
	if ds, err := Dirs(); err != nil || !reflect.DeepEqual(ds, []string{tmpDir}) {
		t.Fatalf("no XDG_RUNTIME_DIR, no /run/user/UID: Dirs = %q, %v; want [%s]", ds, err, tmpDir)
	}
	// A notebook kernel started before the login session existed left a server there.
	old, err := Acquire(For(tmpDir, "early"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release(For(tmpDir, "early"))

	// The login session's runtime directory appears; the kernel (no XDG_RUNTIME_DIR) now
	// starts its servers there, where a terminal with XDG_RUNTIME_DIR=/run/user/UID looks.
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(run, "nvg")
	if d, err := Dir(); err != nil || d != runDir {
		t.Fatalf("no XDG_RUNTIME_DIR, /run/user/UID present: Dir = %q, %v; want %s", d, err, runDir)
	}
	nb, err := Acquire(For(runDir, "nb"))
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Release(For(runDir, "nb"))

	t.Setenv("XDG_RUNTIME_DIR", run) // the terminal
	if ds, err := Dirs(); err != nil || !reflect.DeepEqual(ds, []string{runDir, tmpDir}) {
		t.Errorf("terminal: Dirs = %q, %v; want [%s %s]", ds, err, runDir, tmpDir)
	}
	for name, want := range map[string]string{"nb": runDir, "early": tmpDir, "none": runDir} {
		if f, err := Find(name); err != nil || f.Dir != want {
			t.Errorf("terminal: Find(%q) in %q, %v; want %s", name, f.Dir, err, want)
		}
	}
	// A process with an XDG_RUNTIME_DIR of its own looks there only.
	other := filepath.Join(tmp, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", other)
	if ds, err := Dirs(); err != nil || !reflect.DeepEqual(ds, []string{filepath.Join(other, "nvg")}) {
		t.Errorf("an XDG_RUNTIME_DIR of its own: Dirs = %q, %v; want only its nvg", ds, err)
	}
	// A dead server's files (a pid file nobody holds) are found where they are.
	t.Setenv("XDG_RUNTIME_DIR", "")
	if err := os.WriteFile(For(tmpDir, "dead").Pid, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Find("dead"); err != nil || f.Dir != tmpDir {
		t.Errorf("Find(dead) in %q, %v; want %s (its files)", f.Dir, err, tmpDir)
	}
	// A refused candidate (mode 0777) is skipped, not an error.
	if err := os.Chmod(tmpDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if ds, err := Dirs(); err != nil || !reflect.DeepEqual(ds, []string{runDir}) {
		t.Errorf("with a 0777 candidate: Dirs = %q, %v; want [%s]", ds, err, runDir)
	}
}
