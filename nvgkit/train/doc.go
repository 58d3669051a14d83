// Package train owns a distillation run (DESIGN.md §2, §6): everything between a run's
// settings and its trained student.
//
//   - Assembly: Setup (the run's settings in one value: the layout of nvg distill's
//     distill.json, field by field a Lab's session.Setup) and Assemble, the one function that
//     builds a Run from it — the models (OpenModel, TokenizerJSON, and the one place the
//     embedded default model is chosen), the corpus, the compression, the device, the nets
//     and the Trainer. nvg distill, the in-process Lab (and so the session server) and nvg
//     bench call it; Env says how (device, log, ranks, run directory), not what. Outside a
//     run, the same settings give nvg compress its calibration pass (CalibrateTeacher), and
//     the files beside a model give nvg export its tokenizer and config (ExportFiles).
//   - Training: Trainer runs the loop nvg distill runs (teacher pass once, then per step
//     ZeroGrads, Step, ClipGrads, Adam, with the learning-rate schedule, held-out evaluation,
//     the best snapshot, skipped non-finite steps), configured by TrainConfig
//     (DefaultTrainConfig: the defaults of nvg distill's flags; its optimizer is an
//     optim.Settings), one process or one rank of a data-parallel run (Comm).
//   - Run records: the run directory (RunFile, LoadResumePoint), checkpoints (Checkpoint,
//     LoadCheckpoint, LatestCheckpoint; a resume is bit-identical), the Report, metrics.jsonl
//     (MetricsRecord, ReadMetrics), the teacher's top-k on disk (TopKCache), Provenance, the
//     memory log (MemLogger) and the progress display (Progress).
//   - Lab (NewLab): the in-process session.Lab, the same steps driven one call at a time.
//
// A run:
//
//	run, _ := train.Assemble(ctx, train.Setup{BitsPerWeight: 1, Paths: "auto", Train: train.DefaultTrainConfig()}, train.Env{})
//	defer run.Close()
//	rep, _ := run.Trainer.Run(ctx)                       // rep.DistilledPPL, rep.GapClosed, …
//
// Package train imports nvgkit; nvgkit never imports it.
package train
