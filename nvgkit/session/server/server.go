// Package server serves a session.Lab as a resident nvg session: the process `nvg session
// serve NAME` runs (session.Attach and `nvg session start` spawn it). It takes the
// session's pid-file lock (one server per name), listens on NAME.sock in the per-user
// session directory (0700, socket 0600, every connection's uid checked, no TCP), executes
// the clients' calls one at a time on one worker, and exits on `nvg session stop`, SIGTERM,
// SIGINT or its idle timeout, releasing the Lab (and with the process, the GPU).
package server

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/session/internal/rpc"
	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
)

// Config is how a session server runs.
type Config struct {
	// Idle ends the server when no call has run for this long (0: never).
	Idle time.Duration
	// Log receives the server's log lines (nil: os.Stderr, which the spawner points at
	// NAME.log).
	Log io.Writer
	// AllowUID, when not nil, is the user id allowed to connect instead of this process's
	// (tests use it to exercise the peer check without a second user).
	AllowUID *int
	// Stop, when not nil, stops the server when it is closed (as a client's Stop does).
	Stop <-chan struct{}
}

// Serve serves lab as session name until it is stopped (a client's Stop, SIGTERM, SIGINT)
// or idle, then closes lab. It fails at once when another server of the name runs, or the
// session directory is refused.
func Serve(name string, lab session.Lab, cfg Config) error {
	if err := sdir.CheckName(name); err != nil {
		return err
	}
	dir, err := sdir.Dir()
	if err != nil {
		return err
	}
	f := sdir.For(dir, name)
	w := cfg.Log
	if w == nil {
		w = os.Stderr
	}
	logger := log.New(w, "", log.LstdFlags|log.Lmicroseconds)
	lock, err := sdir.Acquire(f)
	if err != nil {
		return err
	}
	defer lock.Release(f)
	l, err := sdir.Listen(f)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.Sock, err)
	}
	defer l.Close()
	allow := os.Getuid()
	if cfg.AllowUID != nil {
		allow = *cfg.AllowUID
	}
	svc := service(lab, f, logger)
	srv, err := rpc.NewServer(svc, rpc.Config{AllowUID: allow, Idle: cfg.Idle, Socket: f.Sock, Log: logger, Note: note(lab)})
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case s := <-sigs:
			logger.Printf("%v: stopping", s)
		case <-cfg.Stop:
			logger.Print("stopped by its embedder")
		case <-done:
			return
		}
		srv.Stop()
	}()
	logger.Printf("session %q: serving on %s (pid %d, uid %d, idle timeout %s)", name, f.Sock, os.Getpid(), allow, idleText(cfg.Idle))
	err = srv.Serve(l)
	if cerr := lab.Close(); cerr != nil {
		logger.Printf("closing the lab: %v", cerr)
	}
	logger.Printf("session %q: exiting after %d calls", name, srv.StatusNow().Calls)
	return err
}

func idleText(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

var labType = reflect.TypeOf((*session.Lab)(nil)).Elem()

// service puts lab on the transport: options rebuilt from the wire (the call's context,
// progress at most 5 times a second, EvalEvery), Interrupt and Close not served (a client
// interrupts with the transport's frame and closes its own connection), the last
// checkpoint directory recorded in NAME.ckpt for the message of a dead server.
func service(lab session.Lab, f sdir.Files, logger *log.Logger) rpc.Service {
	return rpc.Service{
		Impl:        lab,
		Iface:       labType,
		Interrupted: session.ErrInterrupted,
		Refuse: map[string]string{
			"Interrupt": "a client interrupts its call itself (Client.Interrupt, SIGINT)",
			"Close":     "a client closes its connection (Client.Close); `nvg session stop` ends the session",
		},
		Options: func(method string, b []byte, call *rpc.Call) ([]reflect.Value, error) {
			progress, every, err := session.DecodeOptions(b)
			if err != nil {
				return nil, err
			}
			opts := []session.Option{session.WithContext(call.Context())}
			if progress {
				opts = append(opts, session.OnProgress(throttle(call, 200*time.Millisecond)))
			}
			if every != 0 {
				opts = append(opts, session.EvalEvery(every))
			}
			vs := make([]reflect.Value, len(opts))
			for i, o := range opts {
				vs[i] = reflect.ValueOf(o)
			}
			return vs, nil
		},
		After: func(method string, args []reflect.Value, err error) string {
			if err != nil {
				logger.Printf("%s: %v", method, err)
			}
			if method == "Checkpoint" && err == nil && len(args) == 1 {
				if dir, ok := args[0].Interface().(string); ok {
					if werr := writeAtomic(f.Ckpt, []byte(dir+"\n")); werr != nil {
						logger.Printf("record the checkpoint: %v", werr)
					}
				}
			}
			return note(lab)
		},
	}
}

// note is the one-line state `nvg session ls` shows.
func note(lab session.Lab) string {
	info, err := lab.Info()
	switch {
	case err != nil:
		return "info: " + err.Error()
	case !info.Ready:
		return "not set up"
	}
	if info.Step > info.Setup.Train.Steps {
		return fmt.Sprintf("step %d (past the %d planned)", info.Step, info.Setup.Train.Steps)
	}
	return fmt.Sprintf("step %d of %d", info.Step, info.Setup.Train.Steps)
}

// throttle forwards progress reports to the client at most once per every (the first of
// each phase and a phase's last, Done == Total, always).
func throttle(call *rpc.Call, every time.Duration) func(session.Progress) {
	var mu sync.Mutex
	var last time.Time
	phase := ""
	return func(p session.Progress) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if p.Phase != phase || p.Done >= p.Total || now.Sub(last) >= every {
			phase, last = p.Phase, now
			call.Progress(p)
		}
	}
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// ErrRunning is wrapped by Serve's error when another server of the name runs.
var ErrRunning = sdir.ErrRunning
