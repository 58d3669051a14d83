package rpc

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Service is what a Server serves: the exported methods of Iface (an interface type),
// called on Impl (which implements it). Every method's last result must be error.
type Service struct {
	Impl  any
	Iface reflect.Type

	// Options, when set, returns the values of a variadic method's options from the
	// request's opaque option bytes and the running call (its context and progress sink).
	// A variadic method with no Options func is called without options.
	Options func(method string, opts []byte, call *Call) ([]reflect.Value, error)

	// Sentinels are errors that keep their identity across the wire: a method error that
	// errors.Is one of them comes back to the client as an error that errors.Is the same one
	// (the client lists the same errors in the same order).
	Sentinels []error

	// Interrupted is the error a method returns when its call's context was cancelled
	// (context.Canceled counts too); it comes back to the client as the client's
	// interrupted error (DialConfig.Interrupted).
	Interrupted error

	// Refuse lists methods of Iface that are not served, each with the reason given to a
	// client that asks for it (a bad request).
	Refuse map[string]string

	// After, when set, runs on the worker after each call (successful or not) with the
	// method, its arguments and its error; it returns the status note (Status.Note).
	After func(method string, args []reflect.Value, err error) string
}

// Call is the running call a method's options may observe.
type Call struct {
	ctx      context.Context
	progress func([]byte)
}

// Context is cancelled when the client interrupts the call, disconnects, or the server
// stops: the method should stop at its next step boundary.
func (c *Call) Context() context.Context { return c.ctx }

// Progress sends v (gob-encoded) to the client as a progress report of the call; a report
// that cannot be encoded or sent is dropped (the client may be gone).
func (c *Call) Progress(v any) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err == nil {
		c.progress(b.Bytes())
	}
}

// Config is how a Server runs.
type Config struct {
	// AllowUID is the only user id whose processes may connect (SO_PEERCRED); normally
	// os.Getuid(). Connections of any other user are answered with a refusal and closed.
	AllowUID int
	// Idle ends Serve when no call has run for this long (0: never).
	Idle time.Duration
	// Socket, when set, is the path of the listener's Unix socket: Serve ends when the file
	// there is removed or replaced (its session directory was deleted, another server took
	// the name), because no client can reach the server any more and it would only hold the
	// GPU. Checked every 10 s (or the idle check's period when shorter).
	Socket string
	// Note is the status note before the first call (Status.Note).
	Note string
	// Log receives one line per refused connection, panic and lifecycle event, and at most
	// one summary of closed connections and accept errors every 10 s.
	Log *log.Logger

	// MaxConns bounds the connections held at once (0: DefaultMaxConns). It is lowered to
	// half the process's file-descriptor limit (RLIMIT_NOFILE, read at every accept), so
	// connections never take the descriptors the served value needs (checkpoints, the GPU
	// driver). At the bound a new connection first evicts the oldest one that has sent
	// nothing, else the one idle longest without a call in flight; when every connection
	// has a call in flight it is refused with a frame that says so.
	MaxConns int
	// FirstFrame closes a connection whose first request has not come within this time
	// (0: DefaultFirstFrame).
	FirstFrame time.Duration
	// ConnIdle closes a connection that has had no call in flight and sent nothing for this
	// long (0: DefaultConnIdle); its client dials again at its next call without noticing.
	ConnIdle time.Duration
	// Heartbeat is the period of the keep-alive frames a connection gets while one of its
	// calls is queued or runs (0: DefaultHeartbeat).
	Heartbeat time.Duration
}

// Defaults of Config.
const (
	DefaultMaxConns   = 128
	DefaultFirstFrame = 5 * time.Second
	DefaultConnIdle   = time.Minute
	DefaultHeartbeat  = time.Second
)

// orphanCheck is how often Serve checks Config.Socket (tests lower it).
var orphanCheck = 10 * time.Second

// statsEvery is how often at most the connection summary is logged (tests lower it).
var statsEvery = 10 * time.Second

// Server serves one Service on a listener.
type Server struct {
	svc     Service
	cfg     Config
	methods map[string]reflect.Method
	jobs    chan *job
	stop    chan struct{} // closed by Stop
	once    sync.Once
	ctx     context.Context // cancelled by Stop: running calls stop at a boundary
	cancel  context.CancelFunc

	mu     sync.Mutex
	status Status
	conns  map[*conn]bool // the connections held (an evicted one leaves at once)
	stats  connStats
}

