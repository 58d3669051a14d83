// Package rpc is the transport of nvg sessions: a request/response protocol over a
// Unix-domain socket, gob-encoded, that serves the methods of one Go interface implemented
// by one value. It knows nothing of the methods it serves (reflection does the dispatch), so
// it is tested with a toy service; package session puts the Lab interface on it.
//
// Frames (both directions are one gob stream each):
//   - request{Kind: kindCall}: method name, its arguments (one gob value each, in order),
//     method-specific options (opaque bytes); answered by any number of progress replies
//     (reply.Progress set) and then one final reply (results or an error).
//   - request{Kind: kindInterrupt, ID}: asks the server to stop call ID at its next step
//     boundary (the call's context is cancelled); the call answers as usual.
//   - request{Kind: kindStatus} / {Kind: kindStop}: answered at once by the connection's
//     reader, never queued behind a running call.
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
