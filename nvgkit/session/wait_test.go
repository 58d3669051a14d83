package session

import (
	"strings"
	"testing"
	"time"
)

// waitReporter (a long call given no OnProgress: issue 34, GradCheck ran 33 s with no
// output) prints nothing for a quick call, a first line with the hint once the call has
// run 5 s, then at most one line every 15 s, and the end of a phase it showed — on a fake
// clock.
func TestWaitReporter(t *testing.T) {
	var b strings.Builder
	t0 := time.Unix(1000, 0)
	now := t0
	r := waitReporter(&b, `session "nb": GradCheck`, func() time.Time { return now })
	at := func(sec float64, done int) {
		now = t0.Add(time.Duration(sec * float64(time.Second)))
		r(Progress{Phase: "gradcheck", Done: done, Total: 22})
	}
	at(0.5, 0)
	at(4.9, 1)
	if b.Len() != 0 {
		t.Fatalf("printed before 5 s:\n%s", b.String())
	}
	at(6, 2)  // the first line
	at(12, 5) // within 15 s of it: nothing
	at(21.5, 9)
	at(30, 15)
	at(33, 22) // the end
	at(34, 22) // again: nothing
	want := []string{
		`session "nb": GradCheck: gradcheck 2/22, 6s (a progress option`,
		`session "nb": GradCheck: gradcheck 9/22, 22s`,
		`session "nb": GradCheck: gradcheck 22/22, 33s`,
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("printed:\n%s\nwant %d lines", b.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || i > 0 && strings.Contains(lines[i], "progress option") {
			t.Errorf("line %d: %q, want %q…", i, lines[i], w)
		}
	}
	// A quick call ends without a line.
	b.Reset()
	r = waitReporter(&b, "x", func() time.Time { return now })
	r(Progress{Phase: "step", Done: 3, Total: 3})
	if b.Len() != 0 {
		t.Errorf("a quick call printed %q", b.String())
	}
}