// connStats counts what the server did about connections since the last summary line.
type connStats struct {
	silent, idle, evicted, busy, acceptErrs int
	lastAcceptErr                           string
	logged                                  time.Time
}

type job struct {
	c      *conn
	req    request
	ctx    context.Context
	cancel context.CancelFunc
}

// NewServer checks svc (Iface is an interface Impl implements, every method ends in error)
// and returns a server for it.
func NewServer(svc Service, cfg Config) (*Server, error) {
	if svc.Iface == nil || svc.Iface.Kind() != reflect.Interface {
		return nil, errors.New("rpc: Service.Iface must be an interface type")
	}
	if svc.Impl == nil || !reflect.TypeOf(svc.Impl).Implements(svc.Iface) {
		return nil, fmt.Errorf("rpc: Service.Impl (%T) does not implement %s", svc.Impl, svc.Iface)
	}
	if cfg.Log == nil {
		cfg.Log = log.New(io.Discard, "", 0)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.FirstFrame <= 0 {
		cfg.FirstFrame = DefaultFirstFrame
	}
	if cfg.ConnIdle <= 0 {
		cfg.ConnIdle = DefaultConnIdle
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	errType := reflect.TypeOf((*error)(nil)).Elem()
	s := &Server{svc: svc, cfg: cfg, methods: map[string]reflect.Method{}, jobs: make(chan *job), stop: make(chan struct{}), conns: map[*conn]bool{}}
	for i := 0; i < svc.Iface.NumMethod(); i++ {
		m := svc.Iface.Method(i)
		if m.Type.NumOut() == 0 || m.Type.Out(m.Type.NumOut()-1) != errType {
			return nil, fmt.Errorf("rpc: method %s must return an error last", m.Name)
		}
		s.methods[m.Name] = m
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	now := time.Now()
	s.status = Status{Pid: os.Getpid(), Started: now, LastActive: now, Idle: cfg.Idle, Note: cfg.Note}
	return s, nil
}

// Stop asks Serve to return: the running call is cancelled (it stops at its next step
// boundary and answers its client), queued calls are refused, the listener closes.
func (s *Server) Stop() {
	s.once.Do(func() {
		close(s.stop)
		s.cancel()
	})
}

// Serve accepts connections on l until Stop or the idle timeout, and returns after the
// running call has finished. It returns nil when stopped or idle, and net.ErrClosed's error
// when l was closed by someone else. An accept that fails otherwise (EMFILE or ENFILE: out
// of file descriptors, ECONNABORTED, …) never ends it: it evicts a connection when out of
// descriptors, backs off (5 ms doubling to 1 s) and accepts again.
func (s *Server) Serve(l net.Listener) error {
	var sock os.FileInfo
	if s.cfg.Socket != "" {
		var err error
		if sock, err = os.Stat(s.cfg.Socket); err != nil {
			return fmt.Errorf("rpc: the socket %s: %w", s.cfg.Socket, err)
		}
	}
	workerDone := make(chan struct{})
	go s.worker(workerDone)
	acceptErr := make(chan error, 1)
	go s.acceptLoop(l, acceptErr)
	var tick <-chan time.Time
	if s.cfg.Idle > 0 || sock != nil {
		period := orphanCheck
		if s.cfg.Idle > 0 {
			period = min(s.cfg.Idle/4+time.Millisecond, period)
		}
		t := time.NewTicker(period)
		defer t.Stop()
		tick = t.C
	}
	stats := time.NewTicker(statsEvery)
	defer stats.Stop()
	var err error
loop:
	for {
		select {
		case <-stats.C:
			s.logStats(false)
		case <-s.stop:
			break loop
		case err = <-acceptErr:
			break loop
		case <-tick:
			if sock != nil {
				if fi, err := os.Stat(s.cfg.Socket); err != nil || !os.SameFile(fi, sock) {
					s.cfg.Log.Printf("the socket %s was removed or replaced: no client can reach this server; exiting", s.cfg.Socket)
					break loop
				}
			}
			if s.cfg.Idle <= 0 {
				continue
			}
			s.mu.Lock()
			idle := s.status.Busy == "" && time.Since(s.status.LastActive) >= s.cfg.Idle
			s.mu.Unlock()
			if idle {
				s.cfg.Log.Printf("idle for %s: exiting", s.cfg.Idle)
				break loop
			}
		}
	}
	s.Stop()
	l.Close()
	<-workerDone
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.logStats(true)
	select {
	case <-s.stop:
		if err != nil && errors.Is(err, net.ErrClosed) {
			err = nil
		}
	default:
	}
	return err
}

// StatusNow returns the server's status.
func (s *Server) StatusNow() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// worker executes the queued calls one at a time on one OS thread.
func (s *Server) worker(done chan struct{}) {
	defer close(done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-s.stop:
			return
		case j := <-s.jobs:
			s.run(j)
		}
	}
}

func (s *Server) run(j *job) {
	defer j.cancel()
	if j.ctx.Err() != nil { // interrupted (or its client gone) before it started
		j.c.finish(j.req.ID, reply{ID: j.req.ID, Err: "interrupted before it started", Code: codeInterrupted}, s.cfg.ConnIdle)
		return
	}
	s.mu.Lock()
	s.status.Busy = j.req.Method
	s.mu.Unlock()
	results, args, err, code := s.invoke(j)
	note := ""
	if s.svc.After != nil && code != codeBadRequest {
		note = s.after(j.req.Method, args, err)
	}
	s.mu.Lock()
	s.status.Busy = ""
	s.status.Calls++
	s.status.LastActive = time.Now()
	if note != "" {
		s.status.Note = note
	}
	s.mu.Unlock()
	r := reply{ID: j.req.ID, Code: code}
	if err != nil {
		r.Err = err.Error()
		// What the method returned beside its error goes back too: the steps a Step did
		// before it was interrupted or failed.
		if b, eerr := encodeValues(results); eerr == nil {
			r.Results = b
		}
	} else {
		b, eerr := encodeValues(results)
		if eerr != nil {
			r.Code, r.Err = codeApp, fmt.Sprintf("%s: cannot encode the results: %v", j.req.Method, eerr)
		}
		r.Results = b
	}
	j.c.finish(j.req.ID, r, s.cfg.ConnIdle) // dropped when the client is gone
}

func (s *Server) after(method string, args []reflect.Value, err error) (note string) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Log.Printf("panic in the status hook after %s: %v\n%s", method, p, debug.Stack())
		}
	}()
	return s.svc.After(method, args, err)
}

