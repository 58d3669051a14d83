package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// MetricsFile is the name of the per-step log a Trainer writes in TrainConfig.OutDir (JSON
// Lines: one MetricsRecord per line).
const MetricsFile = "metrics.jsonl"

// Kinds of MetricsRecord.
const (
	MetricsStep = "step" // one optimizer step
	MetricsEval = "eval" // one held-out evaluation of the student
)

// MetricsRecord is one line of a Trainer's metrics log (metrics.jsonl in OutDir, and every
// writer given to Trainer.AddMetricsWriter): a JSON object with "kind" and "step" and the
// fields of its kind. Non-finite numbers are written as null and read back as NaN.
//
// Every record has "phase", the kind of the phase of its step (TrainConfig.PhaseAt: "block",
// "kl", "finish"; an evaluation before training is the first phase's; absent in logs written
// before runs had phases, which were one KL phase), and a block phase's record "layer", the
// decoder layer the step trains.
//
// A "step" record (one per optimizer step, in order) has
//
//	step               the 1-based optimizer step
//	loss               mean KL(teacher top-k ‖ student) per token, nats (null: skipped step);
//	                   with a hidden-state loss, KL + λ·hidden_loss; in a block step the
//	                   layer's reconstruction error (normalised MSE, nvgkit.BlockStep)
//	kl, hidden_loss    with a hidden-state loss (TrainConfig.HiddenLoss) only: the loss's
//	                   parts, the mean KL and the unweighted hidden-state loss L_hidden
//	lr                 the learning rate used, LRAt(step)
//	grad_norm          global gradient L2 norm before clipping (null: skipped step)
//	grad_norm_clipped  the norm after clipping: min(grad_norm, clip_norm), or grad_norm
//	                   when clipping is off (null: skipped step)
//	tokens_per_second  predicted tokens of the step (NB·T) / the step's wall time
//	skipped            true when the loss or gradient was not finite (no update made)
//	wall_seconds       training wall time so far, evaluations included, summed over the
//	                   sessions of a resumed run
//	time               UTC wall-clock time the record was written (RFC 3339)
//
// An "eval" record (before the first step, every EvalEvery steps and after the last) has
//
//	step                after this many steps (0: before training)
//	loss                held-out mean next-token loss, nats (null: diverged)
//	perplexity          exp(loss)
//	best_perplexity     the lowest held-out perplexity so far, at best_step
//	best_step
//	teacher_perplexity  the teacher's held-out perplexity (same windows)
//	wall_seconds, time  as above
type MetricsRecord struct {
	Kind string
	Step int
	// Phase is the kind of the step's phase (both kinds; "" in older logs); Layer the decoder
	// layer of a block phase's record (0 otherwise).
	Phase string
	Layer int
	// Loss: KL nats/token (step) or held-out nats/token (eval).
	Loss float64
	// Step records.
	LR, GradNorm, GradNormClipped, TokensPerSecond float64
	Skipped                                        bool
	// SignFlips: the signs flipped per decoder layer (step records of a TrainSigns run).
	SignFlips []int
	// KL and Hidden: the parts of Loss (step records of a run with a hidden-state loss;
	// HasParts marks them, as a record of another run has none).
	KL, Hidden float64
	HasParts   bool
	// Eval records.
	Perplexity, BestPerplexity, TeacherPerplexity float64
	BestStep                                      int
	// Both.
	WallSeconds float64
	Time        time.Time
}

type metricsStepJSON struct {
	Kind            string    `json:"kind"`
	Step            int       `json:"step"`
	Phase           string    `json:"phase,omitempty"`
	Layer           *int      `json:"layer,omitempty"`
	Loss            *float64  `json:"loss"`
	LR              *float64  `json:"lr"`
	GradNorm        *float64  `json:"grad_norm"`
	GradNormClipped *float64  `json:"grad_norm_clipped"`
	TokensPerSecond *float64  `json:"tokens_per_second"`
	Skipped         bool      `json:"skipped"`
	SignFlips       []int     `json:"sign_flips,omitempty"`
	KL              *float64  `json:"kl,omitempty"`
	Hidden          *float64  `json:"hidden_loss,omitempty"`
	WallSeconds     *float64  `json:"wall_seconds"`
	Time            time.Time `json:"time"`
}

