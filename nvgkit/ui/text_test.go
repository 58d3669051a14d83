package ui

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/testkit/ptytest"
)

// inNotebook makes the package act as in a GoNB notebook (on) or in a terminal (off) for
// the test, and sends the text forms to the returned buffer.
func inNotebook(t *testing.T, on bool) *bytes.Buffer {
	t.Helper()
	oldNB, oldOut := notebook, textOut
	var buf bytes.Buffer
	notebook, textOut = func() bool { return on }, &buf
	t.Cleanup(func() { notebook, textOut = oldNB, oldOut })
	return &buf
}

// savedPlot checks that line (the text form's "what: PATH (W×H)") names a PNG of w×h pixels
// in dir and returns its path.
func savedPlot(t *testing.T, line, what, dir string, w, h int) string {
	t.Helper()
	m := regexp.MustCompile(`^` + regexp.QuoteMeta(what) + `: (\S+\.png) \((\d+)×(\d+)\)$`).FindStringSubmatch(line)
	if m == nil || m[2] != fmt.Sprint(w) || m[3] != fmt.Sprint(h) || filepath.Dir(m[1]) != dir {
		t.Fatalf("line %q, want %q: a .png in %s (%d×%d)", line, what+": PATH", dir, w, h)
	}
	f, err := os.Open(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != w || cfg.Height != h {
		t.Fatalf("%s: %+v, %v; want a %d×%d PNG", m[1], cfg, err, w, h)
	}
	return m[1]
}

func testFigure(t *testing.T) *Figure {
	t.Helper()
	f, err := PlotTraining(TrainingCurves{Steps: []int{1, 2, 3}, Loss: []float64{3, 2, 1.5}, EvalSteps: []int{0, 3}, EvalPPL: []float64{900, 300}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestShowBothModes: in a notebook Show hands the plot to the notebook display and prints
// nothing; outside one (a cell run with `go run` printed zero bytes) it saves the PNG in
// PlotDir ($NVG_PLOT_DIR), named by its title, and prints its path.
func TestShowBothModes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvPlotDir, dir)
	fig := testFigure(t)

	out := inNotebook(t, true)
	var shown []string
	oldDisplay := displayPNG
	displayPNG = func(d Drawable, w, h int) error {
		shown = append(shown, fmt.Sprintf("%T %d×%d", d, w, h))
		return nil
	}
	t.Cleanup(func() { displayPNG = oldDisplay })
	Show(fig, 320, 200)
	if fmt.Sprint(shown) != "[*ui.Figure 320×200]" || out.Len() != 0 {
		t.Errorf("in a notebook: displayed %v, printed %q; want the figure displayed, nothing printed", shown, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("in a notebook Show saved %d files", len(ents))
	}

	out = inNotebook(t, false)
	Show(fig, 320, 200)
	Show(fig, 100, 80)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || len(shown) != 1 {
		t.Fatalf("outside a notebook: printed %q, displayed %v; want two lines, nothing displayed", out, shown)
	}
	p1 := savedPlot(t, lines[0], "plot", dir, 320, 200)
	p2 := savedPlot(t, lines[1], "plot", dir, 100, 80)
	if p1 == p2 || !strings.HasSuffix(p1, "-training-loss.png") {
		t.Errorf("plot files %s and %s: want two, named by the title", p1, p2)
	}
	// A plot that cannot be drawn stops the cell, as in a notebook.
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "outside [16, 16384]") {
			t.Errorf("Show of a 1×1 plot: recovered %v, want a panic naming the size limit", r)
		}
	}()
	Show(fig, 1, 1)
}

// TestNotebookProgressText: outside a notebook a NotebookProgress prints a line at the first
// update, at the last and at most every 2 s between (here never between), a line when the
// total changes, and the final status.
func TestNotebookProgressText(t *testing.T) {
	out := inNotebook(t, false)
	p := NewNotebookProgress("teacher pass")
	p.text.every = time.Hour
	for i := 0; i <= 10; i++ {
		p.Update(i, 10, fmt.Sprintf("window %d", i))
	}
	p.Update(1, 4, "eval")
	p.text.every = 0
	p.Update(2, 4, "eval")
	p.Finish("done in 3s")
	want := "teacher pass 0/10 window 0\nteacher pass 10/10 window 10\nteacher pass 1/4 eval\nteacher pass 2/4 eval\nteacher pass: done in 3s\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out, want)
	}
}

