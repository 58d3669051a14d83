package ui

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
	"gonum.org/v1/plot"
)

// The text forms. Outside a GoNB notebook (a cell run with `go run`, a test, a script) Show,
// NotebookProgress and Live print to standard output instead of sending HTML to a kernel
// that is not there (they printed nothing at all): progress as a bar redrawn in place on a
// terminal (schollz/progressbar) or as lines elsewhere, and plots saved as PNG files in
// PlotDir with their paths printed.

// notebook reports whether output goes to a GoNB kernel (tests replace it).
var notebook = func() bool { return gonbui.IsNotebook }

// textOut is where the text forms print (tests replace it).
var textOut io.Writer = os.Stdout

// EnvPlotDir names the directory where Show saves plots outside a notebook.
const EnvPlotDir = "NVG_PLOT_DIR"

// PlotDir returns the directory where Show and Live save their plots outside a notebook:
// $NVG_PLOT_DIR when set, else nvg-plots in the temporary directory; it is created when
// missing. Errors: the directory cannot be created.
func PlotDir() (string, error) {
	dir := os.Getenv(EnvPlotDir)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "nvg-plots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("ui: plot directory: %w", err)
	}
	return filepath.Abs(dir)
}

// plotSeq numbers the plots one process saves (two in one second get distinct names).
var plotSeq atomic.Int64

// savePlotFile saves d as a w×h PNG in PlotDir under a name made of the time, a sequence
// number and its title, prints "what: PATH (w×h)" to textOut and returns the path.
func savePlotFile(what string, d Drawable, w, h int) (string, error) {
	dir, err := PlotDir()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%d", time.Now().Format("20060102-150405"), plotSeq.Add(1))
	if slug := slugOf(titleOf(d)); slug != "" {
		name += "-" + slug
	}
	path := filepath.Join(dir, name+".png")
	if err := SavePlot(path, d, w, h); err != nil {
		return "", err
	}
	fmt.Fprintf(textOut, "%s: %s (%d×%d)\n", what, path, w, h)
	return path, nil
}

// titleOf is the title of a plot, a chart or a figure's first panel ("" when none).
func titleOf(d Drawable) string {
	var p *plot.Plot
	switch v := d.(type) {
	case *plot.Plot:
		p = v
	case *Chart:
		p = v.Plot
	case *Figure:
		if len(v.Panels) > 0 {
			p = v.Panels[0]
		}
	}
	if p == nil {
		return ""
	}
	return p.Title.Text
}

// slugOf keeps the letters and digits of s, lower-cased, with single dashes between runs,
// at most 40 bytes.
func slugOf(s string) string {
	var b strings.Builder
	gap := false
	for _, r := range strings.ToLower(s) {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			gap = true
			continue
		}
		if gap && b.Len() > 0 {
			b.WriteByte('-')
		}
		gap = false
		b.WriteRune(r)
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// textProgress is the text form of a progress display: on a terminal a bar redrawn in
// place, elsewhere a line "title done/total status"; either for the first update of a phase,
// its last, and at most one every `every` between (200 ms on a terminal, 2 s elsewhere). Not
// safe for concurrent use (its owners lock).
type textProgress struct {
	w     io.Writer
	title string
	every time.Duration
	bar   *progressbar.ProgressBar // on a terminal, the current phase's bar
	total int                      // the current phase's total
	phase string
	last  time.Time // the last line printed
}

func newTextProgress(w io.Writer, title string) *textProgress {
	every := 2 * time.Second
	if isTerminal(w) {
		every = 200 * time.Millisecond
	}
	return &textProgress{w: w, title: title, every: every}
}

// isTerminal reports whether w is a terminal (not a file, a pipe or a buffer).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// update shows done of total units of phase with a status.
func (p *textProgress) update(phase string, done, total int, status string) {
	newPhase := phase != p.phase || total != p.total
	p.phase, p.total = phase, total
	if !newPhase && done < total && time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	if !isTerminal(p.w) {
		fmt.Fprintf(p.w, "%s %d/%d %s\n", p.title, done, total, status)
		return
	}
	if newPhase || p.bar == nil {
		if p.bar != nil {
			p.bar.Finish()
		}
		// No throttle of its own: each of Set and Describe redraws, so the second shows both.
		p.bar = progressbar.NewOptions(max(total, 1), progressbar.OptionSetWriter(p.w), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), progressbar.OptionSetWidth(20),
			progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish())
	}
	p.bar.Set(done) // at total the bar completes and clears itself
	p.bar.Describe(strings.TrimSpace(p.title + " " + status))
}

// note prints "title: note: msg" on a line of its own (a terminal's bar is cleared first
// and drawn again at the next update).
func (p *textProgress) note(msg string) {
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintf(p.w, "%s: note: %s\n", p.title, msg)
}

// finish ends the display with "title: status".
func (p *textProgress) finish(status string) {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
	p.phase, p.total = "", 0
	fmt.Fprintf(p.w, "%s: %s\n", p.title, status)
}
