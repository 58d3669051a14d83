// Package sdir is the per-user directory of nvg sessions and the files of one session in
// it: NAME.sock (the server's Unix socket, 0600), NAME.pid (the server's pid, flock'd by the
// server while it runs, so two servers of one name cannot run and a pid file nobody holds
// marks a dead server), NAME.log (the server's output), NAME.ckpt (the last checkpoint
// directory a session wrote).
//
// Where a server starts (Dir): $NVG_SESSION_DIR when set (Attach sets it for the servers it
// starts); else $XDG_RUNTIME_DIR/nvg when XDG_RUNTIME_DIR is set (and is not the stand-in
// package gpu sets, see MesaRuntimeDir); else /run/user/UID/nvg when /run/user/UID is this
// user's (systemd's per-user runtime directory, which XDG_RUNTIME_DIR names in a login
// session: a notebook kernel started without the variable lands where a terminal looks);
// else $TMPDIR/nvg-UID. Where clients look (Dirs): that directory first, then the others of
// that list that exist, so `nvg session ls`, Attach and Stop find a session whatever the
// environment of the process that started it — unless NVG_SESSION_DIR or an
// XDG_RUNTIME_DIR other than /run/user/UID names a directory of its own (a test's, a
// deliberate choice): then only that one. A directory is created 0700 (only Dir's) and
// refused when it exists with another owner, looser permissions, or as anything but a plain
// directory (a symlink is refused); a candidate that is refused is skipped by Dirs.
package sdir

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvDir is the environment variable that names the session directory outright; Attach
// sets it for the servers it starts, so a server finds the directory its client uses.
const EnvDir = "NVG_SESSION_DIR"

// MesaRuntimeDir is the XDG_RUNTIME_DIR that package gpu gives a process that has none when
// it opens a device (Mesa's Vulkan drivers warn without one): os.TempDir()/nvg-runtime-UID.
// Dir ignores it, so opening a GPU does not move the session directory of a process (the
// bench, a Go program with a Lab and a Client) from /tmp/nvg-UID. Keep the two in step.
func MesaRuntimeDir() string {
	return filepath.Join(os.TempDir(), "nvg-runtime-"+strconv.Itoa(os.Getuid()))
}

// RunUser is systemd's parent of the per-user runtime directories, /run/user (tests point
// it at a stand-in).
var RunUser = "/run/user"

// xdgRuntime is $XDG_RUNTIME_DIR, "" when unset or the stand-in package gpu sets.
func xdgRuntime() string {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != MesaRuntimeDir() {
		return x
	}
	return ""
}

// Dir returns the session directory where a server of this process starts (the package
// doc gives the order), creating it (0700) when missing, and checks it: a directory (not a
// symlink) owned by this user with no permission bits for group or others.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, Ensure(d)
	}
	dir := candidates()[0]
	return dir, Ensure(dir)
}

// candidates lists the session directories of the package doc's order, without
// NVG_SESSION_DIR: the first is Dir's; the others are where a process of this user with
// another environment would start its servers.
func candidates() []string {
	uid := strconv.Itoa(os.Getuid())
	var out []string
	add := func(d string) {
		for _, o := range out {
			if o == d {
				return
			}
		}
		out = append(out, d)
	}
	if x := xdgRuntime(); x != "" {
		add(filepath.Join(x, "nvg"))
	}
	if run := filepath.Join(RunUser, uid); Check(run) == nil {
		add(filepath.Join(run, "nvg"))
	}
	add(filepath.Join(os.TempDir(), "nvg-"+uid))
	return out
}

