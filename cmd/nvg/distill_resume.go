package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvg-project/nvg/nvgkit/train"
)

// resumeFlags are the flags --resume accepts besides itself (the others are the run's).
var resumeFlags = map[string]bool{"resume": true, "o": true, "out": true, "mem-log": true, "mem-log-every": true, "stream-teacher": true,
	"steps": true, "keep": true, "keep-activations": true, "activation-budget-mib": true}

// resumeDistill continues the run in cli.resume: its settings come from its distill.json
// (flags: f's values for --steps, --keep, --keep-activations, --activation-budget-mib, which
// set names); the checkpoint is checked before anything expensive (compression, teacher
// pass). A finished run with nothing to extend says so and does nothing.
func resumeDistill(f train.RunFile, cli distillCLI, set map[string]bool) error {
	out, flags := cli.resume, f.Train
	for name := range set {
		if name == "config" {
			return usagef("--resume takes the run's settings from %s; --config cannot be given with it", filepath.Join(out, train.RunFileName))
		}
		if !resumeFlags[name] {
			return usagef("--resume takes the run's settings from %s; --%s cannot be changed", filepath.Join(out, train.RunFileName), name)
		}
	}
	if o := flags.OutDir; o != "" && filepath.Clean(o) != filepath.Clean(out) {
		return usagef("--resume %s writes into that directory; -o %s differs", out, o)
	}
	f, err := train.ReadRunFile(out)
	var ie *train.InputError
	if errors.As(err, &ie) {
		return usagef("--resume %v", err)
	}
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	if !train.HasCheckpoint(out) {
		return usagef("--resume %s: no checkpoint there (the run stopped before its first checkpoint: nothing to resume; remove %s and start it again)", out, out)
	}
	res, err := train.LoadResumePoint(out, f.Setup, logf)
	if sm := (*train.SettingMismatch)(nil); errors.As(err, &sm) {
		return usagef("--resume %s: %s", out, settingMismatch(sm))
	}
	if err != nil {
		return err
	}
	done, err := applyResumeFlags(res, flags, set, out)
	if done || err != nil {
		return err
	}
	f.Train = res.Checkpoint.Meta.Config // what the run trains with from here on
	return distill(f, out, res, cli.opts)
}

// applyResumeFlags sets the checkpoint's settings that the resume's flags change (--keep,
// --keep-activations, --activation-budget-mib; --steps extends the run). It reports done
// when the run is complete and no --steps extends it (it says so).
func applyResumeFlags(res *train.ResumePoint, flags train.TrainConfig, set map[string]bool, out string) (done bool, err error) {
	ck := res.Checkpoint
	cfg := &ck.Meta.Config
	if set["keep"] {
		if flags.Keep < 0 {
			return false, usagef("--keep must be ≥ 0, got %d", flags.Keep)
		}
		cfg.Keep = flags.Keep
	}
	if set["keep-activations"] {
		cfg.KeepActivations = flags.KeepActivations
	}
	if set["activation-budget-mib"] {
		cfg.ActivationBudget = flags.ActivationBudget
	}
	if set["steps"] {
		if err := ck.Extend(flags.Steps); err != nil {
			return false, usagef("--resume %s --steps %d: %v", out, flags.Steps, err)
		}
		fmt.Fprintf(os.Stderr, "extending the run to %d steps (the learning-rate schedule spans its first %d; the steps after run at %.3g)\n",
			cfg.Steps, cfg.ScheduleSteps, cfg.LRAt(cfg.Steps))
		return false, nil
	}
	rep, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || rep.Interrupted || rep.Steps < cfg.Steps || ck.Meta.Step < cfg.Steps || !exists(filepath.Join(out, "student.cmf")) {
		return false, nil
	}
	// Nothing left to do: no teacher pass, no export again.
	fmt.Printf("the run in %s is complete (%d of %d steps): student %s, held-out perplexity %.3f (teacher %.3f, compressed %.3f, %.1f %% of the log-perplexity gap closed); --steps N extends it\n",
		out, rep.Steps, cfg.Steps, filepath.Join(out, "student.cmf"), rep.DistilledPPL, rep.TeacherPPL, rep.CompressedPPL, 100*rep.GapClosed)
	return true, nil
}

// setupFlags names the distill flag of each train.Setup field that has one.
var setupFlags = map[string]string{"Teacher": "teacher", "Tokenizer": "tokenizer", "TrainFiles": "train-files", "EvalFiles": "eval-files",
	"BitsPerWeight": "bpw", "Paths": "paths"}

// settingMismatch says which setting a checkpoint was trained with that the run's
// distill.json does not have, naming its flag when it has one.
func settingMismatch(sm *train.SettingMismatch) string {
	flag := setupFlags[sm.Field]
	if f, ok := strings.CutPrefix(sm.Field, "Train."); ok {
		flag = trainConfigFlags[f]
	}
	trained := sm.Setting + " = " + sm.Trained
	if flag != "" {
		trained = fmt.Sprintf("--%s %s", flag, sm.Trained)
	}
	return fmt.Sprintf("checkpoint %s was trained with %s, but %s has %s = %s: a checkpoint copied from another run? Resume that run in its own directory, or start a new one (another -o)",
		sm.Checkpoint, trained, sm.Against, sm.Setting, sm.Want)
}
