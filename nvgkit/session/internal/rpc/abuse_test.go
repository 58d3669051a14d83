package rpc

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the child server of TestAcceptEMFILE (NVG_RPC_TEST_CHILD=emfile).
func TestMain(m *testing.M) {
	if os.Getenv("NVG_RPC_TEST_CHILD") == "emfile" {
		os.Exit(emfileChild())
	}
	os.Exit(m.Run())
}

// syncBuffer is a log destination the tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rawConn is a connection that speaks the protocol by hand (or not at all).
type rawConn struct {
	nc  net.Conn
	dec *gob.Decoder
}

func rawDial(t *testing.T, path string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{nc: nc, dec: gob.NewDecoder(nc)}
}

// frames reads the server's frames until the connection ends (or a minute passes).
func (r *rawConn) frames() ([]reply, error) {
	r.nc.SetReadDeadline(time.Now().Add(time.Minute))
	var out []reply
	for {
		var f reply
		if err := r.dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				return out, nil
			}
			return out, err
		}
		out = append(out, f)
	}
}

// TestSilentConnectionsClosed: connections that never send a request are greeted, then
// told why and closed after Config.FirstFrame; one that went quiet after a call is closed
// after ConnIdle, and its client dials again transparently at its next call. The server
// logs a summary, not a line per connection, and keeps serving throughout.
func TestSilentConnectionsClosed(t *testing.T) {
	defer func(d time.Duration) { statsEvery = d }(statsEvery)
	statsEvery = 50 * time.Millisecond
	var logs syncBuffer
	impl := &toyImpl{}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid(), FirstFrame: 100 * time.Millisecond, ConnIdle: 150 * time.Millisecond, Log: log.New(&logs, "", 0)})
	var raws []*rawConn
	for range 20 {
		raws = append(raws, rawDial(t, path))
	}
	c := toyDial(t, path)
	var n int
	if err := c.Call(context.Background(), "Add", []any{1}, nil, nil, &n); err != nil || n != 1 {
		t.Fatalf("Add(1) beside 20 silent connections: %d, %v", n, err)
	}
	start := time.Now()
	for i, r := range raws {
		fs, err := r.frames()
		if err != nil || len(fs) != 2 || fs[0].Hello == nil || fs[0].Hello.Pid != os.Getpid() || !strings.HasPrefix(fs[1].Bye, "no request within 100ms") {
			t.Fatalf("silent connection %d got %+v, %v; want a greeting, a goodbye and the end", i, fs, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the silent connections took %s to close, want about 100 ms", d)
	}
	time.Sleep(400 * time.Millisecond) // c's connection is closed as idle
	c.mu.Lock()
	old := c.w
	c.mu.Unlock()
	select {
	case <-old.done:
	default:
		t.Fatal("an idle connection was not closed after ConnIdle")
	}
	if err := c.Call(context.Background(), "Add", []any{2}, nil, nil, &n); err != nil || n != 3 {
		t.Fatalf("Add(2) after the idle close: %d, %v; want 3 (dialled again)", n, err)
	}
	if st, err := c.Status(); err != nil || st.Calls != 2 {
		t.Errorf("Status after the idle close: %+v, %v", st, err)
	}
	waitUntil(t, "the summary log line", func() bool { return strings.Contains(logs.String(), "closed after 150ms idle") })
	silent := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var k int
		if _, err := fmt.Sscanf(line, "connections: %d closed for sending no request within 100ms", &k); err == nil {
			silent += k
		}
	}
	if l := logs.String(); silent != 20 || strings.Count(l, "\n") > 6 {
		t.Errorf("log:\n%s\nwant a few summary lines counting the 20 silent connections (counted %d)", l, silent)
	}
}