// invoke validates and runs one call; code says how err came about.
func (s *Server) invoke(j *job) (results, args []reflect.Value, err error, code int) {
	m, ok := s.methods[j.req.Method]
	if why, refused := s.svc.Refuse[j.req.Method]; refused {
		return nil, nil, fmt.Errorf("bad request: %s is not served: %s", j.req.Method, why), codeBadRequest
	}
	if !ok {
		return nil, nil, fmt.Errorf("bad request: no method %q", j.req.Method), codeBadRequest
	}
	ft := m.Type
	nfixed := ft.NumIn()
	if ft.IsVariadic() {
		nfixed--
	}
	if j.req.NArgs != nfixed {
		return nil, nil, fmt.Errorf("bad request: %s takes %d arguments, got %d", m.Name, nfixed, j.req.NArgs), codeBadRequest
	}
	types := make([]reflect.Type, nfixed)
	for i := range types {
		types[i] = ft.In(i)
	}
	args, err = decodeValues(j.req.Args, types)
	if err != nil {
		return nil, nil, fmt.Errorf("bad request: %s arguments: %v", m.Name, err), codeBadRequest
	}
	call := &Call{ctx: j.ctx, progress: func(b []byte) { j.c.send(reply{ID: j.req.ID, Progress: b}) }}
	in := args
	if ft.IsVariadic() && s.svc.Options != nil {
		opts, err := s.svc.Options(m.Name, j.req.Opts, call)
		if err != nil {
			return nil, args, fmt.Errorf("bad request: %s options: %v", m.Name, err), codeBadRequest
		}
		in = append(append([]reflect.Value(nil), args...), opts...)
	} else if len(j.req.Opts) != 0 {
		return nil, args, fmt.Errorf("bad request: %s takes no options", m.Name), codeBadRequest
	}
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Log.Printf("panic in %s: %v\n%s", m.Name, p, debug.Stack())
			results, err, code = nil, fmt.Errorf("internal error in %s (the server recovered; its log has the stack): %v", m.Name, p), codePanic
		}
	}()
	out := reflect.ValueOf(s.svc.Impl).MethodByName(m.Name).Call(in)
	if e := out[len(out)-1]; !e.IsNil() {
		err = e.Interface().(error)
		return out[:len(out)-1], args, err, s.sentinelCode(err)
	}
	return out[:len(out)-1], args, nil, codeOK
}

