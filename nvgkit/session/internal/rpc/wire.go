// Package rpc is the transport of nvg sessions: a request/response protocol over a
// Unix-domain socket, gob-encoded, that serves the methods of one Go interface implemented
// by one value. It knows nothing of the methods it serves (reflection does the dispatch), so
// it is tested with a toy service; package session puts the Lab interface on it.
//
// Frames (both directions are one gob stream each):
//   - reply{Hello}: the server's greeting, its first frame on every connection it keeps (a
//     refused connection gets a refusal instead: another user's process, or the server's
//     connection limit). Dial waits for it, so a server that accepts but does not run
//     (SIGSTOP, a hung process) is found at connect time (ErrNoAnswer).
//   - request{Kind: kindCall}: method name, its arguments (one gob value each, in order),
//     method-specific options (opaque bytes); answered by any number of progress replies
//     (reply.Progress set) and then one final reply (results or an error). While a call of
//     a connection is queued or runs, the server sends a keep-alive (reply{Beat}) every
//     Hello.Heartbeat, so a client tells a long call from a frozen server.
//   - request{Kind: kindInterrupt, ID}: asks the server to stop call ID at its next step
//     boundary (the call's context is cancelled); the call answers as usual.
//   - request{Kind: kindStatus} / {Kind: kindStop}: answered at once by the connection's
//     reader, never queued behind a running call.
//   - reply{Bye}: the server closes the connection (it sent nothing for too long, sat idle
//     without a call, or was evicted at the connection limit); no request the client sent
//     after its last answered one was run, so the client dials again and resends it.
//
// The server executes calls one at a time on one worker goroutine (locked to one OS thread,
// as GPU drivers prefer), whatever connection they come from. Only standard-library code is
// used, so importing it keeps a client light.
package rpc

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"
	"time"
)

// Frame kinds of a request.
const (
	kindCall = iota + 1
	kindInterrupt
	kindStatus
	kindStop
)

// Error codes of a reply; codeSentinel+i means Service.Sentinels[i].
const (
	codeOK          = iota
	codeApp         // the method returned an error
	codeBadRequest  // the request was refused before it touched the served value
	codePanic       // the method panicked; the server recovered and keeps serving
	codeRefused     // the connection was refused (peer check)
	codeInterrupted // the call was interrupted (Service.Interrupted / context.Canceled)
	codeBusy        // the connection was refused: the server is at its connection limit
	codeSentinel    // first sentinel code
)

type request struct {
	ID     uint64
	Kind   int
	Method string
	NArgs  int
	Args   []byte // one gob value per argument, in order
	Opts   []byte // method-specific options, decoded by Service.Options
}

type reply struct {
	ID       uint64
	Progress []byte // set: a progress report of call ID (more replies follow)
	Results  []byte // one gob value per result, in order (the error result excluded)
	Err      string
	Code     int
	Status   *Status
	Hello    *Hello // the server's greeting (ID 0)
	Beat     bool   // a keep-alive while a call of the connection is queued or runs (ID 0)
	Bye      string // the server closes the connection, for this reason (ID 0)
}

// Hello is the server's greeting, the first frame of a connection.
type Hello struct {
	Pid       int           // the server's process id
	Heartbeat time.Duration // the period of its keep-alive frames while a call waits
}

// Status is what a server says about itself, answered without waiting for a running call.
type Status struct {
	Pid        int           // the server's process id
	Started    time.Time     // when the server started
	LastActive time.Time     // when the last call ended (Started before any)
	Busy       string        // the method running now, "" when idle
	Calls      int           // calls completed
	Idle       time.Duration // the idle timeout (0: none)
	Note       string        // the service's one-line summary (Service.Note after the last call)
}

// encodeValues gob-encodes vs one after another into one byte slice.
func encodeValues(vs []reflect.Value) ([]byte, error) {
	var b bytes.Buffer
	enc := gob.NewEncoder(&b)
	for i, v := range vs {
		if err := enc.EncodeValue(v); err != nil {
			return nil, fmt.Errorf("value %d (%s): %w", i, v.Type(), err)
		}
	}
	return b.Bytes(), nil
}

// decodeValues decodes len(types) gob values from b into new values of those types and
// checks that nothing is left over.
func decodeValues(b []byte, types []reflect.Type) ([]reflect.Value, error) {
	r := bytes.NewReader(b)
	dec := gob.NewDecoder(r)
	out := make([]reflect.Value, len(types))
	for i, t := range types {
		p := reflect.New(t)
		if err := dec.DecodeValue(p); err != nil {
			return nil, fmt.Errorf("value %d (want %s): %v", i, t, err)
		}
		out[i] = p.Elem()
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d bytes left after %d values", r.Len(), len(types))
	}
	return out, nil
}