// TestConnectionLimit: at Config.MaxConns a new connection evicts the oldest silent one (it
// is told why), then the one idle longest (its client dials again unnoticed); when every
// connection has a call in flight the new one is refused with ErrBusy, and admitted again
// once a call ends.
func TestConnectionLimit(t *testing.T) {
	impl := &toyImpl{stepTime: 5 * time.Millisecond}
	s, path := toyServer(t, impl, Config{AllowUID: os.Getuid(), MaxConns: 4})
	idle := toyDial(t, path)
	var n int
	if err := idle.Call(context.Background(), "Add", []any{1}, nil, nil, &n); err != nil {
		t.Fatal(err)
	}
	var raws []*rawConn
	for range 3 {
		r := rawDial(t, path)
		var hello reply
		if err := r.dec.Decode(&hello); err != nil || hello.Hello == nil {
			t.Fatalf("greeting: %+v, %v", hello, err)
		}
		raws = append(raws, r)
	}
	// Four held: the next three evict the three silent ones, oldest first (each client
	// asks for the status at once, so it is not silent).
	var clients []*Client
	dial := func() {
		c := toyDial(t, path)
		if _, err := c.Status(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	for i := range 3 {
		dial()
		fs, err := raws[i].frames()
		if err != nil || len(fs) != 1 || !strings.Contains(fs[0].Bye, "evicted: the server holds 4 connections, its limit") {
			t.Fatalf("silent connection %d after client %d: %+v, %v; want evicted", i, i, fs, err)
		}
	}
	// The fourth evicts the idle client's connection, idle longest: its call ended before
	// its reply was sent (the server does not count it in flight any more, and its idle
	// time began before the others' status requests); that client dials again at its next
	// call.
	dial()
	waitUntil(t, "the idle client's eviction", func() bool {
		select {
		case <-idle.w.done:
			return true
		default:
			return false
		}
	})
	// Every connection busy: a long call on each of the four.
	done := make(chan error, 4)
	for _, c := range clients {
		go func() {
			var k int
			done <- c.Call(context.Background(), "Slow", []any{40}, nil, nil, &k)
		}()
	}
	waitUntil(t, "four calls in flight on the server", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		busy := 0
		for c := range s.conns {
			c.mu.Lock()
			if len(c.inflight) > 0 {
				busy++
			}
			c.mu.Unlock()
		}
		return busy == 4
	})
	if _, err := Dial(path, DialConfig{}); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "has 4 connections, each with a call in flight") {
		t.Errorf("Dial with every connection busy: %v, want ErrBusy", err)
	}
	for range clients {
		if err := <-done; err != nil {
			t.Errorf("a call at the limit: %v", err)
		}
	}
	if err := idle.Call(context.Background(), "Add", []any{1}, nil, nil, &n); err != nil || n != 2+4*40 {
		t.Errorf("the evicted idle client's next call: %d, %v; want %d", n, err, 2+4*40)
	}
}

// TestKeepAlive: a call that reports no progress for much longer than the client's
// ReplyTimeout stays alive through the server's keep-alive frames.
func TestKeepAlive(t *testing.T) {
	impl := &toyImpl{stepTime: 30 * time.Millisecond}
	_, path := toyServer(t, impl, Config{AllowUID: os.Getuid(), Heartbeat: 20 * time.Millisecond})
	c, err := Dial(path, DialConfig{Interrupted: errToyInterrupted, ReplyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n int
	if err := c.Call(context.Background(), "Slow", []any{20}, nil, nil, &n); err != nil || n != 20 {
		t.Errorf("a 600 ms call with a 100 ms reply timeout: %d, %v; want it kept alive", n, err)
	}
}

// frozenServer listens on a socket and, per connection, greets (unless greet is false) and
// answers its first request with a goodbye when byeFirst is set, its second with result 7,
// and never anything else: a server that stopped. It returns the socket and the number of
// requests each connection read.
func frozenServer(t *testing.T, greet, byeFirst bool) (string, func() []int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "frozen.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var reads []int
	go func() {
		for k := 0; ; k++ {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			mu.Lock()
			reads = append(reads, 0)
			mu.Unlock()
			go func() {
				enc, dec := gob.NewEncoder(nc), gob.NewDecoder(nc)
				if greet {
					enc.Encode(reply{Hello: &Hello{Pid: os.Getpid(), Heartbeat: 10 * time.Millisecond}})
				}
				for {
					var req request
					if dec.Decode(&req) != nil {
						return
					}
					mu.Lock()
					reads[k]++
					mu.Unlock()
					switch {
					case byeFirst && k == 0:
						enc.Encode(reply{Bye: "test goodbye"})
						nc.Close()
						return
					case byeFirst && k == 1:
						b, _ := encodeValues([]reflect.Value{reflect.ValueOf(7)})
						enc.Encode(reply{ID: req.ID, Results: b})
					}
				}
			}()
		}
	}()
	return path, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), reads...) }
}

