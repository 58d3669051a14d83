package session

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session/internal/rpc"
	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
)

// DefaultIdle is the idle timeout of a session server: it exits (freeing the GPU) when no
// call has run for this long.
const DefaultIdle = 3 * time.Hour

// AttachOption configures Attach and Start.
type AttachOption func(*attachConfig)

type attachConfig struct {
	bin          string
	idle         time.Duration
	noStart      bool
	startTimeout time.Duration
}

// IdleTimeout sets the idle timeout of a server that Attach or Start starts (0: never; by
// default DefaultIdle). A running server keeps its own.
func IdleTimeout(d time.Duration) AttachOption { return func(c *attachConfig) { c.idle = d } }

// Binary makes Attach and Start run the server from the nvg binary at path (instead of
// $NVG_BIN, nvg on PATH, or one built from source). nvg's own commands pass themselves.
func Binary(path string) AttachOption { return func(c *attachConfig) { c.bin = path } }

// NoStart makes Attach fail instead of starting a server when none runs.
func NoStart() AttachOption { return func(c *attachConfig) { c.noStart = true } }

// StartTimeout bounds how long Attach and Start wait for a server they started to answer
// (default 2 minutes: the first start may build nvg).
func StartTimeout(d time.Duration) AttachOption { return func(c *attachConfig) { c.startTimeout = d } }

func attachOptions(opts []AttachOption) attachConfig {
	c := attachConfig{idle: DefaultIdle, startTimeout: 2 * time.Minute}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Dir returns the per-user session directory where this process starts servers:
// $NVG_SESSION_DIR, else $XDG_RUNTIME_DIR/nvg, else /run/user/UID/nvg when that runtime
// directory is the user's, else $TMPDIR/nvg-UID; it is created with mode 0700. It is refused
// (an error saying why and what to do) when it exists with another owner, with permissions
// for group or others, or as a symlink.
func Dir() (string, error) { return sdir.Dir() }

// Dirs returns the session directories List, Attach and Stop look in: Dir first, then the
// other directories of Dir's list that exist (where a process of this user with another
// environment, say a notebook kernel without XDG_RUNTIME_DIR, starts its servers). With
// NVG_SESSION_DIR set, or XDG_RUNTIME_DIR set to another directory than /run/user/UID (a
// test's), only Dir.
func Dirs() ([]string, error) { return sdir.Dirs() }

// ErrNotAnswering is wrapped by the error of Attach, Stop or a Client's call whose session
// server accepts connections but does not answer in time: its process is stopped (SIGSTOP,
// Ctrl-Z) or hung. List reports such a server with ServerStatus.Err set.
var ErrNotAnswering = rpc.ErrNoAnswer

// Attach connects to the running session called name, starting its server when none runs
// (unless NoStart): the nvg binary $NVG_BIN, else `nvg` on PATH, else one built with `go
// build` from this module's source into the session directory (once per source version) runs
// `nvg session serve NAME` detached, logging to NAME.log in the session directory. Names are
// 1 to 64 letters, digits, '.', '_' or '-'.
//
// A session running in another session directory (Dirs) is attached there.
//
// A new server holds no state: call Setup (a notebook's first cell does; on a server that is
// already set up with an equal Setup it is a no-op). When the previous server of the name
// died, Attach says so on stderr, with its log file. A server that runs but does not answer
// (stopped with SIGSTOP, hung) fails Attach within a few seconds with an error wrapping
// ErrNotAnswering that says what to do.
func Attach(name string, opts ...AttachOption) (*Client, error) {
	cfg := attachOptions(opts)
	f, err := files(name)
	if err != nil {
		return nil, err
	}
	c, dialErr := attachRunning(f)
	if dialErr == nil {
		return c, nil
	}
	if errors.Is(dialErr, rpc.ErrNoAnswer) {
		return nil, notAnswering(f, dialErr)
	}
	if sdir.Held(f) { // a server is starting: wait for its socket
		return waitAttach(f, cfg.startTimeout, nil)
	}
	if cfg.noStart {
		msg := fmt.Sprintf("session %q is not running (start it with `nvg session start %s`, or Attach without NoStart; connecting said: %v)", name, name, dialErr)
		if _, err := os.Stat(f.Pid); err == nil {
			msg += fmt.Sprintf("; its last server died: see %s", f.Log)
		}
		return nil, errors.New(msg)
	}
	if _, err := os.Stat(f.Pid); err == nil {
		fmt.Fprintf(os.Stderr, "session %q: the previous server died (its log: %s); starting a new one\n", name, f.Log)
	}
	exited, err := spawn(f, cfg.bin, cfg.idle)
	if err != nil {
		return nil, err
	}
	return waitAttach(f, cfg.startTimeout, exited)
}

// Start starts the server of session name unless one runs, and waits until it answers.
func Start(name string, opts ...AttachOption) error {
	c, err := Attach(name, opts...)
	if err != nil {
		return err
	}
	return c.Close()
}

// CheckName reports why name cannot name a session (nil when it can): a name is 1 to 64
// letters, digits, '.', '_' or '-', starting with a letter or digit, because it becomes a file
// name in the session directory. Attach, Start and Stop check it too.
func CheckName(name string) error { return sdir.CheckName(name) }

// files returns the files of session name: where it runs or left files (sdir.Find), else
// in Dir.
func files(name string) (sdir.Files, error) {
	if err := sdir.CheckName(name); err != nil {
		return sdir.Files{}, fmt.Errorf("session: %w", err)
	}
	f, err := sdir.Find(name)
	if err != nil {
		return sdir.Files{}, fmt.Errorf("session: %w", err)
	}
	return f, nil
}

// processState describes the state of process pid from /proc/PID/stat: "stopped" (SIGSTOP,
// Ctrl-Z, a debugger), "gone", or "" (running or unknown).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "gone"
		}
		return ""
	}
	// pid (comm) S …: the state follows the last ')' (comm may hold spaces and parentheses).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	switch b[i+2] {
	case 'T', 't':
		return "stopped"
	case 'Z', 'X':
		return "gone"
	}
	return ""
}