// sentinelCode is the code of err: its sentinel's, or codeApp.
func (s *Server) sentinelCode(err error) int {
	if errors.Is(err, context.Canceled) || (s.svc.Interrupted != nil && errors.Is(err, s.svc.Interrupted)) {
		return codeInterrupted
	}
	for i, se := range s.svc.Sentinels {
		if errors.Is(err, se) {
			return codeSentinel + i
		}
	}
	return codeApp
}

// acceptLoop accepts connections until l is closed. Other accept errors never end it: out
// of file descriptors it evicts a connection (admit's order), then it backs off and retries.
func (s *Server) acceptLoop(l net.Listener, closed chan<- error) {
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err == nil {
			delay = 0
			s.admit(nc)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			closed <- err
			return
		}
		s.mu.Lock()
		s.stats.acceptErrs++
		s.stats.lastAcceptErr = err.Error()
		var v *conn
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			v = s.evictOne("the server ran out of file descriptors")
		}
		s.mu.Unlock()
		v.closed()
		s.logStats(false)
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		select {
		case <-time.After(delay):
		case <-s.stop:
			return
		}
	}
}

// connLimit is Config.MaxConns, lowered to half the file-descriptor limit.
func (s *Server) connLimit() int {
	n := s.cfg.MaxConns
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/2 < uint64(n) {
		n = int(rl.Cur / 2)
	}
	return max(n, 2)
}

// admit takes a new connection: at the limit it evicts one (evictOne) or, when every
// connection has a call in flight, refuses the new one with a frame that says so.
func (s *Server) admit(nc net.Conn) {
	now := time.Now()
	c := &conn{nc: nc, enc: gob.NewEncoder(nc), done: make(chan struct{}), accepted: now, last: now, inflight: map[uint64]context.CancelFunc{}}
	s.mu.Lock()
	limit := s.connLimit()
	var victims []*conn
	for len(s.conns) >= limit {
		v := s.evictOne(fmt.Sprintf("evicted: the server holds %d connections, its limit", limit))
		if v == nil {
			break
		}
		victims = append(victims, v)
	}
	full := len(s.conns) >= limit
	if full {
		s.stats.busy++
	} else {
		s.conns[c] = true
	}
	s.mu.Unlock()
	for _, v := range victims { // their descriptors are free before this one is served
		v.closed()
	}
	if full {
		go func() {
			c.send(reply{Code: codeBusy, Err: fmt.Sprintf("the session server (pid %d) has %d connections, each with a call in flight, its limit (Config.MaxConns, at most half its file-descriptor limit): this one is closed; try again when a call ends", os.Getpid(), limit)})
			nc.Close()
		}()
		s.logStats(false)
		return
	}
	go s.handle(c)
}

// evictOne closes, with a Bye saying why, the held connection that has sent nothing for the
// longest time, else the one idle longest without a call in flight, and returns it (nil when
// every connection has a call in flight). The caller holds s.mu; it waits for the
// connection to close (conn.closed) after releasing it.
func (s *Server) evictOne(why string) *conn {
	for {
		var best *conn
		var bestSilent bool
		var bestT time.Time
		for c := range s.conns {
			c.mu.Lock()
			ok, silent, t := c.evicted == "" && len(c.inflight) == 0, c.frames == 0, c.last
			c.mu.Unlock()
			if !ok {
				continue
			}
			if best == nil || silent && !bestSilent || silent == bestSilent && t.Before(bestT) {
				best, bestSilent, bestT = c, silent, t
			}
		}
		if best == nil {
			return nil
		}
		delete(s.conns, best)
		if best.evict(why) {
			s.stats.evicted++
			return best
		}
		// A call came in between: it keeps its connection (dropped from the count only
		// until it ends: the count errs on the side of fewer descriptors).
	}
}

