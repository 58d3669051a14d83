package rpc

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// ErrConnLost is wrapped by the error of a call whose connection broke (the server died,
// stopped, or closed it) before the call's reply came, and of a call that found another
// server (another pid) on the socket when it dialled again.
var ErrConnLost = errors.New("connection to the session server lost")

// ErrRefused is wrapped by the error of a call the server refused at connect time (the peer
// check: another user's process).
var ErrRefused = errors.New("connection refused by the session server")

// ErrBadRequest is wrapped by the error of a call the server refused as malformed (no such
// method, wrong arguments); it did not touch the served value.
var ErrBadRequest = errors.New("bad request")

// ErrNoAnswer is wrapped by the error of a Dial, Status, Stop or call whose server did not
// answer in time: no greeting within DialConfig.Timeout of connecting, no answer to Status
// or Stop within Timeout, or nothing at all (no reply, progress or keep-alive) for
// ReplyTimeout while a call waited. Its process is stopped (SIGSTOP), hung, or overloaded;
// the connection is closed, so a call the server still holds stops at its next step boundary
// when it runs again. It does not wrap ErrConnLost: the server may well run on.
var ErrNoAnswer = errors.New("the session server is not answering")

// ErrBusy is wrapped by the error of a Dial the server refused at its connection limit
// (every connection it holds has a call in flight).
var ErrBusy = errors.New("the session server has too many connections")

// Defaults of DialConfig.
const (
	DefaultTimeout      = 3 * time.Second
	DefaultReplyTimeout = 10 * time.Second
)

// DialConfig is how a Client maps the server's errors back and how long it waits.
type DialConfig struct {
	// Sentinels: the same list, in the same order, as the server's Service.Sentinels.
	Sentinels []error
	// Interrupted is wrapped by the error of an interrupted call (nil: context.Canceled).
	Interrupted error
	// Timeout bounds connecting and the server's greeting, and the answer to Status and
	// Stop, which the server gives at once (0: DefaultTimeout).
	Timeout time.Duration
	// ReplyTimeout bounds the silence while a call waits: when no reply, progress or
	// keep-alive frame comes for this long, the call fails with ErrNoAnswer (0:
	// DefaultReplyTimeout; never less than 5 of the server's keep-alive periods). A long
	// call of a live server never times out: its keep-alives come every second.
	ReplyTimeout time.Duration
}

// Client is one client of a server; its calls run one at a time. It holds one connection
// and dials again, transparently, when the server closed it between calls (idle, or evicted
// at its connection limit) or said goodbye before reading a request (which it then sends
// again); the server it reaches again must be the same process (ServerPid), else the call
// fails with ErrConnLost.
type Client struct {
	path      string
	cfg       DialConfig
	ServerPid int // the server's process id (SO_PEERCRED at connect time)
	ServerUID int // the server's user id

	callMu  sync.Mutex // one call at a time
	nextID  uint64
	current atomic.Uint64 // the id of the call waiting for its reply (0: none)

	mu     sync.Mutex
	w      *wire         // the connection
	beat   time.Duration // the server's keep-alive period (its greeting)
	closed bool
}

// wire is one connection of a Client and its reader.
type wire struct {
	nc     net.Conn
	wmu    sync.Mutex
	enc    *gob.Encoder
	frames chan reply
	done   chan struct{} // closed when the reader ends
	err    error         // why the reader ended; set before frames and done are closed
}

func (w *wire) read() {
	dec := gob.NewDecoder(w.nc)
	for {
		var r reply
		if err := dec.Decode(&r); err != nil {
			w.err = err
			close(w.frames)
			close(w.done)
			return
		}
		w.frames <- r
	}
}

// end closes the connection and waits for its reader to stop (so live dials again),
// dropping the frames it still delivers.
func (w *wire) end() {
	w.nc.Close()
	for range w.frames {
	}
	<-w.done // closed just after frames: live must see it, or it hands out this closed wire
}

func (w *wire) send(req request) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return w.enc.Encode(req)
}

// Dial connects to the server listening on the Unix socket at path and waits for its
// greeting. Errors: the dial's; ErrRefused (another user's server, or this user refused by
// the peer check), ErrBusy (the server's connection limit), ErrNoAnswer (no greeting within
// cfg.Timeout: the server is stopped or hung).
func Dial(path string, cfg DialConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = DefaultReplyTimeout
	}
	w, uid, pid, hello, err := dialWire(path, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	return &Client{path: path, cfg: cfg, ServerPid: pid, ServerUID: uid, w: w, beat: hello.Heartbeat}, nil
}

