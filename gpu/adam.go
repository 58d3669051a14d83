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
	if err := cfg.validate(op); err != nil {
		return err
	}
	if step < 1 {
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
	uni, err := adamUniforms(op, n, cfg, cfg, step, 1)
	if err != nil {
		return err
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
			Params: adamParams{"rms", adamWG, false, true, live != nil}, Bindings: append(ra, ReadWrite), Uniforms: len(uni)})
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
		Params: adamParams{"update", adamWG, false, cfg.Relative, live != nil}, Bindings: access, Uniforms: len(uni)})
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

// adamParams are adam.wgsl's template parameters.
type adamParams struct {
	Stage                 string
	WG                    int
	Multi, Relative, Mask bool
}

// validate checks the ranges Adam documents: lr ≥ 0, β in [0, 1), ε > 0, all finite in f32;
// floor in [0, 1].
func (cfg AdamConfig) validate(op string) error {
	switch {
	case !(cfg.LR >= 0) || cfg.LR > math.MaxFloat32:
		return fmt.Errorf("gpu: %s: lr = %g must be finite in f32 and ≥ 0", op, cfg.LR)
	case !(cfg.Beta1 >= 0 && cfg.Beta1 < 1):
		return fmt.Errorf("gpu: %s: beta1 = %g must be in [0, 1)", op, cfg.Beta1)
	case !(cfg.Beta2 >= 0 && cfg.Beta2 < 1):
		return fmt.Errorf("gpu: %s: beta2 = %g must be in [0, 1)", op, cfg.Beta2)
	case !(cfg.Eps > 0) || cfg.Eps > math.MaxFloat32 || float32(cfg.Eps) == 0:
		return fmt.Errorf("gpu: %s: eps = %g must be > 0 and finite in f32 (not rounding to 0)", op, cfg.Eps)
	case !(cfg.Floor >= 0 && cfg.Floor <= 1):
		return fmt.Errorf("gpu: %s: floor = %g must be in [0, 1]", op, cfg.Floor)
	}
	return nil
}

// adamUniforms returns adam.wgsl's Params for n values: lr (rel.LR), glr (plain.LR), β1, β2
// and ε (rel's; the callers check that plain's agree), Adam's bias corrections
// c1 = 1/(1−β1^step) and c2 = 1/(1−β2^step) computed in float64, the relative steps' floor
// (rel.Floor, 0 meaning DefaultMetricFloor) and nseg, all as f32 bits or u32. Errors: bias
// corrections that overflow f32.
func adamUniforms(op string, n int, rel, plain AdamConfig, step, nseg int) ([]uint32, error) {
	c1 := 1 / (1 - math.Pow(rel.Beta1, float64(step)))
	c2 := 1 / (1 - math.Pow(rel.Beta2, float64(step)))
	if c1 > math.MaxFloat32 || c2 > math.MaxFloat32 {
		return nil, fmt.Errorf("gpu: %s: bias corrections %g, %g overflow f32", op, c1, c2)
	}
	floor := rel.Floor
	if floor == 0 {
		floor = DefaultMetricFloor
	}
	f := func(x float64) uint32 { return math.Float32bits(float32(x)) }
	return []uint32{uint32(n), f(rel.LR), f(plain.LR), f(rel.Beta1), f(rel.Beta2), f(rel.Eps),
		f(c1), f(c2), f(floor), uint32(nseg)}, nil
}

// Element tags of AdamArena.Seg (besides a vector index below 2³¹).
const (
	// SegGap marks an arena element between two vectors (alignment padding): never updated.
	SegGap uint32 = 0xffffffff
	// SegMasked is or-ed into the vector index of a masked element (rank padding): it is
	// held at θ = m = v = 0.
	SegMasked uint32 = 1 << 31
)

// AdamArena is a set of trained vectors packed for MultiTensorAdam (one dispatch per stage
// for all of them, where Adam takes one or two per vector). Param, Grad, M and V are F32
// arenas of one layout (Device.Pack of vectors of equal lengths in the same order); the
// packed buffers stay usable as views. An op over the whole Grad arena (Zero, GradScale,
// GradSumSquares) covers every gradient, the gaps being zero.
type AdamArena struct {
	Param, Grad, M, V *Buffer
	// Seg is U32 [Param.Len()]: per element the index of its vector, | SegMasked for a
	// masked element, or SegGap.
	Seg *Buffer
	// Segs is U32 [NSeg·4]: per vector its first element, length, 1 when it takes relative
	// steps (else 0), and 0.
	Segs *Buffer
	// NSeg is the number of vectors.
	NSeg int
	// Offsets are each vector's first element in the arenas.
	Offsets []int
}

