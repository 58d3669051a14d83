package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/internal/jsondup"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// defaultDistillSettings are nvg distill's defaults: the embedded tiny teacher and the Go
// standard library, 1 bit per weight, paths auto, the refined initialisation, seed 1, and
// train.DefaultTrainConfig (the one table of training defaults, DESIGN.md §6 "Defaults").
func defaultDistillSettings() train.RunFile {
	c := train.DefaultTrainConfig()
	return train.RunFile{Setup: train.Setup{BitsPerWeight: 1, Paths: "auto", Init: compress.InitRefine.String(), Train: c}, Seed: c.Seed}
}

// distillCLI are nvg distill's flags that are not settings of the run.
type distillCLI struct {
	config string
	resume string
	opts   distillOptions
	signs  signFlags
	calib  calibFlags
}

// fileList is a flag.Value of comma-separated corpus sources (expanded by expandCorpus).
type fileList struct{ p *[]string }

func (f fileList) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f fileList) Set(v string) error {
	if v == "" {
		*f.p = nil
		return nil
	}
	out := []string{} // "," is a list without files (an error), not no list
	for _, p := range strings.Split(v, ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	*f.p = out
	return nil
}

// mibFlag is a flag.Value of a byte count given in whole MiB (≥ 0).
type mibFlag struct{ p *int64 }

func (f mibFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strconv.FormatInt(*f.p>>20, 10)
}

func (f mibFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n >= 1<<43 {
		return fmt.Errorf("want a whole number of MiB ≥ 0, got %q", v)
	}
	*f.p = n << 20
	return nil
}

// distillFlags returns nvg distill's flag set bound to s (the settings of a run) and o. Each
// flag's default is s's value when it is called: the defaults, or a --config file's values,
// which the flags given on the command line then override.
func distillFlags(c *command, s *train.RunFile, o *distillCLI) *flag.FlagSet {
	fs := newFlags(c)
	tc := &s.Train
	fs.StringVar(&o.config, "config", "", "read the run's settings from this JSON file (the layout of a run's distill.json; flags given on the command line override it)")
	fs.StringVar(&s.Teacher, "teacher", s.Teacher, "teacher: HF checkpoint directory or .cmf (default: the embedded tiny teacher)")
	fs.StringVar(&s.Tokenizer, "tokenizer", s.Tokenizer, "tokenizer.json (default: beside the teacher, or the embedded one)")
	fs.Var(fileList{&s.TrainFiles}, "train-files", "comma-separated training `sources`: files, directories, globs, .jsonl corpora (see README; default: the Go standard library training split)")
	fs.Var(fileList{&s.EvalFiles}, "eval-files", "comma-separated held-out `sources`, as --train-files (default: the Go standard library held-out split)")
	fs.Float64Var(&s.BitsPerWeight, "bpw", s.BitsPerWeight, "target bits per weight of every compressed linear (0 < bpw ≤ 32)")
	fs.StringVar(&s.Paths, "paths", s.Paths, "BLR paths per tensor: auto, 1 or 2")
	fs.IntVar(&tc.Steps, "steps", tc.Steps, "optimizer steps")
	fs.IntVar(&tc.NB, "nb", tc.NB, "windows per step")
	fs.IntVar(&tc.T, "t", tc.T, "tokens per window (training and held-out)")
	fs.IntVar(&tc.Windows, "windows", tc.Windows, "distinct training windows, a multiple of --nb, cycled in order (0: steps·nb, new windows every step)")
	fs.IntVar(&tc.K, "k", tc.K, "teacher top-k entries per token (1…64)")
	fs.Float64Var(&tc.LR, "lr", tc.LR, "peak learning rate (relative step of the metric scales; the norm gains' Adam step)")
	fs.IntVar(&tc.Warmup, "warmup", tc.Warmup, "linear warm-up steps, then cosine decay to min_lr_frac (config file; default 10 %) of --lr (0: none)")
	fs.Float64Var(&tc.ClipNorm, "clip", tc.ClipNorm, "gradient L2 norm clip (0: none)")
	fs.IntVar(&tc.EvalEvery, "eval-every", tc.EvalEvery, "steps between held-out evaluations (0: only before and after)")
	fs.IntVar(&tc.EvalWindows, "eval-windows", tc.EvalWindows, "held-out windows of t+1 tokens per evaluation")
	fs.IntVar(&tc.CheckpointEvery, "checkpoint-every", tc.CheckpointEvery, "steps between checkpoints (0: at every evaluation)")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "seed of the training and held-out windows and of the compression")
	fs.IntVar(&tc.Keep, "keep", tc.Keep, "checkpoints kept in the output directory, the latest steps' (a corrupt latest one falls back to the one before; 0: all)")
	fs.BoolVar(&tc.KeepFinal, "keep-final", tc.KeepFinal, "export the final weights instead of the best held-out snapshot")
	fs.BoolVar(&tc.KeepActivations, "keep-activations", tc.KeepActivations, "keep every layer's activations for the backward instead of recomputing them (faster steps, more GPU memory, identical results)")
	fs.Var(mibFlag{&tc.ActivationBudget}, "activation-budget-mib", "GPU `MiB` the step may spend on kept activations without --keep-activations: all of them when they fit, else the layers that fit, the others recomputed (0: only with --keep-activations)")
	fs.StringVar(&tc.OutDir, "o", tc.OutDir, "output directory (default out/distill-<UTC time>)")
	fs.StringVar(&tc.OutDir, "out", tc.OutDir, "same as -o")
	fs.StringVar(&o.resume, "resume", "", "continue the interrupted run in this output directory (other flags are taken from it; with --steps N more than planned, a finished or unfinished run is extended: the learning-rate schedule keeps its shape and the steps after the planned ones run at its floor, 10 % of --lr, cycling through the same training windows again)")
	fs.StringVar(&tc.TopKFile, "topk-file", tc.TopKFile, "keep the teacher's top-k in this file (default: teacher-topk.bin in the output directory; reused when it matches, as by --resume)")
	fs.BoolVar(&o.opts.streamTeacher, "stream-teacher", false, "keep the teacher's layers, embedding and head in host memory and upload them a layer (or a block of head rows) at a time (a teacher larger than GPU memory; same results, slower)")
	signFlagSet(fs, tc, &o.signs)
	initFlagSet(fs, s, &o.calib)
	fs.StringVar(&tc.HiddenLoss, "hidden-loss", tc.HiddenLoss, "the hidden-state loss beside the KL: mse (‖h_S − h_T‖²/‖h_T‖² per token), cosine (1 − cos) or none (the KL alone), matching the student's layer outputs to the teacher's (DESIGN.md \"Hidden-state loss\"; the teacher's states are kept beside the top-k: 2 bytes × hidden_size × tokens per matched layer)")
	fs.Float64Var(&tc.HiddenWeight, "hidden-weight", tc.HiddenWeight, "with --hidden-loss: its weight λ (loss = KL + λ·mean over the layers)")
	fs.StringVar(&tc.HiddenLayers, "hidden-layers", tc.HiddenLayers, "with --hidden-loss: the decoder layers whose outputs are matched: all, every:K or a list such as 3,7")
	fs.StringVar(&o.opts.memLog, "mem-log", "", "append a CSV sample of GPU bytes, Go heap, goroutines and tokens/s to this file every --mem-log-every steps (plot it with nvg plot-mem)")
	fs.IntVar(&o.opts.memEvery, "mem-log-every", 100, "steps between --mem-log samples")
	return fs
}

