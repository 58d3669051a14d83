package rpc

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// toy is the service the transport is tested with: a counter and a vector, a slow loop
// of steps that reports progress and stops at a step boundary when interrupted.
type toy interface {
	Add(n int) (int, error)
	Get() (int, []float32, error)
	SetVec(v []float32) error
	Slow(steps int, opts ...toyOpt) (int, error)
	Panic() error
	Fail(msg string) error
}

type toyOpt func(*toyCfg)

type toyCfg struct {
	ctx      context.Context
	progress func(int)
}

var errToyInterrupted = errors.New("toy: interrupted")
var errToySentinel = errors.New("toy: sentinel")

type toyImpl struct {
	mu       sync.Mutex // held by each call: detects two calls at once
	inflight atomic.Int32
	overlap  atomic.Bool
	n        int
	vec      []float32
	stepTime time.Duration
	started  chan struct{} // receives once per Slow call when its first step ran
}

func (t *toyImpl) enter() func() {
	if t.inflight.Add(1) > 1 {
		t.overlap.Store(true)
	}
	return func() { t.inflight.Add(-1) }
}

func (t *toyImpl) Add(n int) (int, error) {
	defer t.enter()()
	if n < 0 {
		return t.n, fmt.Errorf("toy: Add(%d): n must be >= 0", n)
	}
	time.Sleep(2 * time.Millisecond)
	t.n += n
	return t.n, nil
}

func (t *toyImpl) Get() (int, []float32, error) {
	defer t.enter()()
	return t.n, append([]float32(nil), t.vec...), nil
}

func (t *toyImpl) SetVec(v []float32) error {
	defer t.enter()()
	t.vec = append([]float32(nil), v...)
	return nil
}

func (t *toyImpl) Slow(steps int, opts ...toyOpt) (int, error) {
	defer t.enter()()
	cfg := toyCfg{ctx: context.Background(), progress: func(int) {}}
	for _, o := range opts {
		o(&cfg)
	}
	for i := 0; i < steps; i++ {
		if cfg.ctx.Err() != nil {
			return i, errToyInterrupted
		}
		time.Sleep(t.stepTime)
		t.n++ // one step: applied whole
		cfg.progress(i + 1)
		if i == 0 && t.started != nil {
			t.started <- struct{}{}
		}
	}
	return steps, nil
}

func (t *toyImpl) Panic() error {
	defer t.enter()()
	var m map[string]int
	m["x"] = 1
	return nil
}

func (t *toyImpl) Fail(msg string) error {
	defer t.enter()()
	if msg == "sentinel" {
		return fmt.Errorf("wrapped: %w", errToySentinel)
	}
	return errors.New(msg)
}

// toyService is the Service of impl.
func toyService(impl *toyImpl) Service {
	return Service{
		Impl: impl, Iface: reflect.TypeOf((*toy)(nil)).Elem(),
		Interrupted: errToyInterrupted,
		Sentinels:   []error{errToySentinel},
		Options: func(method string, opts []byte, call *Call) ([]reflect.Value, error) {
			var want struct{ Progress bool }
			if len(opts) > 0 {
				if err := gob.NewDecoder(bytes.NewReader(opts)).Decode(&want); err != nil {
					return nil, err
				}
			}
			o := toyOpt(func(c *toyCfg) {
				c.ctx = call.Context()
				if want.Progress {
					c.progress = func(i int) { call.Progress(i) }
				}
			})
			return []reflect.Value{reflect.ValueOf(o)}, nil
		},
		After: func(method string, args []reflect.Value, err error) string {
			return fmt.Sprintf("n=%d", impl.n)
		},
	}
}

