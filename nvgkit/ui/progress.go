package ui

import (
	"encoding/base64"
	"fmt"
	"html"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// ProgressHTML is the HTML that the notebook progress bar shows: the title, a <progress>
// element at done/total and the status, all HTML-escaped.
func ProgressHTML(title string, done, total int, status string) string {
	return fmt.Sprintf(`<div style="font-family:monospace"><b>%s</b> <progress value="%d" max="%d" style="width:40%%"></progress> %d/%d %s</div>`,
		html.EscapeString(title), done, max(total, 1), done, total, html.EscapeString(status))
}

// NotebookProgress is a progress bar in a GoNB cell's output: an HTML <progress> element
// updated in place through gonbui.UpdateHTML, at most 4 times a second plus the first and
// the last update. It has the methods of train.Progress (Update, Finish), so it can be a
// Trainer's Progress. Outside a notebook (gonbui.IsNotebook false: a cell run with `go
// run`) it prints the text form to standard output: a bar redrawn in place on a terminal,
// else a line "title done/total status" at the first and last update and at most every 2 s
// between, and "title: status" at Finish. Safe for concurrent use.
type NotebookProgress struct {
	mu    sync.Mutex
	id    string
	title string
	last  time.Time
	text  *textProgress // outside a notebook
}

// NewNotebookProgress returns a notebook progress bar titled title.
func NewNotebookProgress(title string) *NotebookProgress {
	p := &NotebookProgress{id: gonbui.UniqueId(), title: title}
	if !notebook() {
		p.text = newTextProgress(textOut, title)
	}
	return p
}

// Update shows done of total units and a short status line.
func (p *NotebookProgress) Update(done, total int, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.text != nil {
		p.text.update("", done, total, status)
		return
	}
	if done > 0 && done < total && time.Since(p.last) < 250*time.Millisecond {
		return
	}
	p.last = time.Now()
	gonbui.UpdateHTML(p.id, ProgressHTML(p.title, done, total, status))
}

// Finish replaces the bar by the title and the final status.
func (p *NotebookProgress) Finish(status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.text != nil {
		p.text.finish(status)
		return
	}
	gonbui.UpdateHTML(p.id, finalHTML(p.title, status))
	gonbui.Sync()
}

// finalHTML is a progress display's last form: the title and the final status.
func finalHTML(title, status string) string {
	return fmt.Sprintf(`<div style="font-family:monospace"><b>%s</b> %s</div>`, html.EscapeString(title), html.EscapeString(status))
}

// Live is a notebook cell's live view of a long call (a teacher pass, Step(n), a training
// run): one HTML block, updated in place through gonbui.UpdateHTML, holding a progress line
// (phase, done/total, step, latest loss and perplexity, elapsed time) and, once there is a
// loss or a perplexity, the PlotTraining chart of what came so far (loss per step with its
// moving average, held-out perplexity per evaluation, the teacher's as a dashed line when
// TeacherPPL is set), redrawn at most once a second, plus the last update. Outside a
// notebook (a cell run with `go run`) it prints the text form to standard output — the
// progress line as NotebookProgress prints it, and at Finish the status and the chart saved
// as a PNG in PlotDir, with its path — and collects the curves (Curves) all the same. Safe
// for concurrent use.
type Live struct {
	mu       sync.Mutex
	title    string
	id       string
	w, h     int
	every    time.Duration
	curves   TrainingCurves
	last     session.Progress
	lastDraw time.Time
	chart    string // the last chart's <img> element
	notes    []string
	show     func(id, html string)
	text     *textProgress // outside a notebook
}

// NewLive returns a live view titled title whose chart is w×h pixels (0, 0: 720×420).
// teacherPPL is the teacher's held-out perplexity drawn as a reference line (0: none).
func NewLive(title string, w, h int, teacherPPL float64) *Live {
	if w <= 0 || h <= 0 {
		w, h = 720, 420
	}
	l := &Live{title: title, w: w, h: h, every: time.Second, show: func(string, string) {}}
	l.curves.TeacherPPL = teacherPPL
	if notebook() {
		l.id, l.show = gonbui.UniqueId(), gonbui.UpdateHTML
	} else {
		l.text = newTextProgress(textOut, title)
	}
	return l
}

// OnProgress returns the option that makes a Lab call (Setup, Step, Eval, GradCheck) report
// its progress to l: lab.Step(20, live.OnProgress()).
func (l *Live) OnProgress() session.Option { return session.OnProgress(l.Update) }

// From starts l's curves with what a Lab did before the call l will follow (its History:
// steps, evaluations, the teacher's perplexity), so the chart shows the run so far and the
// evaluation a report carries over is not drawn again. It returns l.
func (l *Live) From(h session.History) *Live {
	l.mu.Lock()
	defer l.mu.Unlock()
	teacher := l.curves.TeacherPPL
	l.curves = HistoryCurves(h)
	if l.curves.TeacherPPL == 0 {
		l.curves.TeacherPPL = teacher
	}
	return l
}

// Update records u: its loss as the training loss of step u.Step when it is finite and
// nonzero and that step has none yet, its EvalPPL as the evaluation after step u.Step when
// it is a perplexity (≥ 1) and that step has none yet (session.Progress.EvalPPL is set only
// where an evaluation was made), its Note once (a line of its own, kept under the progress
// line in a notebook); then redraws the progress line (and the chart, at most once a
// second).
func (l *Live) Update(u session.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &l.curves
	if u.Loss != 0 && finite(u.Loss) && (len(c.Steps) == 0 || c.Steps[len(c.Steps)-1] < u.Step) {
		c.Steps, c.Loss = append(c.Steps, u.Step), append(c.Loss, u.Loss)
	}
	if finite(u.EvalPPL) && u.EvalPPL >= 1 {
		if n := len(c.EvalSteps); n == 0 || c.EvalSteps[n-1] != u.Step { // a step reported twice
			c.EvalSteps, c.EvalPPL = append(c.EvalSteps, u.Step), append(c.EvalPPL, u.EvalPPL)
		}
	}
	l.last = u
	if u.Note != "" && !slices.Contains(l.notes, u.Note) {
		l.notes = append(l.notes, u.Note)
		if l.text != nil {
			l.text.note(u.Note)
		}
	}
	if l.text != nil {
		l.text.update(u.Phase, u.Done, u.Total, liveStatus(u, *c))
		return
	}
	l.render(false, "")
}

// Finish redraws the chart with everything recorded and replaces the progress line by the
// title and status.
func (l *Live) Finish(status string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.text != nil {
		l.text.finish(status)
		if len(l.curves.Steps) > 0 || len(l.curves.EvalSteps) > 0 {
			if f, err := PlotTraining(l.curves); err == nil {
				if _, err := savePlotFile(l.title+": chart", f, l.w, l.h); err != nil {
					fmt.Fprintf(textOut, "%s: the chart was not saved: %v\n", l.title, err)
				}
			}
		}
		return
	}
	l.render(true, status)
	gonbui.Sync()
}

// Curves returns a copy of the curves recorded so far.
func (l *Live) Curves() TrainingCurves {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.curves
	c.Steps = append([]int(nil), c.Steps...)
	c.Loss = append([]float64(nil), c.Loss...)
	c.EvalSteps = append([]int(nil), c.EvalSteps...)
	c.EvalPPL = append([]float64(nil), c.EvalPPL...)
	return c
}

// render sends the HTML block; the chart is redrawn when final or a second after the last.
func (l *Live) render(final bool, status string) {
	if final || time.Since(l.lastDraw) >= l.every {
		if len(l.curves.Steps) > 0 || len(l.curves.EvalSteps) > 0 {
			if f, err := PlotTraining(l.curves); err == nil {
				if png, err := RenderPNG(f, l.w, l.h); err == nil {
					l.chart = fmt.Sprintf(`<img src="data:image/png;base64,%s" width="%d" height="%d">`, base64.StdEncoding.EncodeToString(png), l.w, l.h)
				}
			}
		}
		l.lastDraw = time.Now()
	}
	line := liveLine(l.title, l.last, l.curves, final, status)
	for _, n := range l.notes {
		line += `<div style="font-family:monospace">note: ` + html.EscapeString(n) + `</div>`
	}
	l.show(l.id, `<div>`+line+l.chart+`</div>`)
}

// liveLine is the progress line of a Live view (HTML-escaped): while running the title, a
// <progress> element, the phase's done/total and liveStatus; when final the title and
// status.
func liveLine(title string, u session.Progress, c TrainingCurves, final bool, status string) string {
	if final {
		return finalHTML(title, status)
	}
	return ProgressHTML(title, u.Done, u.Total, liveStatus(u, c))
}

// liveStatus is the status of a progress report: the phase, step, loss, perplexity and
// elapsed time, separated by " · ". The perplexity is the report's evaluation, else the last
// one of the curves c with its step ("perplexity 400.000 at step 0"), so an old value never
// reads as the current one.
func liveStatus(u session.Progress, c TrainingCurves) string {
	s := u.Phase
	if u.Step > 0 {
		s += fmt.Sprintf(" · step %d", u.Step)
	}
	if u.Loss != 0 && finite(u.Loss) {
		s += fmt.Sprintf(" · loss %.4f", u.Loss)
	}
	if n := len(c.EvalSteps); u.EvalPPL >= 1 && !math.IsInf(u.EvalPPL, 0) {
		s += fmt.Sprintf(" · perplexity %.3f", u.EvalPPL)
	} else if n > 0 && c.EvalSteps[n-1] != u.Step {
		s += fmt.Sprintf(" · perplexity %.3f at step %d", c.EvalPPL[n-1], c.EvalSteps[n-1])
	}
	s += " · " + u.Elapsed.Round(100*time.Millisecond).String()
	return s
}