type metricsEvalJSON struct {
	Kind              string    `json:"kind"`
	Step              int       `json:"step"`
	Phase             string    `json:"phase,omitempty"`
	Layer             *int      `json:"layer,omitempty"`
	Loss              *float64  `json:"loss"`
	Perplexity        *float64  `json:"perplexity"`
	BestPerplexity    *float64  `json:"best_perplexity"`
	BestStep          int       `json:"best_step"`
	TeacherPerplexity *float64  `json:"teacher_perplexity"`
	WallSeconds       *float64  `json:"wall_seconds"`
	Time              time.Time `json:"time"`
}

// metricsAnyJSON reads either kind.
type metricsAnyJSON struct {
	metricsStepJSON
	Perplexity        *float64 `json:"perplexity"`
	BestPerplexity    *float64 `json:"best_perplexity"`
	BestStep          int      `json:"best_step"`
	TeacherPerplexity *float64 `json:"teacher_perplexity"`
}

// MarshalJSON writes the fields of r's kind (see MetricsRecord), null for non-finite
// numbers. Errors: a kind other than "step" or "eval".
func (r MetricsRecord) MarshalJSON() ([]byte, error) {
	f := finitePtr
	var layer *int
	if r.Phase == PhaseBlock {
		layer = &r.Layer
	}
	switch r.Kind {
	case MetricsStep:
		j := metricsStepJSON{Kind: r.Kind, Step: r.Step, Phase: r.Phase, Layer: layer, Loss: f(r.Loss), LR: f(r.LR), GradNorm: f(r.GradNorm),
			GradNormClipped: f(r.GradNormClipped), TokensPerSecond: f(r.TokensPerSecond), Skipped: r.Skipped,
			SignFlips: r.SignFlips, WallSeconds: f(r.WallSeconds), Time: r.Time}
		if r.HasParts {
			j.KL, j.Hidden = f(r.KL), f(r.Hidden)
		}
		return json.Marshal(j)
	case MetricsEval:
		return json.Marshal(metricsEvalJSON{Kind: r.Kind, Step: r.Step, Phase: r.Phase, Layer: layer, Loss: f(r.Loss), Perplexity: f(r.Perplexity),
			BestPerplexity: f(r.BestPerplexity), BestStep: r.BestStep, TeacherPerplexity: f(r.TeacherPerplexity),
			WallSeconds: f(r.WallSeconds), Time: r.Time})
	}
	return nil, fmt.Errorf("nvgkit: metrics record kind %q, want %q or %q", r.Kind, MetricsStep, MetricsEval)
}

// UnmarshalJSON reads a record written by MarshalJSON: null (or a missing number) of the
// record's kind ↦ NaN; the other kind's fields stay zero. Errors: bad JSON, a kind other than
// "step" or "eval", a negative step.
func (r *MetricsRecord) UnmarshalJSON(b []byte) error {
	var j metricsAnyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Step < 0 {
		return fmt.Errorf("step %d is negative", j.Step)
	}
	out := MetricsRecord{Kind: j.Kind, Step: j.Step, Phase: j.Phase, Loss: orNaN(j.Loss), WallSeconds: orNaN(j.WallSeconds), Time: j.Time}
	if j.Layer != nil {
		out.Layer = *j.Layer
	}
	switch j.Kind {
	case MetricsStep:
		out.LR, out.GradNorm, out.GradNormClipped = orNaN(j.LR), orNaN(j.GradNorm), orNaN(j.GradNormClipped)
		out.TokensPerSecond, out.Skipped, out.SignFlips = orNaN(j.TokensPerSecond), j.Skipped, j.SignFlips
		if j.KL != nil || j.Hidden != nil {
			out.KL, out.Hidden, out.HasParts = orNaN(j.KL), orNaN(j.Hidden), true
		}
	case MetricsEval:
		out.Perplexity, out.BestPerplexity, out.BestStep = orNaN(j.Perplexity), orNaN(j.BestPerplexity), j.BestStep
		out.TeacherPerplexity = orNaN(j.TeacherPerplexity)
	default:
		return fmt.Errorf("kind %q, want %q or %q", j.Kind, MetricsStep, MetricsEval)
	}
	*r = out
	return nil
}