// TestLiveText: outside a notebook a Live view prints its progress line per phase (the
// first, the last, at most every 2 s between), collects the curves as in a notebook
// (TestLive), and at Finish prints the status and saves the chart, printing its path.
func TestLiveText(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvPlotDir, dir)
	out := inNotebook(t, false)
	l := NewLive("train", 300, 200, 12.5)
	l.text.every = time.Hour
	l.Update(session.Progress{Phase: "eval", Done: 1, Total: 1, Step: 0, EvalPPL: 400})
	for s := 1; s <= 5; s++ {
		l.Update(session.Progress{Phase: "train", Done: s, Total: 5, Step: s, Loss: 3 / float64(s), Elapsed: time.Duration(s) * time.Second})
	}
	l.Update(session.Progress{Phase: "eval", Done: 1, Total: 1, Step: 5, EvalPPL: 90})
	l.Finish("5 steps")
	c := l.Curves()
	if fmt.Sprint(c.Steps) != "[1 2 3 4 5]" || fmt.Sprint(c.EvalSteps, c.EvalPPL) != "[0 5] [400 90]" {
		t.Errorf("curves %+v", c)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		"train 1/1 eval · perplexity 400.000 · 0s",
		"train 1/5 train · step 1 · loss 3.0000 · perplexity 400.000 at step 0 · 1s",
		"train 5/5 train · step 5 · loss 0.6000 · perplexity 400.000 at step 0 · 5s",
		"train 1/1 eval · step 5 · perplexity 90.000 · 0s",
		"train: 5 steps",
	}
	if len(lines) != len(want)+1 || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Fatalf("printed:\n%s\nwant:\n%s\n(and the chart's line)", out, strings.Join(want, "\n"))
	}
	savedPlot(t, lines[len(want)], "train: chart", dir, 300, 200)
}

// TestTextProgressTerminal: on a terminal (a pseudo-terminal here) the text form is a bar
// redrawn in place with '\r' with the count and the latest status, not a line per update;
// complete, it clears itself and the final status follows on its own line.
func TestTextProgressTerminal(t *testing.T) {
	master, slave, err := ptytest.Open()
	if err != nil {
		t.Skipf("SKIPPED: no pseudo-terminal to test the bar on (%v)", err)
	}
	defer master.Close()
	defer slave.Close()
	p := newTextProgress(slave, "steps")
	p.every = 0
	for i := 1; i <= 5; i++ {
		p.update("train", i, 5, fmt.Sprintf("loss %d", i))
	}
	p.finish("5 steps")
	slave.Close()
	s := ptytest.ReadUntil(master, "steps: 5 steps")
	if !strings.Contains(s, "\rsteps loss 4  80% |████████████████    | (4/5) \r") || !strings.HasSuffix(s, "\rsteps: 5 steps\r\n") || strings.Count(s, "\n") != 1 {
		t.Errorf("terminal output %q: want a bar redrawn with \\r showing 4/5 and its status, then only the final line", s)
	}
}

// A progress report's Note (the first step past the planned schedule) is printed once on a
// line of its own outside a notebook, and kept under the progress line in a notebook.
func TestLiveNote(t *testing.T) {
	out := inNotebook(t, false)
	l := NewLive("train", 300, 200, 0)
	l.text.every = time.Hour
	const note = "step 5 is past the 4 steps the learning-rate schedule was planned for"
	for s := 4; s <= 6; s++ {
		u := session.Progress{Phase: "step", Done: s - 3, Total: 3, Step: s, Loss: 1}
		if s == 5 {
			u.Note = note
		}
		l.Update(u)
		l.Update(u) // a report seen twice
	}
	if n := strings.Count(out.String(), "train: note: "+note+"\n"); n != 1 {
		t.Errorf("the note printed %d times:\n%s", n, out)
	}
	inNotebook(t, true)
	nb := NewLive("train", 300, 200, 0)
	var last string
	nb.show, nb.every = func(_, h string) { last = h }, time.Hour
	nb.Update(session.Progress{Phase: "step", Done: 1, Total: 2, Step: 5, Loss: 1, Note: "a <note>"})
	nb.Update(session.Progress{Phase: "step", Done: 2, Total: 2, Step: 6, Loss: 1})
	if !strings.Contains(last, "note: a &lt;note&gt;") {
		t.Errorf("the notebook's view lost the note: %.400s", last)
	}
}