// hung says, for a message, why the server pid does not answer and what to do.
func hung(f sdir.Files, pid int) string {
	if processState(pid) == "stopped" {
		return fmt.Sprintf("its process is stopped (SIGSTOP or Ctrl-Z): `kill -CONT %d` resumes it; `nvg session stop %s` ends it", pid, f.Name)
	}
	return fmt.Sprintf("its process is hung or overloaded (see its log %s); `nvg session stop %s` ends it", f.Log, f.Name)
}

// notAnswering is Attach's error for a server that holds the session but does not answer.
func notAnswering(f sdir.Files, _ error) error {
	pid, _ := sdir.ReadPid(f)
	return fmt.Errorf("session %q: %w (pid %d, no answer within %s): %s", f.Name, rpc.ErrNoAnswer, pid, rpc.DefaultTimeout, hung(f, pid))
}

func attachRunning(f sdir.Files) (*Client, error) {
	rc, err := dial(f)
	if err != nil {
		return nil, err
	}
	// A refusal comes on the first exchange: ask for the status now.
	if _, err := rc.Status(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("session %q: %w", f.Name, err)
	}
	return &Client{files: f, rc: rc, pid: rc.ServerPid}, nil
}

// waitAttach dials until the server answers, the process it started exits (exited), or
// the timeout passes.
func waitAttach(f sdir.Files, timeout time.Duration, exited <-chan error) (*Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := attachRunning(f)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, rpc.ErrRefused) {
			return nil, err
		}
		if pid, _ := sdir.ReadPid(f); pid > 0 && processState(pid) == "stopped" {
			return nil, notAnswering(f, err)
		}
		select {
		case werr := <-exited:
			exited = nil
			// It may have lost the race to another server of the name: wait for that one.
			if !sdir.Held(f) {
				if c, err := attachRunning(f); err == nil {
					return c, nil
				}
				return nil, fmt.Errorf("session %q: the server exited at start (%v); its log %s ends:\n%s", f.Name, werr, f.Log, logTail(f.Log, 10))
			}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("session %q: the server did not answer within %s (last error: %v); see its log %s", f.Name, timeout, err, f.Log)
		}
	}
}