// NewAdamArena packs params, grads, ms and vs (F32 vectors; params[i], grads[i], ms[i],
// vs[i] of one length; n ≥ 1 vectors) into four arenas labelled label+".param" etc., and
// builds Seg and Segs from lives (lives[i] nil, or a U32 mask of that length: 0 entries
// are rank padding; read back once here, so later changes to a mask are not seen) and
// relative (relative[i]: the vector takes relative steps, DESIGN.md §6). Errors (nothing is
// packed): mismatched list lengths, buffer lengths or dtypes; then Pack's errors (an arena
// that does not fit one binding: pack fewer vectors per arena).
func NewAdamArena(d *Device, label string, params, grads, ms, vs, lives []*Buffer, relative []bool) (*AdamArena, error) {
	const op = "NewAdamArena"
	n := len(params)
	if n == 0 || len(grads) != n || len(ms) != n || len(vs) != n || len(lives) != n || len(relative) != n {
		return nil, fmt.Errorf("gpu: %s: %d params, %d grads, %d m, %d v, %d masks, %d relative flags: want one each, at least one",
			op, n, len(grads), len(ms), len(vs), len(lives), len(relative))
	}
	if n >= int(SegMasked) {
		return nil, fmt.Errorf("gpu: %s: %d vectors, at most %d", op, n, SegMasked-1)
	}
	masks := make([][]uint32, n)
	sizes := make([]uint64, n)
	for i, p := range params {
		if err := need(op, fmt.Sprintf("params[%d]", i), p, -1, F32); err != nil {
			return nil, err
		}
		for name, b := range map[string]*Buffer{"grads": grads[i], "m": ms[i], "v": vs[i]} {
			if err := need(op, fmt.Sprintf("%s[%d]", name, i), b, p.numel, F32); err != nil {
				return nil, err
			}
		}
		if lives[i] != nil {
			if err := need(op, fmt.Sprintf("lives[%d]", i), lives[i], p.numel, U32); err != nil {
				return nil, err
			}
			var err error
			if masks[i], err = d.ReadUint32(lives[i]); err != nil {
				return nil, err
			}
		}
		sizes[i] = p.size
	}
	offs, total := d.PackLayout(sizes)
	if total > d.info.MaxStorageBindingSize {
		return nil, fmt.Errorf("gpu: %s %q: %d bytes exceed maxStorageBufferBindingSize %d; pack fewer vectors per arena: %w",
			op, label, total, d.info.MaxStorageBindingSize, ErrOutOfMemory)
	}
	seg := make([]uint32, total/4)
	for i := range seg {
		seg[i] = SegGap
	}
	segs := make([]uint32, 4*n)
	a := &AdamArena{NSeg: n, Offsets: make([]int, n)}
	for i, p := range params {
		first := int(offs[i] / 4)
		a.Offsets[i] = first
		for j := range p.numel {
			seg[first+j] = uint32(i)
			if masks[i] != nil && masks[i][j] == 0 {
				seg[first+j] |= SegMasked
			}
		}
		segs[4*i], segs[4*i+1] = uint32(first), uint32(p.numel)
		if relative[i] {
			segs[4*i+2] = 1
		}
	}
	var err error
	if a.Seg, err = d.UploadUint32(label+".seg", seg, len(seg)); err != nil {
		return nil, err
	}
	if a.Segs, err = d.UploadUint32(label+".segs", segs, n, 4); err != nil {
		a.Release()
		return nil, err
	}
	for _, x := range []struct {
		dst  **Buffer
		name string
		bufs []*Buffer
	}{{&a.Param, "param", params}, {&a.Grad, "grad", grads}, {&a.M, "adam_m", ms}, {&a.V, "adam_v", vs}} {
		if *x.dst, _, err = d.Pack(label+"."+x.name, x.bufs); err != nil {
			// Arenas already made keep their views' contents: release nothing the caller
			// still reads through them.
			a.Seg.Release()
			a.Segs.Release()
			return nil, err
		}
	}
	return a, nil
}

