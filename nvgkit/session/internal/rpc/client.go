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
// stopped, or closed it) before the call's reply came.
var ErrConnLost = errors.New("connection to the session server lost")

// ErrRefused is wrapped by the error of a call the server refused at connect time (the peer
// check: another user's process).
var ErrRefused = errors.New("connection refused by the session server")

// ErrBadRequest is wrapped by the error of a call the server refused as malformed (no such
// method, wrong arguments); it did not touch the served value.
var ErrBadRequest = errors.New("bad request")

// DialConfig is how a Client maps the server's errors back.
type DialConfig struct {
	// Sentinels: the same list, in the same order, as the server's Service.Sentinels.
	Sentinels []error
	// Interrupted is wrapped by the error of an interrupted call (nil: context.Canceled).
	Interrupted error
	// Timeout bounds the dial (0: 5 s).
	Timeout time.Duration
}

// Client is one connection to a server; its calls run one at a time.
type Client struct {
	cfg       DialConfig
	nc        net.Conn
	ServerPid int // the server's process id (SO_PEERCRED at connect time)
	ServerUID int // the server's user id

	callMu  sync.Mutex // one call at a time
	wmu     sync.Mutex
	enc     *gob.Encoder
	nextID  uint64
	current atomic.Uint64 // the id of the call waiting for its reply (0: none)

	replies chan reply
	readErr error // set before replies is closed
}

// Dial connects to the server listening on the Unix socket at path.
func Dial(path string, cfg DialConfig) (*Client, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	nc, err := net.DialTimeout("unix", path, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	uid, pid, err := peerUID(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &Client{cfg: cfg, nc: nc, ServerPid: pid, ServerUID: uid, enc: gob.NewEncoder(nc), replies: make(chan reply, 64)}
	go c.read()
	return c, nil
}

// Close closes the connection (a call running on the server for it is interrupted).
func (c *Client) Close() error { return c.nc.Close() }

func (c *Client) read() {
	dec := gob.NewDecoder(c.nc)
	for {
		var r reply
		if err := dec.Decode(&r); err != nil {
			c.readErr = err
			close(c.replies)
			return
		}
		c.replies <- r
	}
}

func (c *Client) send(req request) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.enc.Encode(req)
}

// sendFailed is the error of a request that could not be written: the server's refusal
// when it sent one before closing the connection (the peer check), else ErrConnLost.
func (c *Client) sendFailed(err error) error {
	timeout := time.After(time.Second)
	for {
		select {
		case r, ok := <-c.replies:
			if !ok {
				return fmt.Errorf("%w: %v", ErrConnLost, err)
			}
			if r.Code == codeRefused {
				return fmt.Errorf("%w: %s", ErrRefused, r.Err)
			}
		case <-timeout:
			return fmt.Errorf("%w: %v", ErrConnLost, err)
		}
	}
}

// next waits for the reply of id (replies of other ids, e.g. late progress of an earlier
// call, are dropped). A refusal (ID 0, codeRefused) is returned whatever the id.
func (c *Client) next(id uint64, cancel <-chan struct{}) (reply, bool, error) {
	for {
		select {
		case r, ok := <-c.replies:
			if !ok {
				return reply{}, false, fmt.Errorf("%w: %v", ErrConnLost, c.readErr)
			}
			if r.Code == codeRefused {
				return r, false, fmt.Errorf("%w: %s", ErrRefused, r.Err)
			}
			if r.ID == id {
				return r, false, nil
			}
		case <-cancel:
			return reply{}, true, nil
		}
	}
}

// Call runs method on the server with args (gob-encodable values, in the method's order)
// and opts (the method's option bytes, nil for none), and decodes the results (without the
// error) into the pointers in results. Progress reports go to progress (when not nil) as
// their gob bytes. When ctx is cancelled, the server is asked to stop the call at its next
// step boundary and Call waits for its answer (an error wrapping DialConfig.Interrupted).
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
	if err := c.send(request{ID: id, Kind: kindCall, Method: method, NArgs: len(args), Args: b, Opts: opts}); err != nil {
		return c.sendFailed(err)
	}
	c.current.Store(id)
	defer c.current.Store(0)
	done := ctx.Done()
	for {
		r, cancelled, err := c.next(id, done)
		if err != nil {
			return err
		}
		if cancelled {
			done = nil // ask once, then wait for the call's own answer
			if err := c.send(request{ID: id, Kind: kindInterrupt}); err != nil {
				return fmt.Errorf("%w: %v", ErrConnLost, err)
			}
			continue
		}
		if r.Progress != nil {
			if progress != nil {
				progress(r.Progress)
			}
			continue
		}
		return c.result(method, r, results)
	}
}

func (c *Client) result(method string, r reply, results []any) error {
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
	types := make([]reflect.Type, len(results))
	for i, p := range results {
		t := reflect.TypeOf(p)
		if t == nil || t.Kind() != reflect.Pointer {
			return fmt.Errorf("%s: result %d must be a pointer, got %T", method, i, p)
		}
		types[i] = t.Elem()
	}
	vals, err := decodeValues(r.Results, types)
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
	if err := c.send(request{ID: id, Kind: kindInterrupt}); err != nil {
		return fmt.Errorf("%w: %v", ErrConnLost, err)
	}
	return nil
}

// Status asks the server for its status; the server answers it at once, even while a call
// (of another client) runs.
func (c *Client) Status() (Status, error) { return c.control(kindStatus) }

// Stop asks the server to exit: its running call stops at the next step boundary. It returns
// the server's last status.
func (c *Client) Stop() (Status, error) { return c.control(kindStop) }

func (c *Client) control(kind int) (Status, error) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.nextID++
	id := c.nextID
	if err := c.send(request{ID: id, Kind: kind}); err != nil {
		return Status{}, c.sendFailed(err)
	}
	r, _, err := c.next(id, nil)
	if err != nil {
		return Status{}, err
	}
	if r.Status == nil {
		return Status{}, errors.New(r.Err)
	}
	return *r.Status, nil
}