// logStats logs, at most every statsEvery (or now when final), what was done about
// connections since the last line.
func (s *Server) logStats(final bool) {
	s.mu.Lock()
	st := s.stats
	if st == (connStats{logged: st.logged}) || !final && time.Since(st.logged) < statsEvery {
		s.mu.Unlock()
		return
	}
	s.stats = connStats{logged: time.Now()}
	limit := s.connLimit()
	s.mu.Unlock()
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(st.silent, fmt.Sprintf("closed for sending no request within %s", s.cfg.FirstFrame))
	add(st.idle, fmt.Sprintf("closed after %s idle", s.cfg.ConnIdle))
	add(st.evicted, fmt.Sprintf("evicted at the limit of %d connections", limit))
	add(st.busy, "refused (every connection had a call in flight)")
	if st.acceptErrs > 0 {
		parts = append(parts, fmt.Sprintf("accept failed %d times (last: %s; retried with back-off)", st.acceptErrs, st.lastAcceptErr))
	}
	s.cfg.Log.Printf("connections: %s", strings.Join(parts, ", "))
}

// conn is one client connection.
type conn struct {
	nc   net.Conn
	wmu  sync.Mutex
	enc  *gob.Encoder
	done chan struct{} // closed when the connection ends

	mu       sync.Mutex
	accepted time.Time
	last     time.Time // when the last request came or the last call ended
	frames   int       // requests read
	inflight map[uint64]context.CancelFunc
	beating  bool   // a keep-alive goroutine runs
	evicted  string // why the server closes it ("" while it is kept)
}

func (c *conn) send(r reply) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.write(r)
}

// finish ends call id with its final reply r: the call leaves the connection's calls (the
// connection's idle time starts now) and r is written, both under c.wmu. So a client that
// has its reply finds its call ended on the server: its connection is idle from then on,
// and is the one a new connection evicts when it has been idle longest. And the goodbye of
// an eviction, which can only come once the call has ended, waits for c.wmu, so it never
// overtakes the reply (the client would take the call for unread and send it again).
func (c *conn) finish(id uint64, r reply, idle time.Duration) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.callEnded(id, idle)
	c.write(r)
}

// write sends r; the caller holds c.wmu.
func (c *conn) write(r reply) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a client that stops reading is dropped
	if err := c.enc.Encode(r); err != nil {
		c.nc.Close()
	}
}

// readUntil sets the read deadline (a past one once the connection is evicted). The
// caller holds c.mu.
func (c *conn) readUntil(t time.Time) {
	if c.evicted != "" {
		t = time.Unix(1, 0)
	}
	_ = c.nc.SetReadDeadline(t)
}

// evict marks the connection closed for why and wakes its reader, unless a call is in
// flight on it.
func (c *conn) evict(why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.evicted != "" || len(c.inflight) > 0 {
		return false
	}
	c.evicted = why
	c.readUntil(time.Time{})
	return true
}

// closed waits (at most a second: its goodbye has a write deadline) until an evicted
// connection has closed, so that its descriptor is free. A nil c is closed.
func (c *conn) closed() {
	if c == nil {
		return
	}
	select {
	case <-c.done:
	case <-time.After(time.Second):
	}
}

// callEnded removes call id from the connection's calls (a no-op once done: finish did it
// before the call's reply); the last one ending starts the idle timer.
func (c *conn) callEnded(id uint64, idle time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inflight[id]; !ok {
		return
	}
	delete(c.inflight, id)
	c.last = time.Now()
	if len(c.inflight) == 0 {
		c.readUntil(c.last.Add(idle))
	}
}

// beat sends a keep-alive every period while the connection has a call queued or running.
func (s *Server) beat(c *conn) {
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		c.mu.Lock()
		if len(c.inflight) == 0 {
			c.beating = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.send(reply{Beat: true})
	}
}

// drop forgets a connection that ended: it closes it and cancels its calls (they stop at a
// step boundary; their replies are dropped).
func (s *Server) drop(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.nc.Close()
	close(c.done) // after the close: the descriptor is free when done is

	c.mu.Lock()
	for _, cancel := range c.inflight {
		cancel()
	}
	c.mu.Unlock()
}

