package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
	"github.com/nvg-project/nvg/testkit/proctest"
)

// within runs f and fails t when it took longer than limit (the bound a frozen server must
// not break: before, each of these waited forever).
func within(t *testing.T, what string, limit time.Duration, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if d := time.Since(start); d > limit {
		t.Errorf("%s took %s, want at most %s", what, d.Round(time.Millisecond), limit)
	}
}

// TestFrozenServer: a session server stopped with SIGSTOP (as a stuck process would be)
// hangs no client. A Step running when it froze fails within its reply timeout with
// ErrNotAnswering; `nvg session ls` (List) reports it as not answering within seconds, with
// what to do; Attach fails as fast with a clear error; after SIGCONT the session answers
// again with its state intact (the abandoned Step stopped at a step boundary). Frozen again,
// Stop honours its timeout: it sends SIGTERM when the stop request gets no answer and
// reports the stopped process; resumed, the server exits.
func TestFrozenServer(t *testing.T) {
	dir := useSessionDir(t, "fake")
	c := attach(t, "frozen")
	if _, err := c.Setup(tinySetup()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Step(2); err != nil {
		t.Fatal(err)
	}
	pid := c.Pid()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })

	// A long Step is running when the server freezes.
	stepped := make(chan error, 1)
	progress := make(chan int, 1000)
	go func() {
		_, err := c.Step(100000, session.OnProgress(func(p session.Progress) { progress <- p.Done }))
		stepped <- err
	}()
	<-progress
	proctest.Stop(t, pid)
	frozeAt := time.Now()
	select {
	case err := <-stepped:
		if !errors.Is(err, session.ErrNotAnswering) || !strings.Contains(err.Error(), "sent nothing for 10s") || !strings.Contains(err.Error(), "it is stopped (SIGSTOP) or hung") {
			t.Errorf("Step when the server froze: %v, want ErrNotAnswering after 10 s of silence", err)
		}
		if d := time.Since(frozeAt); d < 9*time.Second || d > 25*time.Second {
			t.Errorf("the frozen Step returned after %s, want about 10 s (its reply timeout)", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("a Step whose server froze did not return within a minute")
	}

	within(t, "List of a frozen server", 8*time.Second, func() {
		ls := listIn(t, dir)
		want := fmt.Sprintf("no answer within 3s: its process is stopped (SIGSTOP or Ctrl-Z): `kill -CONT %d` resumes it; `nvg session stop frozen` ends it", pid)
		if len(ls) != 1 || !ls[0].Alive || !ls[0].NotAnswering || ls[0].Err != want || ls[0].Pid != pid {
			t.Errorf("List of a frozen server: %+v, want alive, not answering: %q", ls, want)
		}
	})
	for _, opts := range [][]session.AttachOption{{session.NoStart()}, nil} {
		within(t, "Attach to a frozen server", 10*time.Second, func() {
			_, err := session.Attach("frozen", opts...)
			want := fmt.Sprintf(`session "frozen": the session server is not answering (pid %d, no answer within 3s): its process is stopped (SIGSTOP or Ctrl-Z): `+"`kill -CONT %d`", pid, pid)
			if !errors.Is(err, session.ErrNotAnswering) || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Attach(%d options) to a frozen server: %v, want %q…", len(opts), err, want)
			}
		})
	}

	// Resumed: the same client's next call dials again and finds the session as the
	// abandoned Step left it, at a step boundary.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	within(t, "Info after SIGCONT", 10*time.Second, func() {
		if _, err := c.Info(); err != nil {
			t.Fatalf("Info after SIGCONT: %v", err)
		}
	})
	time.Sleep(100 * time.Millisecond) // the abandoned Step stops at its next boundary
	k := atBoundary(t, c, "after the freeze", 2, 100000)
	if info2, err := c.Info(); err != nil || info2.Step != k {
		t.Errorf("the abandoned Step went on after the client left: step %d then %d (%v)", k, info2.Step, err)
	}
	note := fmt.Sprintf("step %d (past the 4 planned)", k)
	if k <= 4 {
		note = fmt.Sprintf("step %d of 4", k)
	}
	if ls := listIn(t, dir); len(ls) != 1 || ls[0].Err != "" || ls[0].Note != note {
		t.Errorf("List after SIGCONT: %+v", ls)
	}

	// Frozen again: Stop returns at its timeout, having sent SIGTERM, and says why.
	proctest.Stop(t, pid)
	within(t, "Stop with a 2 s timeout", 4*time.Second, func() {
		err := session.Stop("frozen", 2*time.Second)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`session "frozen": the server (pid %d) did not exit within 2s of SIGTERM (the stop request failed: `, pid)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("its process is stopped (SIGSTOP or Ctrl-Z): it exits when resumed (`kill -CONT %d`)", pid)) {
			t.Errorf("Stop of a frozen server: %v", err)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	f := sdir.For(dir, "frozen")
	waitFor(t, "the resumed server to exit on its SIGTERM", func() bool { return !sdir.Held(f) })
	if log, _ := os.ReadFile(f.Log); !strings.Contains(string(log), "terminated: stopping") {
		t.Errorf("the server's log does not show the SIGTERM:\n%s", log)
	}
}

// TestSessionFromAnotherEnvironment: a session started by a process without
// XDG_RUNTIME_DIR before the user's runtime directory existed (a notebook kernel started so:
// its servers go to $TMPDIR/nvg-UID) is listed, attached and stopped by a terminal whose
// XDG_RUNTIME_DIR is /run/user/UID (a stand-in here): they looked in different directories,
// and `nvg session ls` showed nothing.
func TestSessionFromAnotherEnvironment(t *testing.T) {
	base := filepath.Dir(useSessionDir(t, "fake"))
	old := sdir.RunUser
	sdir.RunUser = filepath.Join(base, "run-user")
	t.Cleanup(func() { sdir.RunUser = old })
	t.Setenv("XDG_RUNTIME_DIR", "") // the notebook kernel
	nb := attach(t, "nb")
	want := filepath.Join(base, fmt.Sprintf("nvg-%d", os.Getuid()))
	if d := filepath.Dir(nb.LogFile()); d != want {
		t.Fatalf("the kernel's session is in %s, want %s", d, want)
	}
	run := filepath.Join(sdir.RunUser, fmt.Sprint(os.Getuid()))
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", run) // the terminal of a login session
	if d, err := session.Dir(); err != nil || d != filepath.Join(run, "nvg") {
		t.Fatalf("the terminal's session directory: %s, %v", d, err)
	}
	if ls := listIn(t, want); len(ls) != 1 || ls[0].Name != "nb" || !ls[0].Alive || ls[0].Err != "" {
		t.Errorf("List from the terminal: %+v, want the kernel's session", ls)
	}
	c, err := session.Attach("nb", session.NoStart())
	if err != nil || c.Pid() != nb.Pid() {
		t.Fatalf("Attach from the terminal: %v, %v; want the kernel's server %d", c, err, nb.Pid())
	}
	c.Close()
	if err := session.Stop("nb", time.Minute); err != nil {
		t.Errorf("Stop from the terminal: %v", err)
	}
	if _, err := nb.Info(); !errors.Is(err, session.ErrServerDied) {
		t.Errorf("the kernel's client after the terminal's Stop: %v, want ErrServerDied", err)
	}
}
