package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/session/internal/rpc"
)

// systemTemp is the temporary directory before useSessionDir points TMPDIR elsewhere.
var systemTemp = os.TempDir()

// The test binary plays three parts besides the tests: the session server (`session serve
// NAME --idle D`, as nvg; Attach finds it through NVG_BIN), and the client processes the
// tests kill or signal (NVG_TEST_CHILD).
func TestMain(m *testing.M) {
	if len(os.Args) >= 4 && os.Args[1] == "session" && os.Args[2] == "serve" {
		os.Exit(testServe(os.Args[3:]))
	}
	if mode := os.Getenv("NVG_TEST_CHILD"); mode != "" {
		os.Exit(testChild(mode))
	}
	os.Exit(m.Run())
}

// testServe is `nvg session serve NAME [--idle D]` with the lab NVG_TEST_LAB names.
func testServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	idle := fs.Duration("idle", session.DefaultIdle, "")
	if err := fs.Parse(args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	lab, err := newTestLab(os.Getenv("NVG_TEST_LAB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := Serve(args[0], lab, Config{Idle: *idle}); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return 0
}

// testChild runs one client part and prints its outcome on stdout.
func testChild(mode string) int {
	name := os.Getenv("NVG_TEST_SESSION")
	switch mode {
	case "step": // attach and run a long Step (killed or interrupted by the test)
		c, err := session.Attach(name, session.NoStart())
		if err != nil {
			fmt.Println("attach:", err)
			return 1
		}
		n, _ := strconv.Atoi(os.Getenv("NVG_TEST_STEPS"))
		sts, err := c.Step(n, session.OnProgress(func(p session.Progress) {
			fmt.Printf("progress %d/%d\n", p.Done, p.Total)
		}))
		fmt.Printf("steps=%d interrupted=%v err=%v\n", len(sts), errors.Is(err, session.ErrInterrupted), err)
		return 0
	case "quietstep": // attach and run a Step given no progress option
		c, err := session.Attach(name, session.NoStart())
		if err != nil {
			fmt.Println("attach:", err)
			return 1
		}
		n, _ := strconv.Atoi(os.Getenv("NVG_TEST_STEPS"))
		sts, err := c.Step(n)
		fmt.Printf("steps=%d err=%v\n", len(sts), err)
		return 0
	case "dial": // dial a socket directly (a second user's process)
		c, err := rpc.Dial(os.Getenv("NVG_TEST_SOCK"), rpc.DialConfig{})
		if err != nil { // the peer check refuses at connect time
			fmt.Printf("dial error: refused=%v err=%v\n", errors.Is(err, rpc.ErrRefused), err)
			return 0
		}
		_, err = c.Status()
		fmt.Printf("status: refused=%v err=%v\n", errors.Is(err, rpc.ErrRefused), err)
		return 0
	}
	fmt.Println("unknown child mode", mode)
	return 2
}

// fakeLab is a Lab without a GPU for the transport's tests: a step counter and two
// parameters that each step changes together (the state a step applies whole), steps that
// take stepTime and stop at a boundary when the context is cancelled. Methods it does not
// define panic (the embedded nil Lab), which the server must survive.
type fakeLab struct {
	session.Lab
	mu       sync.Mutex
	setup    *session.Setup
	step     int
	a, b     []float32
	stepTime time.Duration
}

func (l *fakeLab) Setup(s session.Setup, opts ...session.Option) (session.Info, error) {
	if err := s.Validate(); err != nil {
		return session.Info{}, err
	}
	if l.setup != nil && !l.setup.Equal(s) && !s.Replace {
		return session.Info{}, errors.New("fake: set up with another Setup")
	}
	if l.setup == nil || s.Replace {
		l.setup = &s
		l.step, l.a, l.b = 0, []float32{1, 2, 3}, []float32{0.5}
	}
	return l.Info()
}

func (l *fakeLab) Info() (session.Info, error) {
	if l.setup == nil {
		return session.Info{}, nil
	}
	return session.Info{Ready: true, Setup: *l.setup, Step: l.step}, nil
}

func (l *fakeLab) ready() error {
	if l.setup == nil {
		return errors.New("fake: not set up")
	}
	return nil
}

func (l *fakeLab) Step(n int, opts ...session.Option) ([]session.StepStats, error) {
	if err := l.ready(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("fake: Step(%d): n must be ≥ 1", n)
	}
	o := session.Apply(opts...)
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	var sts []session.StepStats
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return sts, fmt.Errorf("fake: %w after %d steps", session.ErrInterrupted, i)
		}
		time.Sleep(l.stepTime)
		l.step++
		for j := range l.a {
			l.a[j] += float32(l.step) * 0.5
		}
		l.b[0] *= 1.5
		sts = append(sts, session.StepStats{Step: l.step, Loss: 1 / float64(l.step)})
		if o.OnProgress != nil {
			o.OnProgress(session.Progress{Phase: "step", Done: i + 1, Total: n, Step: l.step})
		}
	}
	return sts, nil
}

