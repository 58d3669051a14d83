// Package proctest stops test processes deterministically: the session tests freeze a
// server with SIGSTOP and must not ask it anything before the stop has taken effect.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// Stop sends SIGSTOP to process pid and waits until /proc/PID/stat shows it stopped (state
// T), for at most 10 s: kill(2) only queues the signal, and on a loaded machine the process
// may answer one more request before every thread has stopped. It fails t when the signal
// cannot be sent or the process does not stop in time.
func Stop(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		// pid (comm) S …: the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 10 s of SIGSTOP: %s", pid, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