// ReadMetrics reads a metrics log (metrics.jsonl) written by a Trainer, in file order. A last
// line without its newline that is not a complete record — what a crash or a run still
// writing leaves — is skipped (partial reports it: the bytes skipped, 0 when none), so a
// live or crashed run's log is always readable. Errors: the file cannot be read; a complete
// line that is not a record (naming the file and the line number).
func ReadMetrics(path string) (recs []MetricsRecord, partial int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	recs, partial, err = parseMetrics(b)
	if err != nil {
		return nil, 0, fmt.Errorf("nvgkit: %s: %w", path, err)
	}
	return recs, partial, nil
}

// parseMetrics parses the lines of a metrics log; see ReadMetrics. Blank lines are skipped.
func parseMetrics(b []byte) ([]MetricsRecord, int, error) {
	var recs []MetricsRecord
	for n := 1; len(b) > 0; n++ {
		line, rest, complete := bytes.Cut(b, []byte{'\n'})
		b = rest
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r MetricsRecord
		if err := json.Unmarshal(line, &r); err != nil {
			if !complete {
				return recs, len(line), nil
			}
			return nil, 0, fmt.Errorf("line %d: %w", n, err)
		}
		recs = append(recs, r)
	}
	return recs, 0, nil
}

// TrainingSeries returns the series ui.PlotTraining draws (the fields of ui.TrainingCurves)
// from metrics records, such as ReadMetrics returns for a finished, crashed or running run: the step
// records' steps and losses, the eval records' steps and perplexities (non-finite ones —
// a diverged student — left out) and the teacher's perplexity (0 when no eval record has
// it).
func TrainingSeries(recs []MetricsRecord) (steps []int, loss []float64, evalSteps []int, evalPPL []float64, teacherPPL float64) {
	for _, r := range recs {
		switch r.Kind {
		case MetricsStep:
			steps, loss = append(steps, r.Step), append(loss, r.Loss)
		case MetricsEval:
			if finite(r.Perplexity) && r.Perplexity >= 1 {
				evalSteps, evalPPL = append(evalSteps, r.Step), append(evalPPL, r.Perplexity)
			}
			if finite(r.TeacherPerplexity) && r.TeacherPerplexity >= 1 {
				teacherPPL = r.TeacherPerplexity
			}
		}
	}
	return
}

// PhaseSeries returns the phases the step records of a metrics log ran in (such as
// ReadMetrics returns): one session.Phase per run of consecutive step records of one phase,
// First and Last their steps; records without a phase (older logs) are left out. It is
// session.History.PhaseSpans of the step records, so a run's log and a Lab's history mark
// the same phases (ui.TrainingCurves.Phases).
func PhaseSeries(recs []MetricsRecord) []session.Phase {
	var h session.History
	for _, r := range recs {
		if r.Kind == MetricsStep {
			h.Steps = append(h.Steps, session.StepStats{Step: r.Step, Phase: r.Phase, Layer: r.Layer})
		}
	}
	return h.PhaseSpans()
}

// SignFlipSeries returns the signs flipped per decoder layer over the steps of a TrainSigns
// run's metrics records: steps [n] (the step records that carry sign_flips) and flips[l][i],
// layer l's flips at steps[i] (0 where a record has fewer layers). Both are empty when no step
// record carries flips (a metric-only run). It is session.History.SignFlipSeries of the step
// records, so a run's log and a Lab's history give the same series (ui.PlotSignFlips).
func SignFlipSeries(recs []MetricsRecord) (steps []float64, flips [][]float64) {
	var h session.History
	for _, r := range recs {
		if r.Kind == MetricsStep {
			h.Steps = append(h.Steps, session.StepStats{Step: r.Step, SignFlips: r.SignFlips})
		}
	}
	return h.SignFlipSeries()
}

// metricsSink is one destination of a Trainer's metrics records.
type metricsSink struct {
	w      io.Writer
	name   string
	failed bool
}

