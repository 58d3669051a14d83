package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/testkit/proctest"
)

// TestMain lets the test binary be nvg itself when NVG_TEST_AS_NVG=1: the session commands
// spawn their own executable as the server (`nvg session serve NAME`), which in a test is
// this binary.
func TestMain(m *testing.M) {
	if os.Getenv("NVG_TEST_AS_NVG") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// sessionEnv gives the test its own session directory and makes spawned servers nvg.
func sessionEnv(t *testing.T) {
	t.Helper()
	base, err := os.MkdirTemp("", "nvg-cli-session-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	t.Setenv("XDG_RUNTIME_DIR", base)
	t.Setenv("NVG_TEST_AS_NVG", "1")
	t.Setenv("NVG_CACHE", t.TempDir())
}

// TestSessionCommands: start, ls, stop and the idle timeout from the shell, and the usage
// errors of the session command.
func TestSessionCommands(t *testing.T) {
	sessionEnv(t)
	out, errOut, code := capture(t, []string{"session", "start", "s1", "--idle", "10m"})
	if code != 0 || !regexp.MustCompile(`^session s1: running, pid \d+, log /.*/nvg/s1\.log\n$`).MatchString(out) {
		t.Fatalf("session start: exit %d, %q %q", code, out, errOut)
	}
	defer session.Stop("s1", time.Minute)
	out2, _, code := capture(t, []string{"session", "start", "s1"})
	if code != 0 || out2 != out {
		t.Errorf("second session start: exit %d, %q; want the same server %q", code, out2, out)
	}
	out, _, code = capture(t, []string{"session", "ls"})
	if code != 0 || !regexp.MustCompile(`(?m)^NAME +PID +STATE +LAB +IDLE +CALLS +LOG\ns1 +\d+ +alive +not set up +\d+s of 10m0s +\d+ +/.*s1\.log$`).MatchString(out) {
		t.Errorf("session ls:\n%s", out)
	}
	// A frozen server is shown as such, with what to do (issue 34).
	pid, _ := strconv.Atoi(regexp.MustCompile(`(?m)^s1 +(\d+) `).FindStringSubmatch(out)[1])
	proctest.Stop(t, pid)
	out, _, code = capture(t, []string{"session", "ls"})
	syscall.Kill(pid, syscall.SIGCONT)
	if want := fmt.Sprintf("s1 (pid %d) does not answer: no answer within 3s: its process is stopped (SIGSTOP or Ctrl-Z): `kill -CONT %d` resumes it", pid, pid); code != 0 ||
		!regexp.MustCompile(`(?m)^s1 +\d+ +NOT ANSWERING `).MatchString(out) || !strings.Contains(out, want) {
		t.Errorf("session ls of a stopped server: exit %d\n%s\nwant NOT ANSWERING and %q", code, out, want)
	}
	out, _, code = capture(t, []string{"session", "stop", "s1"})
	if code != 0 || out != "session s1: stopped\n" {
		t.Errorf("session stop: exit %d, %q", code, out)
	}
	out, _, code = capture(t, []string{"session", "ls"})
	dirs, err := session.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	if want := "no sessions (in " + strings.Join(dirs, ", ") + "; NVG_SESSION_DIR=DIR looks in DIR)\n"; code != 0 || out != want {
		t.Errorf("session ls after stop: exit %d, %q, want %q", code, out, want)
	}

	// The idle timeout ends a server by itself.
	if _, errOut, code := capture(t, []string{"session", "start", "--idle", "300ms", "s2"}); code != 0 {
		t.Fatalf("session start --idle 300ms: exit %d, %s", code, errOut)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := session.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle session still runs after a minute: %+v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"session"}, 2, "want a subcommand"},
		{[]string{"session", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"session", "start"}, 2, "want one session NAME, got 0"},
		{[]string{"session", "stop", "a", "b"}, 2, "want one session NAME, got 2"},
		{[]string{"session", "stop", "../x"}, 2, `bad session name "../x"`},
		{[]string{"session", "start", "a/b"}, 2, `bad session name "a/b"`},
		{[]string{"session", "start", "--idle", "-1s", "x"}, 2, "--idle -1s: want ≥ 0"},
		{[]string{"session", "stop", "nosuch"}, 1, `session "nosuch" is not running`},
		{[]string{"session", "bench", "--reps", "0"}, 2, "--reps 0: want ≥ 1"},
		{[]string{"session", "bench", "--t", "0"}, 2, "--t 0: want ≥ 1"},
	} {
		_, stderr, code := capture(t, tc.args)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("nvg %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestSessionBench runs `nvg session bench` on the GPU (lavapipe in CI), resized so that it
// takes seconds (2 steps of 1 window × 16 tokens, one run of each cell), and checks its
// output: the absolute times of the cold and warm cells and of the cell's compile, and a last
// line `cell latency ratio: X` with X a positive number (its value is not asserted: no timed
// assertions; the README's figure comes from the full-size default run).
func TestSessionBench(t *testing.T) {
	gputest.Open(t) // fail (not skip) under NVG_REQUIRE_GPU=1 when there is no adapter
	sessionEnv(t)
	out, errOut, code := capture(t, []string{"session", "bench", "--reps", "1", "--warm", "1", "--nb", "1", "--t", "16", "--steps", "2"})
	t.Logf("nvg session bench:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ms := `median \d+\.\d ms of \d+ runs \((\d+\.\d(, )?)+ ms\)`
	for _, re := range []string{
		`(?m)^nvg session bench: the embedded tiny teacher, DefaultSetup resized with Init dual-svid and the KL alone \(NB 1, T 16, K 32, 2 training windows, KeepActivations false, ActivationBudget 1024 MiB\), on .+$`,
		`(?m)^cold cell, in-process \(new Lab: open device, load, compress, teacher pass; Step\(1\), Grad\): ` + ms + `$`,
		`(?m)^warm cell \(Attach to the resident session; Step\(1\), Grad\): ` + ms + `$`,
		`(?m)^cell compile \(go build of the cell program, imports only nvgkit/session\): \d+ ms first, \d+ ms after an edit$`,
		`(?m)^  of which the transport \(the same cell without its Step: Attach, Grad\): ` + ms + `$`,
		`(?m)^  of which Setup: median \d+ ms \(its teacher pass \d+ ms\)$`,
		`(?m)^  the session's first such cell, which compiles the step's kernels: \d+\.\d ms \(not in the median\)$`,
		`(?m)^cell compile of a cell importing nvgkit/train instead \(links the GPU engine\): \d+ ms after an edit$`,
		`(?m)^warm cell as its own process \(the built cell program, exec to exit\): ` + ms + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s", re)
		}
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	x, err := strconv.ParseFloat(strings.TrimPrefix(last, "cell latency ratio: "), 64)
	if !strings.HasPrefix(last, "cell latency ratio: ") || err != nil || !(x > 0) {
		t.Errorf("last line %q: want `cell latency ratio: X` with X > 0", last)
	}
	if l, err := session.List(); err != nil || len(l) != 0 {
		t.Errorf("sessions left after the bench: %+v, %v", l, err)
	}
	// Nor its log: the bench removes its own session's log once the server has exited.
	if logs, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "nvg", "bench-*.log")); len(logs) != 0 {
		t.Errorf("bench logs left: %v", logs)
	}
}
