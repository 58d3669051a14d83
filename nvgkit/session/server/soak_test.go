package server

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nvg-project/nvg/nvgkit/session/internal/sdir"
)

// setFileLimit sets RLIMIT_NOFILE of process pid (prlimit(2), as `prlimit --nofile=N:N
// --pid PID` does).
func setFileLimit(pid int, n uint64) error {
	lim := syscall.Rlimit{Cur: n, Max: n}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
		return fmt.Errorf("prlimit(%d, RLIMIT_NOFILE, %d): %w", pid, n, e)
	}
	return nil
}

// openFiles counts the open file descriptors of process pid.
func openFiles(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// abuse opens total silent connections to the socket at path in waves of wave, holds each
// wave for hold and drops it, until total were tried or stop closes. It returns how many
// connections it opened and how many dials failed (a full backlog refuses some: the
// attacker's loss, not the server's).
func abuse(path string, total, wave int, hold time.Duration, stop <-chan struct{}) (opened, failed int) {
	for opened+failed < total {
		var conns []net.Conn
		for i := 0; i < wave && opened+failed < total; i++ {
			nc, err := net.DialTimeout("unix", path, time.Second)
			if err != nil {
				failed++
				continue
			}
			opened++
			conns = append(conns, nc)
		}
		select {
		case <-time.After(hold):
		case <-stop:
		}
		for _, nc := range conns {
			nc.Close()
		}
		select {
		case <-stop:
			return opened, failed
		default:
		}
	}
	return opened, failed
}

// TestSoakSilentConnections: a real session server (the tiny Lab on lavapipe) whose
// file-descriptor limit is lowered to 64 gets waves of silent connections — a few hundred
// here, 10,000 with NVG_SOAK=1 — while a client steps, asks for the state and writes a
// checkpoint. The server stays up; every call answers within 1 s apart from the steps' own
// time; the checkpoint (which needs descriptors) is written; and the client's results are
// bit-identical to the same calls on an in-process Lab without the abuse.
func TestSoakSilentConnections(t *testing.T) {
	total, wave, hold := 300, 100, 300*time.Millisecond
	if os.Getenv("NVG_SOAK") == "1" {
		total, wave, hold = 10000, 500, 500*time.Millisecond
	}
	ref := inProcessLab(t) // skips loudly without a GPU unless NVG_REQUIRE_GPU=1
	dir := useSessionDir(t, "gpu")
	c := attach(t, "soak")
	if _, err := c.Setup(gpuSetup()); err != nil {
		t.Fatal(err)
	}
	pid := c.Pid()
	before := openFiles(pid)
	if err := setFileLimit(pid, 64); err != nil {
		t.Fatal(err)
	}
	t.Logf("server pid %d: %d descriptors open after Setup; limit lowered to 64", pid, before)

	f := sdir.For(dir, "soak")
	stop := make(chan struct{})
	var opened, failed int
	var abused sync.WaitGroup
	abused.Add(1)
	go func() {
		defer abused.Done()
		opened, failed = abuse(f.Sock, total, wave, hold, stop)
	}()
	var done atomic.Bool
	go func() { abused.Wait(); done.Store(true) }()

	var remote []string
	record := recorder(t, &remote)
	var worst, worstStep time.Duration
	timed := func(what string, call func() (any, float64, error)) {
		t.Helper()
		start := time.Now()
		v, own, err := call()
		d := time.Since(start) - time.Duration(own*float64(time.Second))
		if d > worst {
			worst = d
		}
		if own > 0 && d > worstStep {
			worstStep = d
		}
		if d > time.Second {
			t.Errorf("%s answered after %s (beyond its own %.3f s)", what, d, own)
		}
		record(what, v, err)
	}
	steps := 0
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	for steps < 4 || !done.Load() {
		steps++
		timed(fmt.Sprintf("Step(1) #%d", steps), func() (any, float64, error) {
			sts, err := c.Step(1)
			own := 0.0
			for _, s := range sts {
				own += s.Seconds
			}
			return sts, own, err
		})
		timed("Info", func() (any, float64, error) {
			info, err := c.Info()
			info.Device = ""
			return info, 0, err
		})
		if steps == 2 {
			start := time.Now()
			if _, err := c.Checkpoint(ckpt); err != nil {
				t.Errorf("Checkpoint during the abuse (descriptors kept for the work?): %v", err)
			}
			t.Logf("Checkpoint during the abuse: %s", time.Since(start))
		}
		if steps > 100000 {
			t.Fatal("the abuse never ended")
		}
	}
	close(stop)
	abused.Wait()
	names, err := c.Names()
	record("Names", names, err)
	for _, n := range names {
		p, err := c.Param(n)
		record("Param "+n, p, err)
	}
	if c.Pid() != pid || !sdir.Held(f) {
		t.Fatalf("the server (pid %d) is gone", pid)
	}
	log, _ := os.ReadFile(f.Log)
	t.Logf("%d silent connections opened in waves of %d (%d dials refused), %d steps; slowest answer beyond the step's own time %s (of a Step: %s); server descriptors now %d; its log:\n%s",
		opened, wave, failed, steps, worst, worstStep, openFiles(pid), grepLines(string(log), "connections:"))
	if opened < total/2 {
		t.Errorf("only %d of %d silent connections were opened", opened, total)
	}
	if !strings.Contains(string(log), "connections: ") {
		t.Errorf("the server's log has no summary of the closed connections:\n%s", log)
	}

	// The reference: the same calls in process, no abuse.
	var local []string
	record = recorder(t, &local)
	info, err := ref.Setup(gpuSetup())
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= steps; k++ {
		sts, err := ref.Step(1)
		record(fmt.Sprintf("Step(1) #%d", k), sts, err)
		info, err = ref.Info()
		info.Device = ""
		record("Info", info, err)
	}
	names, err = ref.Names()
	record("Names", names, err)
	for _, n := range names {
		p, err := ref.Param(n)
		record("Param "+n, p, err)
	}
	sameResults(t, local, remote)
	if !strings.Contains(remote[0], "Loss:") || strings.Contains(remote[0], "Loss:NaN") {
		t.Errorf("the first step gave no loss: %.300s", remote[0])
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
