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
	// Note is the status note before the first call (Status.Note).
	Note string
	// Log receives one line per refused connection, panic and lifecycle event.
	Log *log.Logger
}

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
	conns  map[*conn]bool
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
// running call has finished. It returns nil when stopped or idle, and the listener's error
// otherwise.
func (s *Server) Serve(l net.Listener) error {
	workerDone := make(chan struct{})
	go s.worker(workerDone)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			go s.handle(nc)
		}
	}()
	var tick <-chan time.Time
	if s.cfg.Idle > 0 {
		t := time.NewTicker(min(s.cfg.Idle/4+time.Millisecond, time.Minute))
		defer t.Stop()
		tick = t.C
	}
	var err error
loop:
	for {
		select {
		case <-s.stop:
			break loop
		case err = <-acceptErr:
			break loop
		case <-tick:
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
		j.c.send(reply{ID: j.req.ID, Err: "interrupted before it started", Code: codeInterrupted})
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
	} else {
		b, eerr := encodeValues(results)
		if eerr != nil {
			r.Code, r.Err = codeApp, fmt.Sprintf("%s: cannot encode the results: %v", j.req.Method, eerr)
		}
		r.Results = b
	}
	j.c.send(r) // dropped when the client is gone
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
		return nil, args, err, s.sentinelCode(err)
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

// conn is one client connection.
type conn struct {
	nc  net.Conn
	wmu sync.Mutex
	enc *gob.Encoder
}

func (c *conn) send(r reply) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a client that stops reading is dropped
	if err := c.enc.Encode(r); err != nil {
		c.nc.Close()
	}
}

// handle reads one connection's requests until it closes; when it does, its calls are
// cancelled (they stop at a step boundary; their replies are dropped).
func (s *Server) handle(nc net.Conn) {
	c := &conn{nc: nc, enc: gob.NewEncoder(nc)}
	defer nc.Close()
	if uid, pid, err := peerUID(nc); err != nil || uid != s.cfg.AllowUID {
		msg := fmt.Sprintf("connection refused: the peer's credentials cannot be read (%v)", err)
		if err == nil {
			msg = fmt.Sprintf("connection refused: the connecting process (pid %d) runs as uid %d, this session belongs to uid %d", pid, uid, s.cfg.AllowUID)
		}
		s.cfg.Log.Print(msg)
		c.send(reply{Err: msg, Code: codeRefused})
		return
	}
	s.mu.Lock()
	s.conns[c] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	var mu sync.Mutex
	inflight := map[uint64]context.CancelFunc{}
	defer func() {
		mu.Lock()
		for _, cancel := range inflight {
			cancel()
		}
		mu.Unlock()
	}()
	dec := gob.NewDecoder(nc)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return // closed, or not our protocol: either way the connection ends
		}
		switch req.Kind {
		case kindCall:
			ctx, cancel := context.WithCancel(s.ctx)
			mu.Lock()
			inflight[req.ID] = cancel
			mu.Unlock()
			id := req.ID
			j := &job{c: c, req: req, ctx: ctx, cancel: func() {
				cancel()
				mu.Lock()
				delete(inflight, id)
				mu.Unlock()
			}}
			go func() {
				select {
				case s.jobs <- j:
				case <-s.stop:
					c.send(reply{ID: j.req.ID, Err: "the session server is stopping", Code: codeInterrupted})
					j.cancel()
				}
			}()
		case kindInterrupt:
			mu.Lock()
			if cancel := inflight[req.ID]; cancel != nil {
				cancel()
			}
			mu.Unlock()
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
	}
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
