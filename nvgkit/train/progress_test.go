package train_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/train"
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