// Dirs returns the session directories a client looks in: Dir's (created if missing), then
// every other candidate of the package doc that exists and passes Check. With
// NVG_SESSION_DIR set, or XDG_RUNTIME_DIR set to another directory than
// /run/user/UID, Dir's is the only one.
func Dirs() ([]string, error) {
	first, err := Dir()
	if err != nil {
		return nil, err
	}
	out := []string{first}
	if x := xdgRuntime(); os.Getenv(EnvDir) != "" || x != "" && x != filepath.Join(RunUser, strconv.Itoa(os.Getuid())) {
		return out, nil
	}
	for _, d := range candidates()[1:] {
		if d != first && Check(d) == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// Find returns the files of session name: in the first directory of Dirs where its server
// runs (its pid file is held), else in the first where it left files (a dead server), else
// in Dir.
func Find(name string) (Files, error) {
	dirs, err := Dirs()
	if err != nil {
		return Files{}, err
	}
	for _, d := range dirs {
		if f := For(d, name); Held(f) {
			return f, nil
		}
	}
	for _, d := range dirs {
		f := For(d, name)
		if _, err := os.Lstat(f.Pid); err == nil {
			return f, nil
		}
		if _, err := os.Lstat(f.Sock); err == nil {
			return f, nil
		}
	}
	return For(dirs[0], name), nil
}

// Ensure creates dir with mode 0700 when it does not exist (its parent must) and checks it
// as Dir says.
func Ensure(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("session directory: %w", err)
	}
	return Check(dir)
}

// Check refuses dir unless it is a directory (not a symlink) owned by this process's user
// with mode 0700 or tighter.
func Check(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("session directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("session directory %s is not a directory (%s): refused; remove it", dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("session directory %s: cannot read its owner", dir)
	}
	if int(st.Uid) != os.Getuid() {
		return fmt.Errorf("session directory %s belongs to uid %d, not to you (uid %d): refused (another user could read or replace its sockets); remove it or set XDG_RUNTIME_DIR", dir, st.Uid, os.Getuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("session directory %s has mode %04o, want 0700: refused (other users could reach its sockets); chmod 700 it", dir, perm)
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckName refuses a session name that is not 1 to 64 letters, digits, '.', '_' or '-'
// starting with a letter or digit (it names files in the session directory).
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("bad session name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// Files are the paths of one session's files.
type Files struct {
	Name, Dir            string
	Sock, Pid, Log, Ckpt string
}

// For returns the files of session name in dir.
func For(dir, name string) Files {
	p := filepath.Join(dir, name)
	return Files{Name: name, Dir: dir, Sock: p + ".sock", Pid: p + ".pid", Log: p + ".log", Ckpt: p + ".ckpt"}
}

// Names lists the sessions that have a pid or socket file in dir, sorted.
func Names(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		n := e.Name()
		for _, ext := range []string{".pid", ".sock"} {
			if base, ok := strings.CutSuffix(n, ext); ok && CheckName(base) == nil && !seen[base] {
				seen[base] = true
				out = append(out, base)
			}
		}
	}
	return out, nil
}

// Lock is the held pid file of a running server.
type Lock struct{ f *os.File }

// ErrRunning is wrapped by Acquire's error when another server of the name holds the lock.
var ErrRunning = errors.New("session already running")

// Acquire takes the session's pid-file lock (flock, exclusive) and writes this process's
// pid into it. It fails with ErrRunning when another live process holds it. The lock
// lasts until Release or the process exits (the kernel drops it: a killed server never
// leaves a stale lock).
func Acquire(f Files) (*Lock, error) {
	for try := range 10 {
		fd, err := os.OpenFile(f.Pid, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			fd.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				// The holder is a server (its pid is in the file and alive: it runs) or
				// Held's brief probe of a dead session's file (retry a little).
				pid, _ := ReadPid(f)
				if pid > 0 && syscall.Kill(pid, 0) == nil || try >= 5 {
					return nil, fmt.Errorf("%w: session %q (pid %d)", ErrRunning, f.Name, pid)
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return nil, fmt.Errorf("lock %s: %w", f.Pid, err)
		}
		// The file may have been removed (by a server that just exited) between open and
		// lock: then our lock is on an unlinked inode; open the path again.
		var a, b syscall.Stat_t
		if syscall.Fstat(int(fd.Fd()), &a) == nil && syscall.Stat(f.Pid, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			if err := fd.Truncate(0); err != nil {
				fd.Close()
				return nil, err
			}
			if _, err := fd.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
				fd.Close()
				return nil, err
			}
			return &Lock{f: fd}, nil
		}
		fd.Close()
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced", f.Pid)
}

// Release removes the session's socket and pid file and drops the lock (a clean exit: the
// session no longer shows in `nvg session ls`).
func (l *Lock) Release(f Files) {
	os.Remove(f.Sock)
	os.Remove(f.Pid)
	l.f.Close()
}

// ReadPid reads the pid written in the session's pid file (0 when there is none).
func ReadPid(f Files) (int, error) {
	b, err := os.ReadFile(f.Pid)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", f.Pid, b)
	}
	return pid, nil
}

// Held reports whether a live process holds the session's pid-file lock (the server runs or
// is starting). A missing pid file is not held.
func Held(f Files) bool {
	fd, err := os.Open(f.Pid)
	if err != nil {
		return false
	}
	defer fd.Close()
	if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(fd.Fd()), syscall.LOCK_UN)
	return false
}

// Listen creates the session's socket, mode 0600 from its first moment: it listens on a
// temporary name, sets the mode, and renames it into place (replacing a stale socket). The
// caller holds the lock.
func Listen(f Files) (*net.UnixListener, error) {
	tmp := fmt.Sprintf("%s.%d.tmp", f.Sock, os.Getpid())
	os.Remove(tmp)
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, f.Sock); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, err
	}
	return l, nil
}