// handle greets a connection and reads its requests until it closes, stays silent past its
// deadline (FirstFrame, then ConnIdle while no call is in flight) or is evicted; the last
// two get a Bye first.
func (s *Server) handle(c *conn) {
	defer s.drop(c)
	if uid, pid, err := peerUID(c.nc); err != nil || uid != s.cfg.AllowUID {
		msg := fmt.Sprintf("connection refused: the peer's credentials cannot be read (%v)", err)
		if err == nil {
			msg = fmt.Sprintf("connection refused: the connecting process (pid %d) runs as uid %d, this session belongs to uid %d", pid, uid, s.cfg.AllowUID)
		}
		s.cfg.Log.Print(msg)
		c.send(reply{Err: msg, Code: codeRefused})
		return
	}
	c.send(reply{Hello: &Hello{Pid: os.Getpid(), Heartbeat: s.cfg.Heartbeat}})
	c.mu.Lock()
	c.readUntil(c.accepted.Add(s.cfg.FirstFrame))
	c.mu.Unlock()
	dec := gob.NewDecoder(c.nc)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.bye(c)
			}
			return // closed, silent, evicted, or not our protocol: the connection ends
		}
		c.mu.Lock()
		c.frames++
		c.last = time.Now()
		evicted := c.evicted != ""
		c.mu.Unlock()
		if evicted { // not served: the client sends it again on a new connection
			s.bye(c)
			return
		}
		switch req.Kind {
		case kindCall:
			if !s.queue(c, req) {
				s.bye(c)
				return
			}
		case kindInterrupt:
			c.mu.Lock()
			if cancel := c.inflight[req.ID]; cancel != nil {
				cancel()
			}
			c.mu.Unlock()
		case kindStatus:
			st := s.StatusNow()
			c.send(reply{ID: req.ID, Status: &st})
		case kindStop:
			s.cfg.Log.Print("stop requested by a client")
			st := s.StatusNow()
			c.send(reply{ID: req.ID, Status: &st})
			s.Stop()
		default:
			c.send(reply{ID: req.ID, Err: fmt.Sprintf("bad request: unknown frame kind %d", req.Kind), Code: codeBadRequest})
		}
		c.mu.Lock()
		if len(c.inflight) == 0 {
			c.readUntil(c.last.Add(s.cfg.ConnIdle))
		}
		c.mu.Unlock()
	}
}

// bye tells the client why its connection closes and counts it.
func (s *Server) bye(c *conn) {
	c.mu.Lock()
	why, silent := c.evicted, c.frames == 0
	c.mu.Unlock()
	s.mu.Lock()
	switch {
	case why != "":
	case silent:
		why = fmt.Sprintf("no request within %s of connecting", s.cfg.FirstFrame)
		s.stats.silent++
	default:
		why = fmt.Sprintf("idle for %s without a call", s.cfg.ConnIdle)
		s.stats.idle++
	}
	s.mu.Unlock()
	c.send(reply{Bye: why})
	s.logStats(false)
}

// queue registers call req of c and hands it to the worker; while it waits and runs, c gets
// keep-alive frames. It returns false, running nothing, when c was evicted meanwhile.
func (s *Server) queue(c *conn, req request) bool {
	ctx, cancel := context.WithCancel(s.ctx)
	id := req.ID
	c.mu.Lock()
	if c.evicted != "" {
		c.mu.Unlock()
		cancel()
		return false
	}
	if _, dup := c.inflight[id]; dup {
		c.mu.Unlock()
		cancel()
		c.send(reply{ID: id, Err: fmt.Sprintf("bad request: call %d is already in flight on this connection", id), Code: codeBadRequest})
		return true
	}
	c.inflight[id] = cancel
	c.readUntil(time.Time{})
	startBeat := !c.beating
	c.beating = true
	c.mu.Unlock()
	if startBeat {
		go s.beat(c)
	}
	j := &job{c: c, req: req, ctx: ctx, cancel: func() {
		cancel()
		c.callEnded(id, s.cfg.ConnIdle)
	}}
	go func() {
		select {
		case s.jobs <- j:
		case <-s.stop:
			c.finish(id, reply{ID: id, Err: "the session server is stopping", Code: codeInterrupted}, s.cfg.ConnIdle)
			j.cancel()
		}
	}()
	return true
}

// peerUID returns the user and process id of the process at the other end of a Unix
// socket (SO_PEERCRED, read by the kernel at connect time: it cannot be forged).
func peerUID(nc net.Conn) (uid, pid int, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0, 0, fmt.Errorf("not a Unix-domain connection (%T)", nc)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}