// AddMetricsWriter makes the Trainer write every metrics record (MetricsRecord, one JSON
// line each, written with one Write call) to w as well as to OutDir's metrics.jsonl; at every
// evaluation and checkpoint w is synced when it has a Sync() error method (an *os.File). A
// write error is logged once (Log) and that writer is dropped; training goes on.
func (tr *Trainer) AddMetricsWriter(w io.Writer) {
	tr.metrics = append(tr.metrics, &metricsSink{w: w, name: fmt.Sprintf("metrics writer %d", len(tr.metrics)+1)})
}

// openMetricsFile opens OutDir's metrics.jsonl for appending, first keeping only the records
// of the state the Trainer continues from (a resumed run appends without duplicates): step
// records up to Step and eval records of the kept evaluations. An unreadable line (a crash
// mid-write) is dropped with a log line. It returns nil, nil without OutDir.
func (tr *Trainer) openMetricsFile() (*os.File, error) {
	if tr.Config.OutDir == "" {
		return nil, nil
	}
	path := filepath.Join(tr.Config.OutDir, MetricsFile)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("nvgkit: %w", err)
	}
	if len(old) > 0 {
		evals := map[int]bool{}
		for _, e := range tr.st.Evals {
			evals[e.Step] = true
		}
		var kept bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(old))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			var r MetricsRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				tr.logf("%s line %d unreadable (%v): dropped", path, n, err)
				continue
			}
			if (r.Kind == MetricsStep && r.Step <= tr.st.Step) || (r.Kind == MetricsEval && evals[r.Step] && r.Step <= tr.st.Step) {
				kept.Write(sc.Bytes())
				kept.WriteByte('\n')
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("nvgkit: %s: %w", path, err)
		}
		if !bytes.Equal(kept.Bytes(), old) {
			if err := atomicfile.WriteBytes(path, kept.Bytes()); err != nil {
				return nil, fmt.Errorf("nvgkit: %w", err)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nvgkit: %w", err)
	}
	return f, nil
}

// emitMetrics writes r to the metrics file and writers (a writer that fails is dropped, once
// logged).
func (tr *Trainer) emitMetrics(r MetricsRecord) {
	if len(tr.metrics) == 0 {
		return
	}
	r.Time = time.Now().UTC()
	b, err := json.Marshal(r)
	if err != nil { // only a bad kind, which the Trainer never makes
		tr.logf("metrics record not written: %v", err)
		return
	}
	b = append(b, '\n')
	for _, s := range tr.metrics {
		if s.failed {
			continue
		}
		if _, err := s.w.Write(b); err != nil {
			s.failed = true
			tr.logf("%s: %v; no more metrics records go there", s.name, err)
		}
	}
}

// syncMetrics syncs the metrics writers that can be (at checkpoints).
func (tr *Trainer) syncMetrics() {
	for _, s := range tr.metrics {
		if f, ok := s.w.(interface{ Sync() error }); ok && !s.failed {
			if err := f.Sync(); err != nil {
				s.failed = true
				tr.logf("%s: %v; no more metrics records go there", s.name, err)
			}
		}
	}
}

// stepRecord is the metrics record of a finished step that took d.
func (tr *Trainer) stepRecord(info StepInfo, d time.Duration, wall float64) MetricsRecord {
	clipped := info.GradNorm
	if c := tr.Config.ClipNorm; c > 0 && clipped > c {
		clipped = c
	}
	tps := math.NaN()
	if d > 0 {
		tps = float64(tr.Config.PhaseTokens(tr.Config.PhaseAt(info.Step))) / d.Seconds()
	}
	return MetricsRecord{Kind: MetricsStep, Step: info.Step, Phase: info.Phase, Layer: info.Layer, Loss: info.Loss, LR: info.LR, GradNorm: info.GradNorm,
		GradNormClipped: clipped, TokensPerSecond: tps, Skipped: info.Skipped, SignFlips: info.SignFlips, WallSeconds: wall,
		KL: info.KL, Hidden: info.Hidden, HasParts: tr.hidden.On() && info.Phase != PhaseBlock}
}
