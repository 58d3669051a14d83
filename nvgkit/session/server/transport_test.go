package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
)

func tinySetup() session.Setup {
	s := session.DefaultSetup()
	s.Train.Steps, s.Train.NB, s.Train.T, s.Train.EvalWindows = 4, 2, 16, 2
	s.Init, s.Train.HiddenLoss = "dual-svid", "" // the quality defaults cost ~45 s a setup on 2 cores
	return s
}

// TestPermissions: the session directory is 0700 and the socket, pid file and log 0600; a
// directory left with mode 0777, one of another owner and a symlink are refused.
func TestPermissions(t *testing.T) {
	dir := useSessionDir(t, "fake")
	c := attach(t, "perm")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	f := sdir.For(dir, "perm")
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{dir, os.ModeDir | 0o700}, {f.Sock, os.ModeSocket | 0o600}, {f.Pid, 0o600}, {f.Log, 0o600}} {
		fi, err := os.Lstat(p.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != p.mode {
			t.Errorf("%s: mode %v, want %v", p.path, fi.Mode(), p.mode)
		}
	}

	// A pre-existing directory with mode 0777 is refused by clients and servers alike.
	loose := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", loose)
	if err := os.Mkdir(filepath.Join(loose, "nvg"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(loose, "nvg"), 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := session.Attach("perm2", session.NoStart())
	if err == nil || !strings.Contains(err.Error(), "has mode 0777, want 0700: refused") {
		t.Errorf("Attach in a 0777 directory: %v", err)
	}
	if err := Serve("perm2", &fakeLab{}, Config{}); err == nil || !strings.Contains(err.Error(), "has mode 0777") {
		t.Errorf("Serve in a 0777 directory: %v", err)
	}

	// Another owner: as root, a directory given to uid 65534; otherwise a directory root owns.
	other := filepath.Join(t.TempDir(), "nvg")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	want := "belongs to uid 65534"
	if os.Getuid() == 0 {
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		other, want = "/", "belongs to uid 0"
	}
	if err := sdir.Check(other); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("directory of another owner: %v, want %q", err, want)
	}
	if os.Getuid() == 0 {
		t.Setenv("XDG_RUNTIME_DIR", filepath.Dir(other))
		if _, err := session.Attach("perm3"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Attach in a directory of another owner: %v", err)
		}
	}

	// A symlink to a good directory is refused too (it could be swapped).
	link := t.TempDir()
	good := t.TempDir()
	if err := os.Chmod(good, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, filepath.Join(link, "nvg")); err != nil {
		t.Fatal(err)
	}
	if err := sdir.Check(filepath.Join(link, "nvg")); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a symlinked session directory: %v", err)
	}
	if err := sdir.CheckName("../x"); err == nil {
		t.Error("session name ../x accepted")
	}
}

