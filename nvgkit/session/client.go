package session

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session/internal/rpc"
	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
)

// ErrServerDied is wrapped by the error of a call whose session server is gone (killed,
// crashed, or ended by its idle timeout or `nvg session stop`): the session's state is lost.
// The error names the server's log file and the last checkpoint the session wrote, if any;
// Attach starts a new server, and Setup with Resume set to that checkpoint restores it.
var ErrServerDied = errors.New("session server died")

// ErrRefused is wrapped by the error of a call the session server refused because the
// calling process belongs to another user (the server checks every connection's uid).
var ErrRefused = rpc.ErrRefused

// ErrBadRequest is wrapped by the error of a request the server refused as malformed (a
// client and server of different nvg versions); nothing was changed.
var ErrBadRequest = rpc.ErrBadRequest

//go:generate go run ./internal/labgen

// Client is a Lab served by a resident session server (Attach): every method runs in the
// server's process, on the state the previous calls (of any client of the session) left.
// Its methods are generated from the Lab interface (client_gen.go, `go generate`) but for
// Interrupt, Close and Step, whose behaviour is the client's own.
// Option callbacks (OnProgress, PreOptimizer) run in the caller's process. While a call
// runs, SIGINT (a notebook kernel's interrupt) asks the server to stop it at the next step
// boundary, and the call returns an error wrapping ErrInterrupted; a second SIGINT stops
// waiting at once (the server still stops the call at a boundary). A Client's methods may
// be called from one goroutine at a time, except Interrupt.
type Client struct {
	files sdir.Files

	mu     sync.Mutex
	rc     *rpc.Client
	pid    int   // the server's pid at Attach
	dead   error // why the server is known to be gone (nil while it runs); each call reports it under its own name
	closed bool

	inHook bool // a PreOptimizer hook of Step runs (Setup, Step, Restore, Close refused)
	stop   chan struct{}
}

var _ Lab = (*Client)(nil)

// Name returns the session's name.
func (c *Client) Name() string { return c.files.Name }

// LogFile returns the path of the session server's log (its stdout and stderr).
func (c *Client) LogFile() string { return c.files.Log }

// Pid returns the process id of the session server the client attached to.
func (c *Client) Pid() int { return c.pid }

func dialConfig() rpc.DialConfig {
	return rpc.DialConfig{Interrupted: ErrInterrupted}
}

// dial connects to the session's socket and checks that the server runs as this user.
func dial(f sdir.Files) (*rpc.Client, error) {
	rc, err := rpc.Dial(f.Sock, dialConfig())
	if err != nil {
		return nil, err
	}
	if rc.ServerUID != os.Getuid() {
		rc.Close()
		return nil, fmt.Errorf("session %q: the process listening on %s runs as uid %d, not as you (uid %d): refused", f.Name, f.Sock, rc.ServerUID, os.Getuid())
	}
	return rc, nil
}

// conn returns the connection, dialling again when it was lost while the same server
// still runs.
func (c *Client) conn(method string) (*rpc.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, fmt.Errorf("session %q: %s on a closed client (Attach again)", c.files.Name, method)
	case c.dead != nil:
		return nil, c.diedError(method, c.dead)
	case c.rc != nil:
		return c.rc, nil
	}
	rc, err := dial(c.files)
	if err == nil && rc.ServerPid != c.pid {
		rc.Close()
		c.dead = fmt.Errorf("a new server (pid %d) has taken its place", rc.ServerPid)
		return nil, c.diedError(method, c.dead)
	}
	if err != nil {
		c.dead = err
		return nil, c.diedError(method, err)
	}
	c.rc = rc
	return rc, nil
}

// lost handles a call whose connection broke: when the server is gone the client is dead
// (every later call says so); else the next call dials again.
func (c *Client) lost(method string, cause error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rc != nil {
		c.rc.Close()
		c.rc = nil
	}
	if pid, _ := sdir.ReadPid(c.files); pid == c.pid && sdir.Held(c.files) {
		return fmt.Errorf("session %q: %s: the connection to the server (pid %d) was lost (%v); the server still runs: the call finished or stopped at a step boundary (see its log %s)", c.files.Name, method, c.pid, cause, c.files.Log)
	}
	c.dead = cause
	return c.diedError(method, cause)
}

