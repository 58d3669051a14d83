package train_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/ptytest"
)

// TestProgressNotTerminal: progress written to something that is not a terminal (a log
// file, a pipe) is newline-separated lines without '\r' redraws, with the first and the
// last update and the final status.
func TestProgressNotTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := train.NewProgress(&buf, "distill")
	for i := 1; i <= 100; i++ {
		p.Update(i, 100, "loss 1.0")
	}
	p.Finish("100 steps in 5s")
	out := buf.String()
	if strings.Contains(out, "\r") {
		t.Errorf("carriage return in non-terminal progress: %q", out)
	}
	for _, w := range []string{"distill 1/100 loss 1.0\n", "distill 100/100 loss 1.0\n", "distill: 100 steps in 5s\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("progress %q lacks %q", out, w)
		}
	}
}

// TestProgressTerminal: on a terminal (a pseudo-terminal here) the bar shows each drawn
// update's own status with its count (issue 34: it showed the previous update's status, its
// Describe throttled away after Set drew), and the final status on a line of its own.
func TestProgressTerminal(t *testing.T) {
	master, slave, err := ptytest.Open()
	if err != nil {
		t.Skipf("SKIPPED: no pseudo-terminal to test the bar on (%v)", err)
	}
	defer master.Close()
	defer slave.Close()
	p := train.NewProgress(slave, "distill")
	for i := 1; i <= 3; i++ {
		p.Update(i, 3, fmt.Sprintf("loss %d", i))
		time.Sleep(250 * time.Millisecond) // past the 200 ms between redraws
	}
	p.Finish("3 steps")
	slave.Close()
	s := ptytest.ReadUntil(master, "distill: 3 steps")
	// The frames between '\r's: the last one of each count shows that update's status (the
	// bar draws count and status in two redraws, Set then Describe).
	last := map[int]string{}
	for _, f := range strings.Split(s, "\r") {
		for c := 1; c <= 3; c++ {
			if strings.Contains(f, fmt.Sprintf("(%d/3)", c)) {
				last[c] = f
			}
		}
	}
	for c := 1; c <= 2; c++ {
		if !strings.HasPrefix(last[c], fmt.Sprintf("distill loss %d ", c)) {
			t.Errorf("terminal output %q: the bar at %d/3 was left showing %q", s, c, last[c])
		}
	}
	if !strings.HasSuffix(s, "distill: 3 steps\r\n") {
		t.Errorf("terminal output %q: no final line", s)
	}
}
