package train

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress shows the advance of a long phase (teacher pass, training steps, evaluation).
// Update is called with done out of total units and a short status line (for example the
// loss and the ETA); Finish once at the end. Implementations must be safe to call from one
// goroutine at a time.
type Progress interface {
	Update(done, total int, status string)
	Finish(status string)
}

// NewProgress returns the progress display that fits where w leads: on a terminal a bar
// (schollz/progressbar, redrawn in place with '\r') written to w with the title as its
// description; to anything else (a log file, a pipe, a buffer) plain newline-terminated
// lines "title done/total status", at most one every 30 seconds plus the first and the
// last. A nil w shows nothing. In a notebook use ui.NewNotebookProgress or ui.NewLive.
func NewProgress(w io.Writer, title string) Progress {
	if w == nil {
		return nopProgress{}
	}
	if !isTerminal(w) {
		return &lineProgress{w: w, title: title, every: 30 * time.Second}
	}
	return &termProgress{w: w, title: title}
}

// isTerminal reports whether w is a character device (a terminal), not a file or pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// lineProgress writes a line per update, sparsely: for logs, where '\r' redraws would pile
// up into one enormous line.
type lineProgress struct {
	w     io.Writer
	title string
	every time.Duration
	last  time.Time
	total int
}

func (p *lineProgress) Update(done, total int, status string) {
	if total == p.total && done > 1 && done < total && time.Since(p.last) < p.every {
		return
	}
	p.last, p.total = time.Now(), total
	fmt.Fprintf(p.w, "%s %d/%d %s\n", p.title, done, total, status)
}

func (p *lineProgress) Finish(status string) {
	if status != "" {
		fmt.Fprintf(p.w, "%s: %s\n", p.title, status)
	}
}

type nopProgress struct{}

func (nopProgress) Update(int, int, string) {}
func (nopProgress) Finish(string)           {}

// termProgress is a progressbar on a terminal (created at the first Update, when the total
// is known), redrawn at most every 200 ms, and at a new total and the last unit.
type termProgress struct {
	w     io.Writer
	title string
	bar   *progressbar.ProgressBar
	total int
	last  time.Time
}

func (p *termProgress) Update(done, total int, status string) {
	if p.bar != nil && total == p.total && done < total && time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	if p.bar == nil || total != p.total {
		if p.bar != nil {
			p.bar.Finish()
		}
		p.total = total
		// No throttle of the bar's own: with one, Set drew the new count and the Describe
		// after it was throttled away, so the line showed the previous update's status
		// (issue 34). Each of Set and Describe redraws now; the second shows both.
		p.bar = progressbar.NewOptions(max(total, 1), progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(p.title),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(false), progressbar.OptionSetWidth(20),
			progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish())
	}
	p.bar.Set(done)
	p.bar.Describe(p.title + " " + status)
}

// Clear erases the bar from the terminal line (it is drawn again at the next Update), so
// that a log line can be printed on its own line.
func (p *termProgress) Clear() {
	if p.bar != nil {
		p.bar.Clear()
	}
}

func (p *termProgress) Finish(status string) {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
	if status != "" {
		fmt.Fprintf(p.w, "%s: %s\n", p.title, status)
	}
}

// ETA estimates the time left when done of total units took elapsed: elapsed/done·(total−done),
// 0 when done ≤ 0 or done ≥ total.
func ETA(elapsed time.Duration, done, total int) time.Duration {
	if done <= 0 || done >= total {
		return 0
	}
	return time.Duration(float64(elapsed) / float64(done) * float64(total-done))
}

// FormatDuration prints d rounded to seconds as "1h02m03s", "4m05s" or "7s".
func FormatDuration(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	switch {
	case s >= 3600:
		return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
	case s >= 60:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%ds", s)
}