// dialWire connects, reads the peer's credentials and waits up to timeout for the greeting.
func dialWire(path string, timeout time.Duration) (w *wire, uid, pid int, hello *Hello, err error) {
	deadline := time.Now().Add(timeout)
	nc, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	uid, pid, err = peerUID(nc)
	if err != nil {
		nc.Close()
		return nil, 0, 0, nil, err
	}
	w = &wire{nc: nc, enc: gob.NewEncoder(nc), frames: make(chan reply, 64), done: make(chan struct{})}
	go w.read()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r, ok := <-w.frames:
		switch {
		case !ok:
			err = fmt.Errorf("%w: the server at %s (pid %d) closed the connection before greeting it (%v)", ErrConnLost, path, pid, w.err)
		case r.Code == codeRefused:
			err = fmt.Errorf("%w: %s", ErrRefused, r.Err)
		case r.Code == codeBusy:
			err = fmt.Errorf("%w: %s", ErrBusy, r.Err)
		case r.Hello == nil:
			err = fmt.Errorf("the server at %s (pid %d) did not greet this client (its first frame is not a greeting): an nvg older than this client? Stop it (nvg session stop) and attach again", path, pid)
		default:
			return w, uid, pid, r.Hello, nil
		}
	case <-t.C:
		err = fmt.Errorf("%w: the session server at %s (pid %d) accepted the connection but did not greet within %s: it is stopped (SIGSTOP), hung or overloaded", ErrNoAnswer, path, pid, timeout)
	}
	nc.Close()
	return nil, 0, 0, nil, err
}

// Close closes the connection (a call running on the server for it is interrupted).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return c.w.nc.Close()
}

// live returns the connection, dialling again when the server closed it (the same server
// must answer).
func (c *Client) live() (*wire, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("%w: the client was closed", ErrConnLost)
	}
	select {
	case <-c.w.done:
	default:
		return c.w, nil
	}
	w, _, pid, hello, err := dialWire(c.path, c.cfg.Timeout)
	switch {
	case errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrRefused) || errors.Is(err, ErrBusy):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: dialling again after the connection closed (%v): %v", ErrConnLost, c.w.err, err)
	case pid != c.ServerPid:
		w.nc.Close()
		return nil, fmt.Errorf("%w: another server (pid %d, not %d) answers on %s", ErrConnLost, pid, c.ServerPid, c.path)
	}
	c.w, c.beat = w, hello.Heartbeat
	return w, nil
}

// replyTimeout is the silence after which a waiting call gives up.
func (c *Client) replyTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.cfg.ReplyTimeout, 5*c.beat)
}

// errBye is returned by wait when the server said goodbye before answering: the request was
// not run and is sent again on a new connection.
var errBye = errors.New("the server closed the connection before reading the request")

// maxResends bounds how often one request is sent again after a goodbye.
const maxResends = 3

// exchange sends req and waits for its final reply (progress goes to progress), sending it
// again on a new connection when the server says goodbye first. When ctx is done the server
// is asked to stop the call, and exchange waits for its answer. silence bounds the wait for
// any frame.
func (c *Client) exchange(ctx context.Context, what string, req request, progress func([]byte), silence func() time.Duration) (reply, error) {
	for try := 0; ; try++ {
		w, err := c.live()
		if err != nil {
			return reply{}, err
		}
		if err := w.send(req); err != nil {
			err = c.sendFailed(w, err)
			if errors.Is(err, errBye) && try < maxResends {
				continue
			}
			return reply{}, err
		}
		r, err := c.wait(ctx, w, req.ID, what, progress, silence())
		if errors.Is(err, errBye) && try < maxResends {
			continue
		}
		return r, err
	}
}

// sendFailed is the error of a request that could not be written: errBye when the server
// said goodbye (the request was not read), else ErrConnLost.
func (c *Client) sendFailed(w *wire, err error) error {
	timeout := time.After(time.Second)
	for {
		select {
		case r, ok := <-w.frames:
			if !ok {
				return fmt.Errorf("%w: %v", ErrConnLost, err)
			}
			if r.Bye != "" {
				w.end()
				return fmt.Errorf("%w (%s)", errBye, r.Bye)
			}
		case <-timeout:
			w.end()
			return fmt.Errorf("%w: %v", ErrConnLost, err)
		}
	}
}

// wait waits for the final reply of request id on w, passing its progress on. Any frame
// resets the silence timer; when it runs out the connection is closed and the error wraps
// ErrNoAnswer.
func (c *Client) wait(ctx context.Context, w *wire, id uint64, what string, progress func([]byte), silence time.Duration) (reply, error) {
	done := ctx.Done()
	timer := time.NewTimer(silence)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-w.frames:
			if !ok {
				return reply{}, fmt.Errorf("%w: %v", ErrConnLost, w.err)
			}
			switch {
			case r.Bye != "":
				w.end()
				return reply{}, fmt.Errorf("%w (%s)", errBye, r.Bye)
			case r.Code == codeRefused:
				return r, fmt.Errorf("%w: %s", ErrRefused, r.Err)
			case r.ID != id: // a keep-alive, or a late frame of an earlier call
			case r.Progress != nil:
				if progress != nil {
					progress(r.Progress)
				}
			default:
				return r, nil
			}
			timer.Reset(silence) // after the progress callback: its time is not the server's silence
		case <-done:
			done = nil // ask once, then wait for the call's own answer
			if err := w.send(request{ID: id, Kind: kindInterrupt}); err != nil {
				return reply{}, fmt.Errorf("%w: %v", ErrConnLost, err)
			}
		case <-timer.C:
			w.end()
			return reply{}, fmt.Errorf("%s: %w: the session server at %s (pid %d) sent nothing for %s — no answer, no progress, no keep-alive (a live server sends one every %s while a call waits): it is stopped (SIGSTOP) or hung. This client closed its connection; if the server runs again, a call it holds stops at its next step boundary",
				what, ErrNoAnswer, c.path, c.ServerPid, silence, c.heartbeat())
		}
	}
}

