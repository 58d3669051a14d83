// Package optim is the optimizer of a distillation run, in one settings type: Settings holds
// Adam's hyper-parameters for the student's trained values (a per-value relative step for the
// BLR metric scales, plain Adam for the RMSNorm gains; DESIGN.md §6 "Adam"), the learning-rate
// schedule (linear warm-up, cosine decay to a floor) and the gradient-norm clip, with its one
// default (Default), its one validator (Settings.Validate) and the one place where it becomes
// the Adam kernel's arguments (Settings.Adam, gpu.AdamConfig).
//
// nvgkit.Adam applies one update with a Settings to a Student net; train.TrainConfig holds the
// Settings of a run (its fields are TrainConfig's JSON fields lr, warmup, min_lr_frac,
// clip_norm, beta1, beta2, eps and metric_floor). The package imports only gpu, for the
// kernel's argument type.
package optim

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// Settings are the optimizer's settings. Every field holds exactly its value (no
// zero-means-default: start from Default). The schedule and the update are those of the
// PyTorch reference recipe (../shared/bench/torch_distill_ref.py): linear warm-up, cosine
// decay, clipped gradient norm, Adam with betas 0.9/0.99.
type Settings struct {
	// LR is the peak learning rate (finite, > 0): the metric scales' relative step (a value
	// moves by about LR·max(|θ|, MetricFloor·RMS) per step, RMS over its vector's live values)
	// and the norm gains' plain Adam step, at the top of the schedule (LRAt).
	LR float64 `json:"lr"`
	// Warmup is the number of linear warm-up steps; 0 (or negative, as older run files wrote)
	// means none.
	Warmup int `json:"warmup"`
	// MinLRFrac is the floor of the cosine decay as a fraction of LR (≤ 1); 0 (or negative)
	// decays to 0.
	MinLRFrac float64 `json:"min_lr_frac"`
	// ClipNorm is the global gradient L2 norm the gradients are clipped to before each update
	// (finite); 0 (or negative) disables clipping.
	ClipNorm float64 `json:"clip_norm"`
	// Beta1 and Beta2 are Adam's moment decay rates, in [0, 1).
	Beta1 float64 `json:"beta1"`
	Beta2 float64 `json:"beta2"`
	// Eps (> 0, not 0 in f32) is added to √v̂.
	Eps float64 `json:"eps"`
	// MetricFloor is the fraction of a metric vector's live RMS below which a value's relative
	// step does not shrink, in [0, 1].
	MetricFloor float64 `json:"metric_floor"`
}

// Default returns the optimizer of nvg distill (the one default, sized for the embedded tiny
// teacher on 2 CPU cores; DESIGN.md §6 "Defaults"): LR 0.05 with 3 warm-up steps and cosine
// decay to 10 %, gradients clipped to norm 1, Adam betas 0.9 and 0.99, Eps 1e-12 (the KL's
// gradients are small: 1e-8 would swamp √v̂ of gradients below ~1e-7) and MetricFloor 0.05
// (gpu.DefaultMetricFloor). A large run wants a lower LR (the README's H200 run: 0.005 with 50
// warm-up steps).
func Default() Settings {
	return Settings{LR: 0.05, Warmup: 3, MinLRFrac: 0.1, ClipNorm: 1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-12, MetricFloor: gpu.DefaultMetricFloor}
}

// FieldError is the error of Settings.Validate: the field named Field holds Value, out of
// its range Want. A front end names its own flag or setting for Field (train.TrainConfig's
// Validate reports it as a TrainConfigError, nvg distill as the flag).
type FieldError struct {
	Field string  // a Settings field name: "LR", "Beta2", …
	Value float64 // the field's value
	Want  string  // the range, e.g. "a finite value > 0"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("optim: Settings.%s = %g, want %s", e.Field, e.Value, e.Want)
}

// Validate reports the first field of s out of its range as a *FieldError (nil when every
// field is in range): LR finite and > 0, MinLRFrac ≤ 1, ClipNorm finite, Beta1 and Beta2 in
// [0, 1), Eps > 0 and finite in f32 (not rounding to 0: the update divides by √v̂ + ε),
// MetricFloor in [0, 1]. LR is passed to the kernel as f32, so it must be finite there too.
func (s Settings) Validate() error {
	bad := func(field string, v float64, want string) error { return &FieldError{field, v, want} }
	switch {
	case !(s.LR > 0) || s.LR > math.MaxFloat32:
		return bad("LR", s.LR, "a finite value > 0")
	case s.MinLRFrac > 1 || math.IsNaN(s.MinLRFrac):
		return bad("MinLRFrac", s.MinLRFrac, "≤ 1")
	case math.IsNaN(s.ClipNorm) || math.IsInf(s.ClipNorm, 0):
		return bad("ClipNorm", s.ClipNorm, "a finite value")
	case !(s.Beta1 >= 0 && s.Beta1 < 1):
		return bad("Beta1", s.Beta1, "a value in [0, 1)")
	case !(s.Beta2 >= 0 && s.Beta2 < 1):
		return bad("Beta2", s.Beta2, "a value in [0, 1)")
	case !(s.Eps > 0) || s.Eps > math.MaxFloat32 || float32(s.Eps) == 0:
		return bad("Eps", s.Eps, "a value > 0, finite and not 0 in f32")
	case !(s.MetricFloor >= 0 && s.MetricFloor <= 1):
		return bad("MetricFloor", s.MetricFloor, "a value in [0, 1]")
	}
	return nil
}

// LRAt returns the learning rate of optimizer step step (1-based) of a schedule that spans
// span steps: a linear warm-up over the first Warmup steps times a cosine decay from LR to
// MinLRFrac·LR over the span,
//
//	LR · min(1, step/Warmup) · (f + (1−f)·½·(1 + cos(π·min(step, span)/span))),   f = max(0, MinLRFrac),
//
// as in the PyTorch reference (Warmup ≤ 0: no warm-up factor). At step = span ≥ Warmup it is
// f·LR, and it stays there for the steps after the span. With Warmup > span the two factors
// overlap: the last steps of the span run below f·LR (span/Warmup·f·LR at step = span).
func (s Settings) LRAt(step, span int) float64 {
	w := 1.0
	if s.Warmup > 0 && step < s.Warmup {
		w = float64(step) / float64(s.Warmup)
	}
	f := max(0, s.MinLRFrac)
	return s.LR * w * (f + (1-f)*0.5*(1+math.Cos(math.Pi*float64(min(step, span))/float64(span))))
}

// Adam returns the Adam kernel's arguments (gpu.MultiTensorAdam) for an update at learning
// rate lr (a step's rate, LRAt; ≥ 0): the metric scales' relative step with s.MetricFloor and
// the norm gains' plain step, both at lr with s's betas and Eps. It is the one place where the
// settings become the kernel's.
func (s Settings) Adam(lr float64) (metric, gain gpu.AdamConfig) {
	metric = gpu.AdamConfig{LR: lr, Beta1: s.Beta1, Beta2: s.Beta2, Eps: s.Eps, Relative: true, Floor: s.MetricFloor}
	gain = gpu.AdamConfig{LR: lr, Beta1: s.Beta1, Beta2: s.Beta2, Eps: s.Eps}
	return metric, gain
}