// TestFrozenServer: a server that accepts but never greets fails Dial with ErrNoAnswer
// within its timeout; one that greets and then goes silent fails Status within the timeout
// and a call within its ReplyTimeout, with messages that say what happened; a goodbye
// before a request was read makes the client send it again on a new connection, once.
func TestFrozenServer(t *testing.T) {
	path, _ := frozenServer(t, false, false)
	start := time.Now()
	_, err := Dial(path, DialConfig{Timeout: 200 * time.Millisecond})
	if d := time.Since(start); !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "did not greet within 200ms: it is stopped (SIGSTOP), hung or overloaded") || d > 5*time.Second {
		t.Errorf("Dial of a server that never greets: %v after %s", err, d)
	}

	path, _ = frozenServer(t, true, false)
	c, err := Dial(path, DialConfig{Timeout: 200 * time.Millisecond, ReplyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start = time.Now()
	if _, err := c.Status(); !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "Status: ") || time.Since(start) > 5*time.Second {
		t.Errorf("Status of a silent server: %v after %s", err, time.Since(start))
	}
	start = time.Now()
	err = c.Call(context.Background(), "Slow", []any{1}, nil, nil)
	if d := time.Since(start); !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), "Slow: the session server is not answering") ||
		!strings.Contains(err.Error(), "sent nothing for 300ms") || d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("a call to a silent server: %v after %s; want ErrNoAnswer after 300 ms", err, d)
	}

	path, reads := frozenServer(t, true, true)
	c2, err := Dial(path, DialConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var n int
	if err := c2.Call(context.Background(), "Add", []any{1}, nil, nil, &n); err != nil || n != 7 {
		t.Errorf("a call answered by a goodbye first: %d, %v; want 7 from the second connection", n, err)
	}
	if r := reads(); fmt.Sprint(r) != "[1 1]" {
		t.Errorf("requests read per connection: %v, want [1 1] (sent again once)", r)
	}
}

// TestAcceptEMFILE: a server process out of file descriptors (a child whose RLIMIT_NOFILE
// is 64 and whose table is full but for 6 descriptors, facing 40 silent connections) does
// not exit when accept fails with EMFILE: it evicts silent connections, backs off, and a
// real client's call is answered.
func TestAcceptEMFILE(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "emfile.sock")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "NVG_RPC_TEST_CHILD=emfile", "NVG_RPC_TEST_SOCK="+path)
	var logs syncBuffer
	cmd.Stderr = &logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v\n%s", line, err, logs.String())
	}
	var raws []net.Conn
	for range 40 {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		raws = append(raws, nc)
	}
	c, err := Dial(path, DialConfig{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Dial of a server out of descriptors: %v\n%s", err, logs.String())
	}
	defer c.Close()
	var n int
	if err := c.Call(context.Background(), "Add", []any{5}, nil, nil, &n); err != nil || n != 5 {
		t.Fatalf("Add(5) on a server out of descriptors: %d, %v\n%s", n, err, logs.String())
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "too many open files") || !strings.Contains(l, "accept failed") || !strings.Contains(l, "served") {
		t.Errorf("the child's log does not show accept failing with EMFILE and the server going on:\n%s", l)
	}
}

// emfileChild serves the toy on NVG_RPC_TEST_SOCK with RLIMIT_NOFILE 64, its descriptor
// table filled but for 6, until stdin closes; it logs to stderr.
func emfileChild() int {
	logger := log.New(os.Stderr, "", 0)
	l, err := net.Listen("unix", os.Getenv("NVG_RPC_TEST_SOCK"))
	if err != nil {
		logger.Print(err)
		return 1
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}); err != nil {
		logger.Print(err)
		return 1
	}
	var fill []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fill = append(fill, f)
	}
	for _, f := range fill[len(fill)-6:] {
		f.Close()
	}
	s, err := NewServer(toyService(&toyImpl{}), Config{AllowUID: os.Getuid(), MaxConns: 1000, FirstFrame: 200 * time.Millisecond, Log: logger})
	if err != nil {
		logger.Print(err)
		return 1
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		s.Stop()
	}()
	fmt.Println("ready")
	if err := s.Serve(l); err != nil {
		logger.Print("Serve: ", err)
		return 1
	}
	logger.Printf("served %d calls", s.StatusNow().Calls)
	return 0
}

// waitUntil polls cond every 5 ms until it holds or 30 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
