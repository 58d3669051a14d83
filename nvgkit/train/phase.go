package train

import (
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
)

// Phase is one part of a run's schedule: its optimizer steps First…Last (1-based, inclusive,
// numbered over the whole run) and its Kind, which says what the steps train and on which
// loss. TrainConfig.Phases lists a run's phases in order; every step of the run belongs to
// exactly one, so a checkpoint's step alone says where a resumed run is, mid-phase included.
// Steps run past the plan (a Lab stepping beyond Steps) belong to the last phase.
//
// A new kind (the block-wise reconstruction of issue 36) is a constant here, its steps in
// TrainConfig.Phases (a setting of TrainConfig that sizes them), what its steps train in
// Trainer.enterPhase, its step in Trainer.step and its tokens per step in
// TrainConfig.PhaseTokens; metrics, checkpoints, resume, the report and the plots follow
// the step number.
type Phase struct {
	Kind  string `json:"kind"`
	First int    `json:"first_step"`
	Last  int    `json:"last_step"`
}

// Steps returns the number of steps of p.
func (p Phase) Steps() int { return p.Last - p.First + 1 }

// Phases returns c's phases in order: the KL phase (steps 1 … Steps − FinishSteps), then,
// when FinishSteps > 0, the scale-only finish (the last FinishSteps steps). The step budget
// Steps counts every phase's steps. c must be valid (Validate).
func (c TrainConfig) Phases() []Phase {
	kl := c.Steps - c.FinishSteps
	ps := []Phase{{Kind: PhaseKL, First: 1, Last: kl}}
	if c.FinishSteps > 0 {
		ps = append(ps, Phase{Kind: PhaseFinish, First: kl + 1, Last: c.Steps})
	}
	return ps
}

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

// PhaseTokens is the number of predicted tokens one step of phase p trains on: NB·T for
// PhaseKL and PhaseFinish. The run's token budget (Report.Tokens) is the sum over its steps.
func (c TrainConfig) PhaseTokens(p Phase) int { return c.NB * c.T }

// PhaseReport is one phase of a run in its Report: the phase, the steps of it done and the
// tokens they trained on.
type PhaseReport struct {
	Phase
	StepsDone int `json:"steps_done"`
	Tokens    int `json:"tokens"`
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
		out[i] = session.Phase{Kind: p.Kind, First: p.First, Last: p.Last}
	}
	return out
}

// enterPhase sets the student up for a step of phase p before its forward: with TrainSigns
// the backward updates the sign scores in a KL step and leaves them (and the signs) alone
// in a finish step (nvgkit.DisableSigns keeps the scores, which the checkpoints carry).
// Called before every step, so a resumed run, a Lab restored to another phase's snapshot
// and a gradient check (which pauses and resumes the sign work) all step as a straight run.
func (tr *Trainer) enterPhase(p Phase) error {
	if !tr.Config.TrainSigns {
		return nil
	}
	switch p.Kind {
	case PhaseKL:
		return nvgkit.EnableSigns(tr.student, tr.Config.SignKnobs())
	case PhaseFinish:
		return nvgkit.DisableSigns(tr.student)
	}
	return fmt.Errorf("train: phase %q has no step", p.Kind)
}

// trainsSigns reports whether steps of phase p flip signs (TrainSigns, and not the finish).
func (tr *Trainer) trainsSigns(p Phase) bool {
	return tr.Config.TrainSigns && p.Kind != PhaseFinish
}