// TestSecondUser: a process of another user cannot attach. As root the test runs a child
// as uid 65534: the 0700 directory stops it at connect; with the directory and socket
// opened up on purpose, the server's peer check refuses it. In any case (root or not) a
// server allowing a uid other than ours refuses this process.
func TestSecondUser(t *testing.T) {
	dir := useSessionDir(t, "fake")
	if os.Getuid() == 0 {
		c := attach(t, "user")
		if _, err := c.Setup(tinySetup()); err != nil {
			t.Fatal(err)
		}
		f := sdir.For(dir, "user")
		exe := copyExecutable(t)
		run := func() string {
			cmd := exec.Command(exe)
			cmd.Env = []string{"NVG_TEST_CHILD=dial", "NVG_TEST_SOCK=" + f.Sock, "PATH=/usr/bin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child as uid 65534: %v\n%s", err, out)
			}
			return string(out)
		}
		if out := run(); !strings.Contains(out, "dial error") || !strings.Contains(out, "permission denied") {
			t.Errorf("uid 65534 dialling through the 0700 directory: %q, want permission denied", out)
		}
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(f.Sock, 0o666); err != nil {
			t.Fatal(err)
		}
		out := run()
		os.Chmod(f.Sock, 0o600)
		os.Chmod(dir, 0o700)
		os.Chmod(filepath.Dir(dir), 0o700)
		if !strings.Contains(out, "refused=true") || !strings.Contains(out, "runs as uid 65534, this session belongs to uid 0") {
			t.Errorf("uid 65534 through an opened socket: %q, want refused by the peer check", out)
		}
		if log, _ := os.ReadFile(f.Log); !strings.Contains(string(log), "runs as uid 65534") {
			t.Errorf("the server's log does not record the refusal:\n%s", log)
		}
		if info, err := c.Info(); err != nil || info.Step != 0 || !info.Ready {
			t.Errorf("the owner's session after the refusals: %+v, %v", info, err)
		}
	}

	other := os.Getuid() + 1
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- Serve("allow", &fakeLab{}, Config{AllowUID: &other, Stop: stop, Log: io.Discard}) }()
	waitFor(t, "the in-process server", func() bool { _, err := os.Stat(filepath.Join(dir, "allow.sock")); return err == nil })
	_, err := session.Attach("allow", session.NoStart())
	close(stop)
	if !errors.Is(err, session.ErrRefused) || !strings.Contains(err.Error(), "this session belongs to uid") {
		t.Errorf("Attach to a server allowing uid %d: %v, want refused by the peer check", other, err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// copyExecutable copies the test binary where uid 65534 can run it.
func copyExecutable(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.MkdirTemp(systemTemp, "nvg-exe-") // not the test's TMPDIR: a 0700 directory
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, "server.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKilledClient: a client killed (SIGKILL) in the middle of a long Step leaves the
// session consistent: the server stops the call at a step boundary, and the next client
// finds a step counter and parameters equal to those of a run of that many whole steps.
// A client interrupted with SIGINT gets ErrInterrupted and the session keeps its state.
func TestKilledClient(t *testing.T) {
	useSessionDir(t, "fake")
	c := attach(t, "killed")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
		before, err := c.Info()
		if err != nil {
			t.Fatal(err)
		}
		cmd, out := child(t, "killed", "step", "NVG_TEST_STEPS=100000")
		waitFor(t, "the child's first steps", func() bool { return strings.Count(out.String(), "progress") >= 2 })
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		werr := cmd.Wait()
		k := atBoundary(t, c, fmt.Sprintf("after %v of a client", sig), before.Step, 100000)
		if sig == syscall.SIGINT {
			if werr != nil || !strings.Contains(out.String(), "interrupted=true") {
				t.Errorf("SIGINT'd client: %v\n%s", werr, out)
			}
			if n := strings.Count(out.String(), "progress"); !strings.Contains(out.String(), "steps=") || n < 2 {
				t.Errorf("SIGINT'd client printed:\n%s", out)
			}
			// Step returns the steps it did (issue 34: an interrupted Step through a session
			// returned none).
			if want := fmt.Sprintf("steps=%d interrupted=true", k-before.Step); !strings.Contains(out.String(), want) {
				t.Errorf("SIGINT'd client printed:\n%s\nwant %q (the session's step counter moved from %d to %d)", out, want, before.Step, k)
			}
		}
	}
	if sts, err := c.Step(2); err != nil || len(sts) != 2 {
		t.Errorf("Step(2) after the killed clients: %v, %v", sts, err)
	}
}

// TestDeadServer: when the server dies, the next call says so and names its log file; a
// new Attach starts a new server.
func TestDeadServer(t *testing.T) {
	dir := useSessionDir(t, "fake")
	c := attach(t, "dead")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(c.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f := sdir.For(dir, "dead")
	waitFor(t, "the server's death", func() bool { return !sdir.Held(f) })
	for i := 0; i < 2; i++ { // the first call finds the broken connection, the second remembers
		_, err := c.Info()
		if !errors.Is(err, session.ErrServerDied) || !strings.Contains(err.Error(), f.Log) {
			t.Errorf("call %d after the server died: %v, want ErrServerDied naming %s", i, err, f.Log)
		}
	}
	// A later call of another method is reported under its own name (it said "Info").
	if _, err := c.Step(1); !errors.Is(err, session.ErrServerDied) || !strings.Contains(err.Error(), ": Step: ") {
		t.Errorf("Step after the server died: %v, want ErrServerDied under Step's name", err)
	}
	if ls := listIn(t, dir); len(ls) != 1 || ls[0].Alive || ls[0].Name != "dead" {
		t.Errorf("List after the death: %+v", ls)
	}
	c2 := attach(t, "dead")
	if c2.Pid() == c.Pid() {
		t.Fatal("Attach did not start a new server")
	}
	if info, err := c2.Info(); err != nil || info.Ready {
		t.Errorf("the new server: %+v, %v; want a fresh, not set up lab", info, err)
	}
}

// TestLifecycle: List shows a running session with its state; a bad request is refused
// clearly and leaves the state; Stop ends the server and removes its files.
func TestLifecycle(t *testing.T) {
	dir := useSessionDir(t, "fake")
	c := attach(t, "life")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(3); err != nil {
		t.Fatal(err)
	}
	// Refused requests: bad arguments, an unserved method, a method the lab lacks (it panics).
	if err := c.SetParam("a", []float32{1}); err == nil || !strings.Contains(err.Error(), "has 3 values, got 1") {
		t.Errorf("SetParam with a wrong length: %v", err)
	}
	if _, err := c.Names(); err == nil || !strings.Contains(err.Error(), "internal error in Names") {
		t.Errorf("a method that panics: %v", err)
	}
	if _, err := c.Setup(session.Setup{}); err == nil || !strings.Contains(err.Error(), "BitsPerWeight") {
		t.Errorf("an invalid Setup: %v", err)
	}
	info, err := c.Info()
	wa, _ := fakeState(3)
	a, _ := c.Param("a")
	if err != nil || info.Step != 3 || !reflect.DeepEqual(a, wa) {
		t.Errorf("state after the refused requests: step %d, a %v, %v; want 3, %v", info.Step, a, err, wa)
	}
	// Two cells attaching at once to a session that does not run yet start one server.
	pids := make(chan int, 2)
	for range 2 {
		go func() {
			cl, err := session.Attach("life2", session.IdleTimeout(10*time.Minute))
			if err != nil {
				t.Error(err)
				pids <- 0
				return
			}
			pids <- cl.Pid()
			cl.Close()
		}()
	}
	if p1, p2 := <-pids, <-pids; p1 != p2 || p1 == 0 {
		t.Errorf("two concurrent Attach: server pids %d and %d, want one server", p1, p2)
	}
	// Two sessions are two processes.
	c2 := attach(t, "life2")
	if c2.Pid() == c.Pid() {
		t.Error("two sessions share a server")
	}
	if ls := listIn(t, dir); len(ls) != 2 || !ls[0].Alive || ls[0].Name != "life" || ls[0].Note != "step 3 of 4" || ls[1].Note != "not set up" {
		t.Fatalf("List = %+v", ls)
	}
	// Past the plan the note says so (a session may step on after Setup's Steps).
	if _, err := c.Step(2); err != nil {
		t.Fatal(err)
	}
	if ls := listIn(t, dir); len(ls) != 2 || ls[0].Note != "step 5 (past the 4 planned)" || ls[0].IdleFor < 0 {
		t.Fatalf("List after stepping past the plan = %+v", ls)
	}
	if err := session.Stop("life", time.Minute); err != nil {
		t.Fatal(err)
	}
	f := sdir.For(dir, "life")
	for _, p := range []string{f.Sock, f.Pid} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Stop: %v, want removed", p, err)
		}
	}
	if _, err := c.Info(); !errors.Is(err, session.ErrServerDied) {
		t.Errorf("a call after Stop: %v", err)
	}
	if err := session.Stop("life", time.Minute); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Stop of a stopped session: %v", err)
	}
}

// A long call given no progress option still reports on standard error (issue 34: GradCheck
// ran 33 s in a cell with no output): 350 steps of 20 ms through a real server print a
// line once 5 s have passed, and the end; the call's result is unchanged.
func TestLongCallReportsWithoutProgressOption(t *testing.T) {
	useSessionDir(t, "fake")
	c := attach(t, "quiet")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	cmd, out := child(t, "quiet", "quietstep", "NVG_TEST_STEPS=350")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := out.String()
	if !strings.Contains(got, "steps=350 err=<nil>") || !strings.Contains(got, `session "quiet": Step: step `) ||
		!strings.Contains(got, `session "quiet": Step: step 350/350`) || !strings.Contains(got, "ui.NewLive") {
		t.Errorf("the child printed:\n%s\nwant a progress line after 5 s with the hint, and the end", got)
	}
}