// diedError says that the server died, names its log and last checkpoint, and quotes the
// log's last lines.
func (c *Client) diedError(method string, cause error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "session %q: %s: %v: the server (pid %d) is gone (%v); its state is lost. Its log is %s", c.files.Name, method, ErrServerDied, c.pid, cause, c.files.Log)
	if tail := logTail(c.files.Log, 5); tail != "" {
		fmt.Fprintf(&b, ", ending:\n%s\n", tail)
	} else {
		b.WriteString(". ")
	}
	if ck, err := os.ReadFile(c.files.Ckpt); err == nil && len(bytes.TrimSpace(ck)) > 0 {
		fmt.Fprintf(&b, "Its last checkpoint is %s: Attach again and Setup with Resume set to it.", bytes.TrimSpace(ck))
	} else {
		b.WriteString("It wrote no checkpoint; Attach again to start a new session.")
	}
	return &diedErr{msg: b.String()}
}

type diedErr struct{ msg string }

func (e *diedErr) Error() string { return e.msg }
func (e *diedErr) Unwrap() error { return ErrServerDied }

// logTail returns the last n lines of the file at path ("" when unreadable).
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxTail = 8 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-maxTail)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i := range lines {
		lines[i] = "  | " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// wireOptions are the serializable part of a call's Options (the callbacks stay here).
type wireOptions struct {
	Progress  bool
	EvalEvery int
}

func encodeOptions(o Options) []byte {
	var b bytes.Buffer
	// A struct of a bool and an int always encodes.
	_ = gob.NewEncoder(&b).Encode(wireOptions{Progress: o.OnProgress != nil, EvalEvery: o.EvalEvery})
	return b.Bytes()
}

// DecodeOptions is the server's half of encodeOptions: the options a call of a remote
// client asked for. It is exported for package server only.
func DecodeOptions(b []byte) (progress bool, evalEvery int, err error) {
	var w wireOptions
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&w); err != nil {
		return false, 0, err
	}
	return w.Progress, w.EvalEvery, nil
}