// toyServer starts a server of impl on a socket in a temporary directory.
func toyServer(t *testing.T, impl *toyImpl, cfg Config) (*Server, string) {
	t.Helper()
	s, err := NewServer(toyService(impl), cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "toy.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, path
}

func toyDial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(path, DialConfig{Interrupted: errToyInterrupted, Sentinels: []error{errToySentinel}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func progressOpt(t *testing.T) []byte {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(struct{ Progress bool }{true}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRoundTrip: arguments and results cross the wire bit for bit (NaN payloads, -0,
// subnormals, infinities), errors keep their text and sentinels.
func TestRoundTrip(t *testing.T) {
	impl := &toyImpl{}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid()})
	c := toyDial(t, path)
	var n int
	if err := c.Call(context.Background(), "Add", []any{5}, nil, nil, &n); err != nil || n != 5 {
		t.Fatalf("Add(5) = %d, %v; want 5", n, err)
	}
	vec := []float32{1.5, float32(math.Copysign(0, -1)), math.Float32frombits(1), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), 3e38}
	if err := c.Call(context.Background(), "SetVec", []any{vec}, nil, nil); err != nil {
		t.Fatal(err)
	}
	var got []float32
	if err := c.Call(context.Background(), "Get", nil, nil, nil, &n, &got); err != nil {
		t.Fatal(err)
	}
	if n != 5 || len(got) != len(vec) {
		t.Fatalf("Get = %d, %v; want 5, %v", n, got, vec)
	}
	for i := range vec {
		if math.Float32bits(got[i]) != math.Float32bits(vec[i]) {
			t.Errorf("vec[%d]: bits %#x, want %#x", i, math.Float32bits(got[i]), math.Float32bits(vec[i]))
		}
	}
	if err := c.Call(context.Background(), "SetVec", []any{[]float32(nil)}, nil, nil); err != nil {
		t.Fatalf("SetVec(nil): %v", err)
	}
	if err := c.Call(context.Background(), "Fail", []any{"no such thing"}, nil, nil); err == nil || err.Error() != "no such thing" {
		t.Errorf("Fail: %v, want the method's own error text", err)
	}
	if err := c.Call(context.Background(), "Fail", []any{"sentinel"}, nil, nil); !errors.Is(err, errToySentinel) || err.Error() != "wrapped: toy: sentinel" {
		t.Errorf("Fail(sentinel): %v, want errors.Is the sentinel", err)
	}
	if err := c.Call(context.Background(), "Add", []any{-1}, nil, nil, &n); err == nil || !strings.Contains(err.Error(), "n must be >= 0") {
		t.Errorf("Add(-1): %v", err)
	}
}

// TestBadRequests: malformed requests get a clear error, touch nothing, and the server
// keeps serving (also after a method panics).
func TestBadRequests(t *testing.T) {
	impl := &toyImpl{}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid()})
	c := toyDial(t, path)
	ctx := context.Background()
	var n int
	for _, tc := range []struct {
		method string
		args   []any
		opts   []byte
		want   string
	}{
		{"Nope", nil, nil, `no method "Nope"`},
		{"Add", nil, nil, "Add takes 1 arguments, got 0"},
		{"Add", []any{1, 2}, nil, "Add takes 1 arguments, got 2"},
		{"Add", []any{"five"}, nil, "Add arguments: value 0 (want int)"},
		{"Add", []any{1}, []byte{1, 2, 3}, "Add takes no options"},
		{"Slow", []any{1}, []byte{0xff, 0, 1}, "Slow options"},
	} {
		err := c.Call(ctx, tc.method, tc.args, tc.opts, nil, &n)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s%v: %v, want a bad request saying %q", tc.method, tc.args, err, tc.want)
		}
	}
	// Raw garbage arguments (not from Call's encoder).
	c.nextID++
	if err := c.w.send(request{ID: c.nextID, Kind: kindCall, Method: "Add", NArgs: 1, Args: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.wait(ctx, c.w, c.nextID, "Add", nil, time.Minute); err != nil || r.Code != codeBadRequest {
		t.Errorf("garbage arguments: %+v, %v; want a bad request", r, err)
	}
	if err := c.Call(ctx, "Panic", nil, nil, nil); err == nil || !strings.Contains(err.Error(), "internal error in Panic") {
		t.Errorf("Panic: %v, want an internal error", err)
	}
	// A connection that sends bytes that are not the protocol is closed; others go on.
	raw, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	raw.Close()
	if err := c.Call(ctx, "Add", []any{2}, nil, nil, &n); err != nil || n != 2 {
		t.Errorf("after the bad requests: Add(2) = %d, %v; want 2 (nothing applied before)", n, err)
	}
}

// TestProgressAndInterrupt: progress reaches the caller; cancelling stops the call at a
// step boundary with the interrupted error; the state is the steps done.
func TestProgressAndInterrupt(t *testing.T) {
	impl := &toyImpl{stepTime: 20 * time.Millisecond}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid()})
	c := toyDial(t, path)
	var seen []int
	var n int
	err := c.Call(context.Background(), "Slow", []any{3}, progressOpt(t), func(b []byte) {
		var i int
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&i); err != nil {
			t.Error(err)
		}
		seen = append(seen, i)
	}, &n)
	if err != nil || n != 3 || !reflect.DeepEqual(seen, []int{1, 2, 3}) {
		t.Fatalf("Slow(3) = %d, %v, progress %v; want 3, nil, [1 2 3]", n, err, seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	impl.started = make(chan struct{}, 1)
	go func() { <-impl.started; cancel() }()
	n = -1
	err = c.Call(ctx, "Slow", []any{1000}, progressOpt(t), func([]byte) {}, &n)
	if !errors.Is(err, errToyInterrupted) {
		t.Fatalf("interrupted Slow: %v, want errToyInterrupted", err)
	}
	var got int
	var vec []float32
	if err := c.Call(context.Background(), "Get", nil, nil, nil, &got, &vec); err != nil {
		t.Fatal(err)
	}
	if got <= 3 || got >= 1003 {
		t.Errorf("after the interrupt n = %d, want between 4 and 1002 (stopped at a boundary)", got)
	}
	// The result returned with the error reaches the caller (issue 34: an interrupted Step
	// through a session returned no steps although some were done).
	if n != got-3 {
		t.Errorf("the interrupted Slow returned %d steps done; the counter moved by %d", n, got-3)
	}
	// So does a failing call's (Add returns the counter with its error).
	if err := c.Call(context.Background(), "Add", []any{-1}, nil, nil, &n); err == nil || n != got {
		t.Errorf("Add(-1) = %d, %v; want the counter %d and an error", n, err, got)
	}
}

// TestOneAtATime: calls of several clients never run at once, and a client that goes away
// mid-call stops its call at a boundary without disturbing the others.
func TestOneAtATime(t *testing.T) {
	impl := &toyImpl{stepTime: 5 * time.Millisecond}
	s, path := toyServer(t, impl, Config{AllowUID: os.Getuid()})
	var wg sync.WaitGroup
	for k := 0; k < 4; k++ {
		c := toyDial(t, path)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				var n int
				if err := c.Call(context.Background(), "Add", []any{1}, nil, nil, &n); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if impl.overlap.Load() {
		t.Error("two calls ran at once")
	}
	if impl.n != 40 {
		t.Errorf("n = %d after 4×10 Add(1), want 40", impl.n)
	}
	// A client gone mid-call: its call stops at the next step boundary.
	impl.started = make(chan struct{}, 1)
	gone := toyDial(t, path)
	callDone := make(chan error, 1)
	go func() {
		var n int
		callDone <- gone.Call(context.Background(), "Slow", []any{100000}, nil, nil, &n)
	}()
	<-impl.started
	gone.Close()
	if err := <-callDone; !errors.Is(err, ErrConnLost) {
		t.Errorf("call of a closed client: %v, want ErrConnLost", err)
	}
	c := toyDial(t, path)
	var n int
	var vec []float32
	if err := c.Call(context.Background(), "Get", nil, nil, nil, &n, &vec); err != nil { // waits for Slow to stop
		t.Fatal(err)
	}
	if n <= 40 || n >= 40+100000 {
		t.Errorf("n = %d after an abandoned Slow, want it stopped at a boundary", n)
	}
	st, err := c.Status()
	if err != nil || st.Pid != os.Getpid() || st.Note != fmt.Sprintf("n=%d", n) || st.Busy != "" {
		t.Errorf("Status = %+v, %v", st, err)
	}
	_ = s
}

// TestPeerCheck: a connection from a process of another user id is refused at Dial with a
// message that says why (here the server allows a different uid than ours, the same check a
// second user's process meets), and runs nothing.
func TestPeerCheck(t *testing.T) {
	var buf bytes.Buffer
	impl := &toyImpl{}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid() + 1, Log: newLogger(&buf)})
	_, err := Dial(path, DialConfig{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("runs as uid %d, this session belongs to uid %d", os.Getuid(), os.Getuid()+1)) {
		t.Errorf("Dial from a refused uid: %v", err)
	}
	if impl.n != 0 {
		t.Errorf("a refused call ran")
	}
}

// TestStopAndIdle: Stop ends Serve after the running call stopped at a boundary; an idle
// server exits by itself.
func TestStopAndIdle(t *testing.T) {
	impl := &toyImpl{stepTime: 5 * time.Millisecond, started: make(chan struct{}, 1)}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid()})
	c := toyDial(t, path)
	done := make(chan error, 1)
	go func() {
		var n int
		done <- c.Call(context.Background(), "Slow", []any{100000}, nil, nil, &n)
	}()
	<-impl.started
	c2 := toyDial(t, path)
	if _, err := c2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, errToyInterrupted) {
		t.Errorf("call running at Stop: %v, want interrupted", err)
	}

	s, err := NewServer(Service{Impl: &toyImpl{}, Iface: reflect.TypeOf((*toy)(nil)).Elem()}, Config{AllowUID: os.Getuid(), Idle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "idle.sock"))
	if err != nil {
		t.Fatal(err)
	}
	idleDone := make(chan error, 1)
	go func() { idleDone <- s.Serve(l) }()
	select {
	case err := <-idleDone:
		if err != nil {
			t.Errorf("idle Serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("an idle server did not exit")
	}
}

// TestOrphanExits checks that a server without an idle timeout exits once its socket file
// is removed (its session directory deleted): nothing could reach it, and it would hold the
// GPU forever.
func TestOrphanExits(t *testing.T) {
	defer func(d time.Duration) { orphanCheck = d }(orphanCheck)
	orphanCheck = 20 * time.Millisecond
	path := filepath.Join(t.TempDir(), "orphan.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := NewServer(Service{Impl: &toyImpl{}, Iface: reflect.TypeOf((*toy)(nil)).Elem()}, Config{AllowUID: os.Getuid(), Socket: path, Log: newLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	select {
	case err := <-done:
		t.Fatalf("Serve returned while its socket exists: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("orphaned Serve: %v", err)
		}
		if !strings.Contains(logs.String(), "was removed or replaced") {
			t.Errorf("log %q does not say why the server exited", logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("a server whose socket was removed did not exit")
	}
}

func newLogger(w *bytes.Buffer) *log.Logger { return log.New(w, "", 0) }
