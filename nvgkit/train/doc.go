// Package train is nvg's training layer on top of nvgkit's step-level API (DESIGN.md §2, §6):
// Trainer runs the distillation loop `nvg distill` runs (teacher pass once, then per step
// ZeroGrads, Step, ClipGrads, Adam, with the learning-rate schedule, held-out evaluation, the
// best snapshot, skipped non-finite steps), configured by TrainConfig (DefaultTrainConfig:
// the defaults of `nvg distill`'s flags). It writes checkpoints (Checkpoint, LoadCheckpoint,
// LatestCheckpoint; Resume continues a run bit-identically), a Report and a per-step
// metrics.jsonl (MetricsRecord, ReadMetrics, PlotMetrics), and caches the teacher's top-k on
// disk (TopKCache). Lab (NewLab) is the in-process implementation of session.Lab: the same
// steps driven one call at a time, for notebooks and tests.
//
// A run:
//
//	tr, _ := train.NewTrainer(teacher, student, trainIDs, heldOutIDs, train.DefaultTrainConfig())
//	defer tr.Close()
//	rep, _ := tr.Run(ctx)                                // rep.DistilledPPL, rep.GapClosed, …
//
// Package train imports nvgkit; nvgkit never imports it.
package train