func (c *Client) heartbeat() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beat
}

// Call runs method on the server with args (gob-encodable values, in the method's order)
// and opts (the method's option bytes, nil for none), and decodes the results (without the
// error) into the pointers in results — also when the method returned an error with them
// (an interrupted Step's steps done). Progress reports go to progress (when not nil) as
// their gob bytes. When ctx is cancelled, the server is asked to stop the call at its next
// step boundary and Call waits for its answer (an error wrapping DialConfig.Interrupted).
// A server that sends nothing for DialConfig.ReplyTimeout fails the call with ErrNoAnswer;
// a broken connection with ErrConnLost.
func (c *Client) Call(ctx context.Context, method string, args []any, opts []byte, progress func([]byte), results ...any) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	vals := make([]reflect.Value, len(args))
	for i, a := range args {
		if a == nil {
			return fmt.Errorf("%s: argument %d is nil", method, i)
		}
		vals[i] = reflect.ValueOf(a)
	}
	b, err := encodeValues(vals)
	if err != nil {
		return fmt.Errorf("%s: cannot encode the arguments: %v", method, err)
	}
	c.nextID++
	id := c.nextID
	c.current.Store(id)
	defer c.current.Store(0)
	r, err := c.exchange(ctx, method, request{ID: id, Kind: kindCall, Method: method, NArgs: len(args), Args: b, Opts: opts}, progress, c.replyTimeout)
	if err != nil {
		return err
	}
	return c.result(method, r, results)
}

func (c *Client) result(method string, r reply, results []any) error {
	if r.Code != codeOK && len(r.Results) > 0 {
		// The values a failed call returned beside its error (the steps an interrupted Step
		// did), as an in-process call returns them; the error is what matters if they do not
		// decode.
		_ = decodeInto(method, r.Results, results)
	}
	switch {
	case r.Code == codeOK:
	case r.Code == codeInterrupted:
		ie := c.cfg.Interrupted
		if ie == nil {
			ie = context.Canceled
		}
		return &remoteError{msg: r.Err, sentinel: ie}
	case r.Code == codeBadRequest:
		return fmt.Errorf("%s: %w: %s", method, ErrBadRequest, trimBad(r.Err))
	case r.Code >= codeSentinel && r.Code-codeSentinel < len(c.cfg.Sentinels):
		return &remoteError{msg: r.Err, sentinel: c.cfg.Sentinels[r.Code-codeSentinel]}
	default:
		return errors.New(r.Err)
	}
	return decodeInto(method, r.Results, results)
}

// decodeInto decodes the gob values b into the pointers in results.
func decodeInto(method string, b []byte, results []any) error {
	types := make([]reflect.Type, len(results))
	for i, p := range results {
		t := reflect.TypeOf(p)
		if t == nil || t.Kind() != reflect.Pointer {
			return fmt.Errorf("%s: result %d must be a pointer, got %T", method, i, p)
		}
		types[i] = t.Elem()
	}
	vals, err := decodeValues(b, types)
	if err != nil {
		return fmt.Errorf("%s: cannot decode the results: %v", method, err)
	}
	for i, p := range results {
		reflect.ValueOf(p).Elem().Set(vals[i])
	}
	return nil
}

func trimBad(s string) string {
	const p = "bad request: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// remoteError is a method's error that keeps its sentinel's identity.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// Interrupt asks the server to stop the call this client is waiting for at its next step
// boundary (that call then returns the interrupted error); with no call waiting it does
// nothing. It may be called from any goroutine.
func (c *Client) Interrupt() error {
	id := c.current.Load()
	if id == 0 {
		return nil
	}
	c.mu.Lock()
	w := c.w
	c.mu.Unlock()
	if err := w.send(request{ID: id, Kind: kindInterrupt}); err != nil {
		return fmt.Errorf("%w: %v", ErrConnLost, err)
	}
	return nil
}

// Status asks the server for its status; the server answers it at once, even while a call
// (of another client) runs. A server that does not answer within DialConfig.Timeout gives
// ErrNoAnswer.
func (c *Client) Status() (Status, error) { return c.control(kindStatus, "Status") }

// Stop asks the server to exit: its running call stops at the next step boundary. It returns
// the server's last status. A server that does not answer within DialConfig.Timeout gives
// ErrNoAnswer.
func (c *Client) Stop() (Status, error) { return c.control(kindStop, "Stop") }

func (c *Client) control(kind int, what string) (Status, error) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.nextID++
	r, err := c.exchange(context.Background(), what, request{ID: c.nextID, Kind: kind}, nil, func() time.Duration { return c.cfg.Timeout })
	if err != nil {
		return Status{}, err
	}
	if r.Status == nil {
		return Status{}, errors.New(r.Err)
	}
	return *r.Status, nil
}
