package train

import (
	"encoding/json"
	"fmt"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// The kinds of a run's phases (Phase.Kind; DESIGN.md §6 "Phases").
const (
	// PhaseKL trains end to end on the KL of the teacher's top-k: the metric (h, ℓ, g of every
	// BLR path), the RMSNorm gains and, with TrainSigns, the signs.
	PhaseKL = "kl"
	// PhaseFinish is the scale-only finish (TrainConfig.FinishSteps): the same steps on the
	// same loss with the signs frozen — no score updates, no flips — so only the metric and
	// the norm gains move. Its learning rates continue the run's schedule (LRAt).
	PhaseFinish = "finish"
	// PhaseBlock is one decoder layer's block-wise reconstruction (TrainConfig.BlockSteps;
	// DESIGN.md §6 "Block-wise reconstruction"), before the KL phase: its steps train the
	// values of layer Phase.Layer alone (its metric, norm gains and, with TrainSigns, its
	// signs) on the normalised MSE of its output, computed from the student's own input,
	// against the teacher's (nvgkit.BlockStep); no KL. A block phase starts its optimizer
	// afresh (zero Adam moments and sign scores), and so does the KL phase after the last.
	PhaseBlock = "block"
)

// Phase is one part of a run's schedule: its optimizer steps First…Last (1-based, inclusive,
// numbered over the whole run) and its Kind, which says what the steps train and on which
// loss. TrainConfig.Phases lists a run's phases in order; every step of the run belongs to
// exactly one, so a checkpoint's step alone says where a resumed run is, mid-phase included.
// Steps run past the plan (a Lab stepping beyond Steps) belong to the last phase. Layer is
// the decoder layer a PhaseBlock trains (0 for the other kinds); in JSON ("layer") it is
// written for block phases only.
//
// A new kind is a constant here, its steps in TrainConfig.Phases (a setting of TrainConfig
// that sizes them), what its steps train in Trainer.enterPhase, its step in
// Trainer.stepBatch and its tokens per step in TrainConfig.PhaseTokens; metrics,
// checkpoints, resume, the report and the plots follow the step number.
type Phase struct {
	Kind  string
	Layer int
	First int
	Last  int
}

// phaseJSON is Phase's JSON form: layer only in a block phase.
type phaseJSON struct {
	Kind  string `json:"kind"`
	Layer *int   `json:"layer,omitempty"`
	First int    `json:"first_step"`
	Last  int    `json:"last_step"`
}

func (p Phase) wire() phaseJSON {
	j := phaseJSON{Kind: p.Kind, First: p.First, Last: p.Last}
	if p.Kind == PhaseBlock {
		j.Layer = &p.Layer
	}
	return j
}

func (j phaseJSON) phase() Phase {
	p := Phase{Kind: j.Kind, First: j.First, Last: j.Last}
	if j.Layer != nil {
		p.Layer = *j.Layer
	}
	return p
}

// MarshalJSON writes p as {"kind", "layer" (block phases only), "first_step", "last_step"}.
func (p Phase) MarshalJSON() ([]byte, error) { return json.Marshal(p.wire()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Phase) UnmarshalJSON(b []byte) error {
	var j phaseJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = j.phase()
	return nil
}

// Name is the phase as logs and plots show it: its kind, and for a block phase its layer
// ("block 3").
func (p Phase) Name() string { return SessionPhases([]Phase{p})[0].Name() }

// Steps returns the number of steps of p.
func (p Phase) Steps() int { return p.Last - p.First + 1 }

// Phases returns c's phases in order: with BlockSteps, one block phase per decoder layer
// (layer l's steps l·BlockSteps+1 … (l+1)·BlockSteps, for l = 0 … BlockLayers−1); then the KL
// phase (up to Steps − FinishSteps); then, when FinishSteps > 0, the scale-only finish (the
// last FinishSteps steps). The step budget Steps counts every phase's steps. c must be valid
// (Validate); BlockLayers is the student's layer count, which NewTrainer sets (a config with
// BlockSteps whose BlockLayers is still 0 has no block phases yet: Trainer.Config has them).
func (c TrainConfig) Phases() []Phase {
	var ps []Phase
	b := c.blockTotal()
	for l := 0; b > 0 && l < c.BlockLayers; l++ {
		ps = append(ps, Phase{Kind: PhaseBlock, Layer: l, First: l*c.BlockSteps + 1, Last: (l + 1) * c.BlockSteps})
	}
	kl := c.Steps - c.FinishSteps
	ps = append(ps, Phase{Kind: PhaseKL, First: b + 1, Last: kl})
	if c.FinishSteps > 0 {
		ps = append(ps, Phase{Kind: PhaseFinish, First: kl + 1, Last: c.Steps})
	}
	return ps
}

// blockTotal is the number of steps of the block-wise reconstruction phase, BlockSteps ·
// BlockLayers (0 without one, or while BlockLayers is unknown).
func (c TrainConfig) blockTotal() int { return c.BlockSteps * c.BlockLayers }

// PhaseAt returns the phase of optimizer step s (1-based): the one whose steps hold it, the
// first for s < 1 (an evaluation before training) and the last for s > Steps.
func (c TrainConfig) PhaseAt(s int) Phase {
	ps := c.Phases()
	for _, p := range ps {
		if s <= p.Last {
			return p
		}
	}
	p := ps[len(ps)-1]
	p.Last = s
	return p
}

// PhaseTokens is the number of tokens one step of phase p trains on: NB·T for every kind (a
// block step's windows as a KL step's: the block phase's budget is counted in the same
// tokens). The run's token budget (Report.Tokens) is the sum over its steps.
func (c TrainConfig) PhaseTokens(p Phase) int { return c.NB * c.T }

// PhaseReport is one phase of a run in its Report: the phase, the steps of it done and the
// tokens they trained on.
type PhaseReport struct {
	Phase
	StepsDone int
	Tokens    int
}

type phaseReportJSON struct {
	phaseJSON
	StepsDone int `json:"steps_done"`
	Tokens    int `json:"tokens"`
}

// MarshalJSON writes r as its phase's fields (Phase.MarshalJSON) with "steps_done" and
// "tokens".
func (r PhaseReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(phaseReportJSON{r.Phase.wire(), r.StepsDone, r.Tokens})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *PhaseReport) UnmarshalJSON(b []byte) error {
	var j phaseReportJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = PhaseReport{Phase: j.phase(), StepsDone: j.StepsDone, Tokens: j.Tokens}
	return nil
}

// phaseReports returns the phases of c with the steps of each done after step steps done
// and their tokens.
func (c TrainConfig) phaseReports(steps int) []PhaseReport {
	var out []PhaseReport
	for _, p := range c.Phases() {
		done := min(max(steps-p.First+1, 0), p.Steps())
		out = append(out, PhaseReport{Phase: p, StepsDone: done, Tokens: done * c.PhaseTokens(p)})
	}
	return out
}

// SessionPhases converts phases to the session's plain form (Info.Phases, what ui's plots
// mark).
func SessionPhases(ps []Phase) []session.Phase {
	out := make([]session.Phase, len(ps))
	for i, p := range ps {
		out[i] = session.Phase{Kind: p.Kind, Layer: p.Layer, First: p.First, Last: p.Last}
	}
	return out
}

// enterPhase sets the student up for a step of phase p before its forward: with TrainSigns
// the backward updates the sign scores in a KL or block step and leaves them (and the signs)
// alone in a finish step (nvgkit.DisableSigns keeps the scores, which the checkpoints carry).
// Called before every step, so a resumed run, a Lab restored to another phase's snapshot
// and a gradient check (which pauses and resumes the sign work) all step as a straight run.
func (tr *Trainer) enterPhase(p Phase) error {
	switch p.Kind {
	case PhaseKL, PhaseBlock:
		if tr.Config.TrainSigns {
			return nvgkit.EnableSigns(tr.student, tr.Config.SignKnobs())
		}
		return nil
	case PhaseFinish:
		if tr.Config.TrainSigns {
			return nvgkit.DisableSigns(tr.student)
		}
		return nil
	}
	return fmt.Errorf("train: phase %q has no step", p.Kind)
}

// endPhase ends optimizer step s (after its Adam update and its sign flips): when s is the
// last step of a block phase, the next phase — the next layer's block, or the KL phase —
// starts its optimizer afresh: nvgkit.ResetOptimizer zeroes the Adam moments and the sign
// scores and the Adam step count restarts (CheckpointMeta.AdamStep 0). With zero moments and
// the gradients of one layer alone, a block step's Adam update moves that layer alone, and a
// sign of another layer, its score 0, never flips. Being part of step s, the reset is in the
// checkpoint after it, so a resume, or a Lab restored to that step, continues from it.
func (tr *Trainer) endPhase(s int) error {
	if p := tr.Config.PhaseAt(s); p.Kind != PhaseBlock || s != p.Last {
		return nil
	}
	if err := nvgkit.ResetOptimizer(tr.student); err != nil {
		return fmt.Errorf("step %d: %w", s, err)
	}
	tr.st.AdamStep = 0
	return nil
}

// trainsSigns reports whether steps of phase p flip signs (TrainSigns, and not the finish).
func (tr *Trainer) trainsSigns(p Phase) bool {
	return tr.Config.TrainSigns && p.Kind != PhaseFinish
}
