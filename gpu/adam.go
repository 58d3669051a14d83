package gpu

import (
	"fmt"
	"math"
)

const adamWG = 256

// DefaultMetricFloor is the fraction of the RMS of a metric vector's live values below
// which relative Adam steps do not shrink (DESIGN.md §6: 5 %).
const DefaultMetricFloor = 0.05

// AdamConfig holds the hyper-parameters of one Adam update; its fields are those of
// host.AdamConfig, so the two convert directly.
//
// Relative selects the per-value relative step for the metric scales (DESIGN.md §6): the
// step of value i is lr·max(|θ_i|, Floor·RMS)·m̂_i/(√v̂_i + ε), with RMS = sqrt(mean of θ²
// over the vector's live values) before the update; otherwise plain Adam, lr·m̂_i/(√v̂_i + ε)
// (the norm gains).
type AdamConfig struct {
	LR, Beta1, Beta2, Eps float64
	Relative              bool
	// Floor is the fraction of the live RMS below which a relative step does not shrink;
	// 0 means DefaultMetricFloor. Ignored unless Relative.
	Floor float64
}

// Adam records one Adam step (Kingma & Ba 2015, Algorithm 1, bias-corrected; host.Adam) in
// place on param with its moments m and v, for the gradient grad and the 1-based step:
//
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,  d = m·c1/(√(v·c2) + ε),
//	θ ← θ − lr·s·d,  s = max(|θ|, floor·RMS_live(θ)) when cfg.Relative, else 1,
//
// with c1 = 1/(1−β1^step), c2 = 1/(1−β2^step) computed in float64 on the host and
// RMS_live(θ) = sqrt(Σ_live θ²/#live) of the values before the step (0 when none is live),
// reduced on the GPU by one workgroup first. param, grad, m and v are F32 buffers of one
// length (any shape); live, when not nil, is a U32 mask of that length: entries where it is
// 0 (rank padding) are set to 0 in param, m and v and never move. Hyper-parameters are
// passed to the shader as f32. Errors: cfg out of range (lr ≥ 0, β in [0, 1), ε > 0, all
// finite; floor in [0, 1]), step < 1, dtype or length mismatches, or aliasing.
func Adam(r *Recorder, param, grad, m, v, live *Buffer, step int, cfg AdamConfig) error {
	const op = "Adam"
	switch {
	case !(cfg.LR >= 0) || cfg.LR > math.MaxFloat32:
		return fmt.Errorf("gpu: %s: lr = %g must be finite in f32 and ≥ 0", op, cfg.LR)
	case !(cfg.Beta1 >= 0 && cfg.Beta1 < 1):
		return fmt.Errorf("gpu: %s: beta1 = %g must be in [0, 1)", op, cfg.Beta1)
	case !(cfg.Beta2 >= 0 && cfg.Beta2 < 1):
		return fmt.Errorf("gpu: %s: beta2 = %g must be in [0, 1)", op, cfg.Beta2)
	case !(cfg.Eps > 0) || cfg.Eps > math.MaxFloat32:
		return fmt.Errorf("gpu: %s: eps = %g must be finite in f32 and > 0", op, cfg.Eps)
	case !(cfg.Floor >= 0 && cfg.Floor <= 1):
		return fmt.Errorf("gpu: %s: floor = %g must be in [0, 1]", op, cfg.Floor)
	case step < 1:
		return fmt.Errorf("gpu: %s: step = %d must be ≥ 1", op, step)
	}
	if err := need(op, "param", param, -1, F32); err != nil {
		return err
	}
	n := param.numel
	if err := positive(op, "param length", n); err != nil {
		return err
	}
	all := map[string]*Buffer{"param": param, "grad": grad, "m": m, "v": v}
	for _, name := range []string{"grad", "m", "v"} {
		if err := need(op, name, all[name], n, F32); err != nil {
			return err
		}
	}
	if live != nil {
		if err := need(op, "live", live, n, U32); err != nil {
			return err
		}
		all["live"] = live
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	c1 := 1 / (1 - math.Pow(cfg.Beta1, float64(step)))
	c2 := 1 / (1 - math.Pow(cfg.Beta2, float64(step)))
	if c1 > math.MaxFloat32 || c2 > math.MaxFloat32 {
		return fmt.Errorf("gpu: %s: bias corrections %g, %g overflow f32", op, c1, c2)
	}
	floor := cfg.Floor
	if floor == 0 {
		floor = DefaultMetricFloor
	}
	f := func(x float64) uint32 { return math.Float32bits(float32(x)) }
	uni := []uint32{uint32(n), f(cfg.LR), f(cfg.Beta1), f(cfg.Beta2), f(cfg.Eps), f(c1), f(c2), f(floor)}
	type params struct {
		Stage          string
		WG             int
		Relative, Mask bool
	}
	mark := len(r.ops)
	binds := []Binding{Whole(param), Whole(grad), Whole(m), Whole(v)}
	access := []Access{ReadWrite, Read, ReadWrite, ReadWrite}
	if live != nil {
		binds = append(binds, Whole(live))
		access = append(access, Read)
	}
	if cfg.Relative {
		rms, err := r.Temp(op+" rms", F32, 1)
		if err != nil {
			return err
		}
		rb := []Binding{Whole(param)}
		ra := []Access{Read}
		if live != nil {
			rb = append(rb, Whole(live))
			ra = append(ra, Read)
		}
		k, err := r.d.Kernel(KernelSpec{Name: op + ".rms", File: "adam.wgsl",
			Params: params{"rms", adamWG, true, live != nil}, Bindings: append(ra, ReadWrite), Uniforms: 8})
		if err != nil {
			return err
		}
		if err := r.Dispatch(k, [3]int{1, 1, 1}, uni, append(rb, Whole(rms))...); err != nil {
			return err
		}
		binds = append(binds, Whole(rms))
		access = append(access, Read)
	}
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "adam.wgsl",
		Params: params{"update", adamWG, cfg.Relative, live != nil}, Bindings: access, Uniforms: 8})
	if err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	g, err := Grid1D((n + adamWG - 1) / adamWG)
	if err != nil {
		r.ops = r.ops[:mark]
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	if err := r.Dispatch(k, g, uni, binds...); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