// call runs method on the server. opts is nil for a method without options. A long call
// (one with options: Setup, Step, Eval, GradCheck) given no OnProgress reports on standard
// error all the same (waitReporter), so that a cell never sits silent for half a minute.
func (c *Client) call(method string, opts *Options, args []any, results ...any) error {
	rc, err := c.conn(method)
	if err != nil {
		return err
	}
	if opts != nil && opts.OnProgress == nil {
		o := *opts
		o.OnProgress = waitReporter(os.Stderr, fmt.Sprintf("session %q: %s", c.files.Name, method), time.Now)
		opts = &o
	}
	base := context.Background()
	var optBytes []byte
	var progress func([]byte)
	if opts != nil {
		if opts.Context != nil {
			base = opts.Context
		}
		optBytes = encodeOptions(*opts)
		if f := opts.OnProgress; f != nil {
			progress = func(b []byte) {
				var p Progress
				if gob.NewDecoder(bytes.NewReader(b)).Decode(&p) == nil {
					f(p)
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sig:
			cancel() // the first: stop at the next step boundary
		case <-done:
			return
		}
		select {
		case <-sig:
			fmt.Fprintf(os.Stderr, "session %q: second interrupt: not waiting for %s to stop (the server stops it at a step boundary)\n", c.files.Name, method)
			rc.Close()
		case <-done:
		}
	}()
	err = rc.Call(ctx, method, args, optBytes, progress, results...)
	if errors.Is(err, rpc.ErrConnLost) {
		if ctx.Err() != nil {
			return fmt.Errorf("session %q: %s: %w (not waiting for the server to stop it)", c.files.Name, method, ErrInterrupted)
		}
		return c.lost(method, err)
	}
	return err
}

// Thresholds of waitReporter: its first line once a call has run waitFirst, then at most one
// every waitEvery.
const (
	waitFirst = 5 * time.Second
	waitEvery = 15 * time.Second
)

// waitReporter returns the progress callback of a call whose caller gave none: once the call
// has run waitFirst (by now), a line "what: phase done/total, elapsed" to w, then at most
// one every waitEvery, and the last report when it completes a phase that was shown; the
// first line says how to get a live view or silence it. Quick calls print nothing.
func waitReporter(w io.Writer, what string, now func() time.Time) func(Progress) {
	start := now()
	var last time.Time
	shown := ""
	return func(p Progress) {
		t := now()
		el := t.Sub(start)
		done := p.Total > 0 && p.Done >= p.Total
		switch {
		case el < waitFirst && last.IsZero():
			return
		case !last.IsZero() && t.Sub(last) < waitEvery && !(done && shown == p.Phase):
			return
		}
		line := fmt.Sprintf("%s: %s %d/%d, %s", what, p.Phase, p.Done, p.Total, el.Round(time.Second))
		if last.IsZero() {
			line += " (a progress option, such as ui.NewLive(…).OnProgress(), shows it live; session.OnProgress(func(session.Progress) {}) silences this)"
		}
		fmt.Fprintln(w, line)
		last, shown = t, p.Phase
		if done {
			shown = "" // the phase's end is shown once
		}
	}
}

// Interrupt asks the session to stop the call this client waits for (from another
// goroutine) at its next boundary; a Step with a PreOptimizer hook stops before its next step.
func (c *Client) Interrupt() error {
	c.mu.Lock()
	rc, stop := c.rc, c.stop
	c.mu.Unlock()
	if stop != nil {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}
	if rc == nil {
		return nil
	}
	return rc.Interrupt()
}

// Close closes the connection; the session keeps running with its state (`nvg session stop
// NAME` or Stop ends it). Later calls fail.
func (c *Client) Close() error {
	if err := c.hookForbids("Close"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.rc != nil {
		err := c.rc.Close()
		c.rc = nil
		return err
	}
	return nil
}

// Step runs Lab.Step in the session. Without a PreOptimizer hook it is one call (the server
// runs the n steps); with one, the client runs each step as ZeroGrads, ForwardBackward, the
// hook (here, in the caller's process), ClipGrads and AdamStep calls, the same operations
// in the same order as the server's Step, so the results are the same.
func (c *Client) Step(n int, opts ...Option) ([]StepStats, error) {
	if err := c.hookForbids("Step"); err != nil {
		return nil, err
	}
	o := Apply(opts...)
	if o.PreOptimizer == nil {
		var sts []StepStats
		err := c.call("Step", &o, []any{n}, &sts)
		return sts, err
	}
	return c.hookedSteps(n, o)
}

// hookedSteps is Step with a PreOptimizer hook, run from the client: per step ZeroGrads,
// ForwardBackward, the hook and ClipGrads (both only when StepStats.Finite, as nvgkit's
// Step), AdamStep, and Eval(0) after every EvalEvery-th step. Unlike an in-process Step
// with EvalEvery, the server's History does not carry the evaluation's perplexity on the
// step's entry (it is in History.Evals and in the returned StepStats).
func (c *Client) hookedSteps(n int, o Options) ([]StepStats, error) {
	if n < 1 {
		return nil, fmt.Errorf("session: Step: n = %d, want ≥ 1", n)
	}
	if o.EvalEvery < 0 {
		return nil, fmt.Errorf("session: Step: EvalEvery = %d, want ≥ 0", o.EvalEvery)
	}
	info, err := c.Info()
	if err != nil {
		return nil, err
	}
	if !info.Ready {
		return nil, errors.New("session: Step: the Lab is not set up (call Setup first)")
	}
	stop := make(chan struct{})
	c.mu.Lock()
	c.stop = stop
	c.mu.Unlock()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	interrupted := func() bool {
		select {
		case <-stop:
			return true
		case <-sig:
			return true
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}
	start := time.Now()
	var done []StepStats
	for i := 0; i < n; i++ {
		if interrupted() {
			return done, fmt.Errorf("session: Step: %w after step %d (%d of %d done)", ErrInterrupted, info.Step+i, i, n)
		}
		t0 := time.Now()
		if err := c.ZeroGrads(); err != nil {
			return done, err
		}
		fb, err := c.ForwardBackward()
		if err != nil {
			return done, err
		}
		if fb.Finite {
			c.inHook = true
			herr := o.PreOptimizer(c, fb)
			c.inHook = false
			if herr != nil {
				return done, fmt.Errorf("session: Step: step %d: pre-optimizer hook: %w", fb.Step, herr)
			}
			if clip := info.Setup.Train.ClipNorm; clip > 0 {
				if _, err := c.ClipGrads(clip); err != nil {
					return done, err
				}
			}
		}
		st, err := c.AdamStep()
		if err != nil {
			return done, err
		}
		if o.EvalEvery > 0 && (i+1)%o.EvalEvery == 0 {
			ev, err := c.Eval(0)
			if err != nil {
				return done, fmt.Errorf("session: Step: evaluation after step %d: %w", st.Step, err)
			}
			st.EvalPPL = ev.StudentPPL
		}
		st.Seconds = time.Since(t0).Seconds()
		done = append(done, st)
		if o.OnProgress != nil {
			o.OnProgress(Progress{Phase: "step", Done: i + 1, Total: n, Step: st.Step, Loss: st.Loss, EvalPPL: st.EvalPPL, Note: st.Note, Elapsed: time.Since(start)})
		}
	}
	return done, nil
}

// hookForbids refuses method while a PreOptimizer hook runs.
func (c *Client) hookForbids(method string) error {
	if c.inHook {
		return fmt.Errorf("session: %s may not be called from a PreOptimizer hook", method)
	}
	return nil
}

// absPath resolves p against the caller's working directory: the server has its own.
func absPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + p, nil
}