func (l *fakeLab) Param(name string) ([]float32, error) {
	if err := l.ready(); err != nil {
		return nil, err
	}
	switch name {
	case "a":
		return append([]float32(nil), l.a...), nil
	case "b":
		return append([]float32(nil), l.b...), nil
	}
	return nil, fmt.Errorf("fake: no parameter %q", name)
}

func (l *fakeLab) SetParam(name string, v []float32) error {
	cur, err := l.Param(name)
	if err != nil {
		return err
	}
	if len(v) != len(cur) {
		return fmt.Errorf("fake: %s has %d values, got %d", name, len(cur), len(v))
	}
	copy(map[string][]float32{"a": l.a, "b": l.b}[name], v)
	return nil
}

func (l *fakeLab) Close() error { return nil }

// fakeState is the fake lab's parameters after k steps from Setup (the reference the tests
// compare a session's state with).
func fakeState(k int) (a, b []float32) {
	a, b = []float32{1, 2, 3}, []float32{0.5}
	for s := 1; s <= k; s++ {
		for j := range a {
			a[j] += float32(s) * 0.5
		}
		b[0] *= 1.5
	}
	return a, b
}

// atBoundary checks that session c stopped an abandoned Step(n) begun after step `after` at
// a step boundary: its step counter k lies strictly between after and after+n, and its
// parameters are those of k whole steps (fakeState). It returns k.
func atBoundary(t *testing.T, c *session.Client, what string, after, n int) int {
	t.Helper()
	info, err := c.Info() // queued behind the abandoned Step until it stops
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	k := info.Step
	if k <= after || k >= after+n {
		t.Fatalf("%s: step %d (before %d), want stopped at a boundary in between", what, k, after)
	}
	a, _ := c.Param("a")
	b, _ := c.Param("b")
	if wa, wb := fakeState(k); !reflect.DeepEqual(a, wa) || !reflect.DeepEqual(b, wb) {
		t.Errorf("%s at step %d: params %v %v, want %v %v (a run of %d whole steps)", what, k, a, b, wa, wb, k)
	}
	return k
}

// useSessionDir points the session directory at a fresh temporary one and the session
// binary at this test binary serving lab kind ("fake" or "gpu").
func useSessionDir(t *testing.T, kind string) string {
	t.Helper()
	base, err := os.MkdirTemp("", "nvg-session-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", base)
	t.Setenv("TMPDIR", base) // the fallback session directory too (sdir.Dirs)
	t.Setenv("NVG_BIN", exe)
	t.Setenv("NVG_TEST_LAB", kind)
	return filepath.Join(base, "nvg")
}

// listIn is session.List restricted to the sessions of dir (List also looks in the user's
// other session directories, which may hold the developer's own sessions).
func listIn(t *testing.T, dir string) []session.ServerStatus {
	t.Helper()
	ls, err := session.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []session.ServerStatus
	for _, s := range ls {
		if s.Dir == dir {
			out = append(out, s)
		}
	}
	return out
}

// attach starts (or attaches to) session name and stops it when the test ends.
func attach(t *testing.T, name string) *session.Client {
	t.Helper()
	c, err := session.Attach(name, session.IdleTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := session.Stop(name, time.Minute); err != nil && !strings.Contains(err.Error(), "is not running") {
			b, _ := os.ReadFile(c.LogFile())
			t.Errorf("stop %s: %v; its log:\n%s", name, err, b)
		}
	})
	return c
}

// child starts this test binary as a client process of session name in mode.
func child(t *testing.T, name, mode string, env ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{"NVG_TEST_CHILD=" + mode, "NVG_TEST_SESSION=" + name}, env...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: out}, &lockedWriter{w: out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitFor polls cond every 10 ms until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