// spawn starts `nvg session serve NAME --idle D` detached (its own session, stdin
// /dev/null, stdout and stderr appended to the log) and returns a channel that receives
// its exit status if it exits while this process runs.
func spawn(f sdir.Files, bin string, idle time.Duration) (<-chan error, error) {
	if bin == "" {
		var err error
		if bin, err = nvgBinary(f.Dir); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(f.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("session %q: log file: %w", f.Name, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "session", "serve", f.Name, "--idle", idle.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), sdir.EnvDir+"="+f.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("session %q: start %s: %w", f.Name, bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

// nvgBinary finds the nvg binary that serves sessions: $NVG_BIN, else nvg on PATH, else
// one built from this module's source into dir (nvg-<source hash>), built once.
func nvgBinary(dir string) (string, error) {
	if b := os.Getenv("NVG_BIN"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("nvg"); err == nil {
		return b, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("session: no nvg binary to start the server: NVG_BIN is not set, nvg is not on PATH, and %v", err)
	}
	hash, err := cachedSourceHash(root, filepath.Join(dir, "source-hash.json"))
	if err != nil {
		return "", fmt.Errorf("session: hash the source at %s: %w", root, err)
	}
	bin := filepath.Join(dir, "nvg-"+hash)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// One build at a time (another cell may be building the same binary).
	lk, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", err
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	fmt.Fprintf(os.Stderr, "session: building nvg from %s (once per source version; set NVG_BIN to skip)\n", root)
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd/nvg")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("session: go build ./cmd/nvg in %s: %v\n%s", root, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	removeOldBinaries(dir, bin)
	return bin, nil
}

// removeOldBinaries deletes the nvg-<hash> binaries of other source versions in dir (under
// the build lock; a server still running from one keeps its open executable), so the
// session directory holds one ~40 MB binary, not one per edit of the source.
func removeOldBinaries(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "nvg-*"))
	for _, f := range old {
		if f != keep && !strings.HasSuffix(f, ".tmp") {
			os.Remove(f)
		}
	}
}

// moduleRoot finds the source of this module: the directory two levels above this file
// when the binary was built from a checkout (GoNB cells are), else `go list -m`.
func moduleRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/nvg-project/nvg\n") {
			return root, nil
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nvg-project/nvg").Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		return "", errors.New("the nvg module's source was not found (build nvg and put it on PATH or in NVG_BIN)")
	}
	return strings.TrimSpace(string(out)), nil
}

// ServerStatus is one session as `nvg session ls` shows it.
type ServerStatus struct {
	// Name is the session's name; Pid its server's process id (0 when unknown).
	Name string
	Pid  int
	// Alive is true when the server runs; false when it died (a pid file nobody holds).
	Alive bool
	// Busy is the method running now ("" when idle); Calls the calls served.
	Busy  string
	Calls int
	// Started is when the server started, IdleFor how long since its last call ended (0
	// while a call runs), Idle its idle timeout (0: none).
	Started time.Time
	IdleFor time.Duration
	Idle    time.Duration
	// Note is the server's summary of its state ("step 12 of 24", "step 30 (past the 24
	// planned)" or "not set up").
	Note string
	// Dir is the session directory it was found in (Dirs), Log its log file.
	Dir string
	Log string
	// Err says why a live server could not be asked (not empty: the other fields but Name,
	// Pid, Alive, Dir and Log are zero). A server that does not answer within a few seconds
	// (stopped with SIGSTOP, hung) gets "no answer within 3s: …" with what to do, and
	// NotAnswering.
	Err          string
	NotAnswering bool
}

// List returns the sessions of the session directories (Dirs), sorted by name (then
// directory): the running ones, each asked for its status at once (one that does not
// answer within a few seconds is reported, not waited for), and the dead ones (a server
// that did not exit cleanly).
func List() ([]ServerStatus, error) {
	dirs, err := sdir.Dirs()
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	var out []ServerStatus
	for _, dir := range dirs {
		names, err := sdir.Names(dir)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			f := sdir.For(dir, n)
			pid, _ := sdir.ReadPid(f)
			out = append(out, ServerStatus{Name: n, Pid: pid, Alive: sdir.Held(f), Dir: dir, Log: f.Log})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		if out[i].Alive {
			wg.Add(1)
			go func(st *ServerStatus) {
				defer wg.Done()
				askStatus(st)
			}(&out[i])
		}
	}
	wg.Wait()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// askStatus fills st from its server's status, or says why it could not be asked.
func askStatus(st *ServerStatus) {
	f := sdir.For(st.Dir, st.Name)
	rc, err := dial(f)
	if err == nil {
		var s rpc.Status
		s, err = rc.Status()
		rc.Close()
		if err == nil {
			st.Pid, st.Busy, st.Calls, st.Started, st.IdleFor, st.Idle, st.Note = s.Pid, s.Busy, s.Calls, s.Started, time.Since(s.LastActive), s.Idle, s.Note
			if s.Busy != "" { // a call runs: not idle (LastActive is when the last call ended)
				st.IdleFor = 0
			}
			return
		}
	}
	if errors.Is(err, rpc.ErrNoAnswer) {
		st.NotAnswering = true
		st.Err = fmt.Sprintf("no answer within %s: %s", rpc.DefaultTimeout, hung(f, st.Pid))
		return
	}
	st.Err = err.Error()
}

// Stop ends the server of session name and waits until it has exited (its GPU memory is
// freed with its process), for at most timeout: it asks the server to stop (a call running
// stops at its next step boundary); when the server does not answer that request (stopped,
// hung) it sends it SIGTERM, which the server handles the same way; when it has not exited
// by the timeout, the error says so, what state its process is in and what to do (Stop never
// kills it: its state would be lost). A dead session's leftover files are removed (its log is
// kept). Stopping a session that does not exist is an error.
func Stop(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	f, err := files(name)
	if err != nil {
		return err
	}
	if !sdir.Held(f) {
		_, perr := os.Stat(f.Pid)
		_, serr := os.Stat(f.Sock)
		if perr != nil && serr != nil {
			return fmt.Errorf("session %q is not running", name)
		}
		os.Remove(f.Sock)
		os.Remove(f.Pid)
		return nil
	}
	pid, _ := sdir.ReadPid(f)
	asked := "a stop request"
	cfg := dialConfig()
	cfg.Timeout = max(min(rpc.DefaultTimeout, timeout/2), time.Millisecond) // leave time for SIGTERM
	rc, err := rpc.Dial(f.Sock, cfg)
	if err == nil && rc.ServerUID != os.Getuid() {
		rc.Close()
		return fmt.Errorf("session %q: the process listening on %s runs as uid %d, not as you (uid %d): refused", name, f.Sock, rc.ServerUID, os.Getuid())
	}
	if err == nil {
		pid = rc.ServerPid
		_, err = rc.Stop()
		rc.Close()
	}
	if err != nil {
		if pid <= 0 {
			return fmt.Errorf("session %q: cannot reach its server (%v) and its pid file %s names no process (its log: %s)", name, err, f.Pid, f.Log)
		}
		// SIGTERM: the server stops as on a stop request (it is delivered when a stopped
		// process resumes).
		if kerr := syscall.Kill(pid, syscall.SIGTERM); kerr != nil {
			return fmt.Errorf("session %q: the stop request failed (%v) and SIGTERM to pid %d too: %v (its log: %s)", name, err, pid, kerr, f.Log)
		}
		asked = fmt.Sprintf("SIGTERM (the stop request failed: %v)", err)
	}
	for {
		if p, _ := sdir.ReadPid(f); p != pid || !sdir.Held(f) {
			return nil // it exited (a server started since is another one)
		}
		if time.Now().After(deadline) {
			why := fmt.Sprintf("a long call may be finishing its step, or the process is hung (see its log %s); `kill -KILL %d` ends it now, losing its state", f.Log, pid)
			if processState(pid) == "stopped" {
				why = fmt.Sprintf("its process is stopped (SIGSTOP or Ctrl-Z): it exits when resumed (`kill -CONT %d`), or `kill -KILL %d` ends it now, losing its state", pid, pid)
			}
			return fmt.Errorf("session %q: the server (pid %d) did not exit within %s of %s: %s", name, pid, timeout, asked, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