// parseDistillFlags parses nvg distill's arguments into the run's settings: the defaults,
// overridden by the --config file when one is given, overridden by the flags on the command
// line. set holds the names of the flags given on the command line.
func parseDistillFlags(c *command, args []string) (s train.RunFile, o distillCLI, set map[string]bool, err error) {
	s = defaultDistillSettings()
	fs := distillFlags(c, &s, &o)
	if err := parseFlags(c, fs, args); err != nil {
		return s, o, nil, err
	}
	if o.config != "" {
		s = defaultDistillSettings()
		if err := loadDistillConfig(o.config, &s); err != nil {
			return s, o, nil, err
		}
		o = distillCLI{}
		fs = distillFlags(c, &s, &o) // the file's values become the flags' defaults
		if err := parseFlags(c, fs, args); err != nil {
			return s, o, nil, err
		}
	}
	set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return s, o, nil, usagef("unexpected argument %q (the teacher is --teacher MODEL)", fs.Arg(0))
	}
	s.Train.Seed = s.Seed
	if s.Train.HiddenLoss == "none" { // the flag's word for the KL alone (TrainConfig's "")
		s.Train.HiddenLoss = ""
	}
	o.signs.apply(&s.Train)
	if err := o.calib.check(s.Init); err != nil {
		return s, o, nil, err
	}
	s.Calibration = o.calib.config()
	return s, o, set, nil
}

// loadDistillConfig reads the JSON file path over s: an object in the layout of distill.json
// (train.RunFile); fields it leaves out keep s's values. Errors name the file and the
// unknown, ill-typed or repeated field.
func loadDistillConfig(path string, s *train.RunFile) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usagef("--config: %v", err)
	}
	// A JSON value that is not an object (null, an array, a number) would decode as nothing
	// or as a field-less type error: refuse it by its first byte.
	switch t := bytes.TrimSpace(b); {
	case len(t) == 0:
		return usagef("--config %s: empty file, want a JSON object", path)
	case t[0] != '{':
		kind := map[byte]string{'[': "an array", 'n': "null", '"': "a string", 't': "a bool", 'f': "a bool"}[t[0]]
		if kind == "" {
			kind = "a number or not JSON"
		}
		return usagef("--config %s: the file holds %s, want a JSON object (the layout of a run's distill.json)", path, kind)
	}
	// One rule for JSON: a setting named twice is refused, not resolved by taking the last.
	if err := jsondup.Check(b); err != nil && !errors.As(err, new(*json.SyntaxError)) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return usagef("--config %s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	seed, cseed := s.Seed, s.Train.Seed
	if err := dec.Decode(s); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te): // (the fields of the embedded train.Setup are named "Setup.…")
			return usagef("--config %s: field %q is a JSON %s, want %s", path, strings.TrimPrefix(te.Field, "Setup."), te.Value, jsonKind(te.Type.Kind().String()))
		case errors.As(err, &se):
			return usagef("--config %s: not JSON at byte %d: %v", path, se.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return usagef("--config %s: not JSON: the object ends early", path)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return usagef("--config %s: unknown field %s (the fields are those of a run's distill.json; see nvg distill -h and DESIGN.md §6)",
				path, strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return usagef("--config %s: %v", path, err)
	}
	if dec.More() {
		return usagef("--config %s: more than one JSON value", path)
	}
	// config.seed is the seed: the same as the top-level one, which also seeds the compression.
	switch {
	case s.Train.Seed == cseed:
	case s.Seed == seed:
		s.Seed = s.Train.Seed
	case s.Seed != s.Train.Seed:
		return usagef("--config %s: config.seed %d differs from seed %d; give seed only (it seeds the compression and the training)", path, s.Train.Seed, s.Seed)
	}
	return nil
}

// jsonKind names a Go kind as the JSON value it wants.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "true or false"
	case k == "slice":
		return "an array"
	case k == "struct":
		return "an object"
	}
	return k
}