// Release frees the arenas and tables; the packed vectors become unusable.
func (a *AdamArena) Release() {
	if a == nil {
		return
	}
	for _, b := range []*Buffer{a.Param, a.Grad, a.M, a.V, a.Seg, a.Segs} {
		if b != nil {
			b.Release()
		}
	}
}

// Bytes is the GPU memory of the arenas and tables.
func (a *AdamArena) Bytes() uint64 {
	var n uint64
	for _, b := range []*Buffer{a.Param, a.Grad, a.M, a.V, a.Seg, a.Segs} {
		if b != nil {
			n += b.size
		}
	}
	return n
}

// MultiTensorAdam records one Adam step (Adam's formulas, bit-identical to calling Adam on
// each vector) over every vector of a: the relative vectors with relative (its LR and Floor;
// relative.Relative must be true), the others with plain (plain.Relative false), both at the
// 1-based step. Two dispatches: the live RMS of every vector (one workgroup each), then the
// update (one thread per arena element). The two configs must share Beta1, Beta2 and Eps.
// Errors: as Adam's for either config, differing betas or ε, a nil or released arena.
func MultiTensorAdam(r *Recorder, a *AdamArena, step int, relative, plain AdamConfig) error {
	const op = "MultiTensorAdam"
	if err := r.usable(); err != nil {
		return err
	}
	if a == nil {
		return fmt.Errorf("gpu: %s: nil arena", op)
	}
	if !relative.Relative || plain.Relative {
		return fmt.Errorf("gpu: %s: the first config must be relative and the second plain", op)
	}
	if relative.Beta1 != plain.Beta1 || relative.Beta2 != plain.Beta2 || relative.Eps != plain.Eps {
		return fmt.Errorf("gpu: %s: the configs differ in beta1, beta2 or eps (%g, %g, %g vs %g, %g, %g)",
			op, relative.Beta1, relative.Beta2, relative.Eps, plain.Beta1, plain.Beta2, plain.Eps)
	}
	for _, c := range []AdamConfig{relative, plain} {
		if err := c.validate(op); err != nil {
			return err
		}
	}
	if step < 1 {
		return fmt.Errorf("gpu: %s: step = %d must be ≥ 1", op, step)
	}
	if err := need(op, "Param", a.Param, -1, F32); err != nil {
		return err
	}
	n := a.Param.numel
	for name, b := range map[string]*Buffer{"Grad": a.Grad, "M": a.M, "V": a.V} {
		if err := need(op, name, b, n, F32); err != nil {
			return err
		}
	}
	if err := need(op, "Seg", a.Seg, n, U32); err != nil {
		return err
	}
	if err := need(op, "Segs", a.Segs, 4*a.NSeg, U32); err != nil {
		return err
	}
	if err := positive(op, "NSeg", a.NSeg); err != nil {
		return err
	}
	uni, err := adamUniforms(op, n, relative, plain, step, a.NSeg)
	if err != nil {
		return err
	}
	kernel := func(stage string, acc []Access) (*Kernel, error) {
		return r.d.Kernel(KernelSpec{Name: op + "." + stage, File: "adam.wgsl",
			Params: adamParams{stage, adamWG, true, false, false}, Bindings: acc, Uniforms: len(uni)})
	}
	kr, err := kernel("rms", []Access{Read, Read, Read, ReadWrite})
	if err != nil {
		return err
	}
	ku, err := kernel("update", []Access{ReadWrite, Read, ReadWrite, ReadWrite, Read, Read, Read})
	if err != nil {
		return err
	}
	gr, err := Grid1D(a.NSeg)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gu, err := Grid1D((n + adamWG - 1) / adamWG)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	rms, err := r.Temp(op+" rms", F32, a.NSeg)
	if err != nil {
		return err
	}
	mark := len(r.ops)
	if err := r.Dispatch(kr, gr, uni, Whole(a.Param), Whole(a.Seg), Whole(a.Segs), Whole(rms)); err != nil {
		return err
	}
	if err := r.Dispatch(ku, gu, uni, Whole(a.Param), Whole(a.Grad), Whole(a.M), Whole(a.V), Whole(a.Seg), Whole(a.Segs), Whole(rms)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	r.Cost(float64(n)*16, float64(n)*24)
	return nil
}
