package gpu

import (
	"fmt"
	"math"
)

// Attention and its backward on cooperative matrices (tensor cores): the kernels of
// gpu/coopmat/coopmat_attention.comp (the math and the numerics are written out there and
// in DESIGN.md §7 "Tensor cores through a Vulkan layer"), their operands packed to f16 by
// CoopmatPackHeads. AttentionAuto and AttentionBackwardAuto take them where tensor cores
// are on and AttentionCoopmatFits; Attention and AttentionBackward stay the reference and
// the fallback.

// coopPackRows is the row block of CoopmatPackHeads: one power-of-two scale per 64 rows of a
// head (the chunk of the delta rule; attention's tiles divide it).
const coopPackRows = 64

// coopPacked is one operand packed by coopPackHeads: f16 rows [nb, heads, tp, hp] as u32
// words and the scales [nb, heads, tp/64]; done gives the borrowed buffers back.
type coopPacked struct {
	x16, scale *Buffer
	done       func()
}

// coopPackHeads records CoopmatPackHeads (wgsl/coopmat_pack_heads.wgsl) for s.b F32: per
// window b < nb and head h < heads (s.wins, s.rows replace nb, t when set), t rows of s.n values (token-major [nb·t, heads, stride],
// or headMajor [nb·heads·t, stride], the values from column col0 of rows of stride, s.n by
// default) to f16 [nb, heads, tp, s.np] (tp = t rounded up to 64, zero past t and past s.n)
// with a power-of-two scale per block of 64 rows, into borrowed buffers. Errors: a packed
// buffer past the device's binding size, or those of Borrow and Dispatch.
func coopPackHeads(r *Recorder, op string, nb, t int, s coopPackSpec) (coopPacked, error) {
	if s.wins != 0 {
		nb, t = s.wins, s.rows
	}
	nblk := (t + coopPackRows - 1) / coopPackRows
	words := uint64(nb*s.heads*nblk*coopPackRows) * uint64(s.np/2)
	if 4*words > r.d.Info().MaxStorageBindingSize || words > maxU32Elems {
		return coopPacked{}, fmt.Errorf("gpu: %s: the f16 copy of %s (%d bytes) exceeds the device's binding size %d",
			op, s.b.label, 4*words, r.d.Info().MaxStorageBindingSize)
	}
	x16, d1, err := r.Borrow(op+" "+s.b.label+"16", U32, int(words))
	if err != nil {
		return coopPacked{}, err
	}
	sc, d2, err := r.Borrow(op+" "+s.b.label+" scales", F32, nb*s.heads*nblk)
	if err != nil {
		d1()
		return coopPacked{}, err
	}
	pk := coopPacked{x16, sc, func() { d1(); d2() }}
	if err := coopPackHeadsInto(r, op, nb, t, s, x16, sc); err != nil {
		pk.done()
		return coopPacked{}, err
	}
	return pk, nil
}

// coopPackHeadsInto records coopPackHeads' kernel for nb windows of t rows (s.wins and s.rows
// already applied) into x16 (U32 [nb·heads·tp·np/2]) and scale (F32 [nb·heads·tp/64]).
func coopPackHeadsInto(r *Recorder, op string, nb, t int, s coopPackSpec, x16, scale *Buffer) error {
	heads, hd, hp := s.heads, s.n, s.np
	stride := s.stride
	if stride == 0 {
		stride = hd
	}
	nblk := (t + coopPackRows - 1) / coopPackRows
	words := nb * heads * nblk * coopPackRows * hp / 2
	pp := coopPackHeadsFor(hd, hp, stride, s.col0, s.headMajor)
	reads := 8.0 // the general form reads each element twice, the vector form once
	if pp.HP4 > 0 {
		reads = 4
	}
	if err := r.dispatch1D(KernelSpec{Name: op + ".pack", File: "coopmat_pack_heads.wgsl",
		Params:   pp,
		Bindings: []Access{Read, ReadWrite, ReadWrite}, Uniforms: 8}, nb*heads*nblk,
		[]uint32{uint32(t), uint32(heads), uint32(hd), uint32(hp), uint32(nblk), uint32(nb * heads * nblk), uint32(stride), uint32(s.col0)},
		Whole(s.b), Whole(x16), Whole(scale)); err != nil {
		return err
	}
	r.Cost(0, float64(nb*t*heads*hd)*reads+float64(words)*4)
	return nil
}

// coopPackHeadsParams are coopmat_pack_heads.wgsl's template parameters: WG threads a
// block, HeadMajor, and for the vector form HP4 = hp/4 and NV = 64·HP4/WG vectors an
// invocation (HP4 0: the general form).
type coopPackHeadsParams struct {
	WG        int
	HeadMajor bool
	HP4, NV   int
}

// coopPackHeadsGeneral, set by tests (SetCoopPackHeadsGeneral), makes coopPackHeads take its
// general form everywhere.
var coopPackHeadsGeneral bool

// coopPackHeadsFor chooses CoopmatPackHeads' form for rows of hd values packed to hp, stride
// apart from column col0: the vector form where hd, stride and col0 are multiples of 4 and
// hp of 16 (the block's 64·hp/4 vectors divide among 256 invocations) with at most 16
// vectors an invocation, else the general form. On an H100 the general form ran the delta
// rule's packs at a third of the memory's bandwidth (one read for the maximum and one for
// the conversion, integer divisions per element).
func coopPackHeadsFor(hd, hp, stride, col0 int, headMajor bool) coopPackHeadsParams {
	const wg = 256
	p := coopPackHeadsParams{WG: wg, HeadMajor: headMajor}
	if coopPackHeadsGeneral || hd%4 != 0 || hp%16 != 0 || stride%4 != 0 || col0%4 != 0 || hp > 256 {
		return p
	}
	p.HP4 = hp / 4
	p.NV = coopPackRows * p.HP4 / wg
	return p
}

// coopAttnStage is one kernel of coopmat_attention.comp.
type coopAttnStage int

const (
	coopAttnFwd coopAttnStage = iota
	coopAttnDQ
	coopAttnDKV
)

var coopAttnFiles = [...]string{"coopmat_attention_fwd.spv", "coopmat_attention_dq.spv", "coopmat_attention_dkv.spv"}

// coopAttnTile is a specialisation of coopmat_attention.comp: the padded head dim HP, BR
// rows per workgroup, BC rows per inner block, NSG subgroups (its SpecIds 2–5).
type coopAttnTile struct{ HP, BR, BC, NSG int }

// shared is the kernel's workgroup memory in bytes for subgroup size sg and shape l: the
// f32 score tile, the f16 P tile, the staged slices of BR and BC packed rows (4·L halves
// each, rows padded by 8) or the subgroups' f32 epilogue tiles, whichever is larger, and
// the stage's own arrays.
func (c coopAttnTile) shared(st coopAttnStage, sg, l int) int {
	nt := sg * c.NSG
	s := c.BR*(c.BC+4)*4 + c.BR*(c.BC+8)*2 + max((c.BR+c.BC)*(4*l+8)*2, c.NSG*l*l*4)
	switch st {
	case coopAttnFwd:
		s += 2 * nt * 4
	case coopAttnDQ:
		s += c.BR*(c.BC+4)*4 + nt*4
	case coopAttnDKV:
		s += c.BR*(c.BC+4)*4 + nt*4 + c.BR*(c.BC+8)*2 + 2*c.BC*4
	}
	return s
}

// check validates c for the kernel's rules (coopmat_attention.comp's header) on a device
// with subgroup size sg, shape l and info's limits.
func (c coopAttnTile) check(st coopAttnStage, sg, l int, info Info) error {
	nt := sg * c.NSG
	switch {
	case c.BR%l != 0 || c.BC%l != 0 || coopPackRows%c.BR != 0 || coopPackRows%c.BC != 0 || c.HP%(4*l) != 0:
		return fmt.Errorf("tile %+v does not divide into %d×%d fragments within 64-row blocks", c, l, l)
	case nt%c.BR != 0 || !coopSplits(c.BR/l, c.BC/l, c.NSG) || !coopSplits(c.BR/l, 4, c.NSG):
		return fmt.Errorf("tile %+v: %d subgroups of %d do not split its rows, score fragments and output fragments", c, c.NSG, sg)
	case info.MaxInvocations > 0 && nt > int(info.MaxInvocations):
		return fmt.Errorf("tile %+v: %d threads exceed the device's %d", c, nt, info.MaxInvocations)
	case info.MaxWorkgroupStorage > 0 && c.shared(st, sg, l) > int(info.MaxWorkgroupStorage):
		return fmt.Errorf("tile %+v: %d bytes of workgroup memory exceed the device's %d", c, c.shared(st, sg, l), info.MaxWorkgroupStorage)
	}
	return nil
}

// coopSplits reports whether nsg subgroups split a grid of rows×cols fragments into equal
// runs of consecutive fragments within one row each (coopmat_attention.comp's S_PROD and
// O_PROD give each subgroup such a run, so that its A fragments serve the whole run).
func coopSplits(rows, cols, nsg int) bool {
	n := rows * cols
	return n >= nsg && n%nsg == 0 && cols%(n/nsg) == 0
}

// coopAttnTileFor picks stage st's tile for head dim hd on d: HP = hd rounded up to 4·L; on
// GPUs (L = 16, subgroups of 32) 64 query rows by 64 keys with 8 subgroups for the forward
// (O in 8 accumulators per subgroup at head_dim 256), 64 rows by 32 keys for dq (two f32
// score tiles), 32 keys by 64 query rows for dk, dv (two sets of accumulators) — all within
// 48 KiB of workgroup memory, TestCoopAttnTileFor — halving the inner block, then the rows,
// until the workgroup memory fits, with the most subgroups (halving) that split the block's
// fragments (coopAttnTile.check); on CPU adapters 2L by 2L with 4 subgroups (the tests'
// sizes on lavapipe). Errors: a shape that is not square or not a
// multiple of 8, or no tile that fits.
func (d *Device) coopAttnTileFor(st coopAttnStage, hd int) (coopAttnTile, error) {
	s, sg := d.tc.Shape, d.tc.SubgroupSize
	l := s.M
	if s.N != l || s.K != l || l%8 != 0 {
		return coopAttnTile{}, fmt.Errorf("the cooperative-matrix shape %s is not square", s)
	}
	c := coopAttnTile{HP: roundUp(hd, 4*l), BR: 64, BC: 64, NSG: 8}
	switch {
	case d.info.CPU && !coopGPUTiles:
		c.BR, c.BC, c.NSG = 2*l, 2*l, 4
	case st == coopAttnDQ:
		c.BC = 32
	case st == coopAttnDKV:
		c.BR = 32
	}
	for {
		// The first subgroup count (halving) that splits this block's fragments and fits.
		err := c.check(st, sg, l, d.info)
		for n := c.NSG / 2; err != nil && n >= 1; n /= 2 {
			if c2 := (coopAttnTile{c.HP, c.BR, c.BC, n}); c2.check(st, sg, l, d.info) == nil {
				return c2, nil
			}
		}
		if err == nil {
			return c, nil
		}
		switch {
		case c.BC > l:
			c.BC /= 2
		case c.BR > l:
			c.BR /= 2
		default:
			return coopAttnTile{}, err
		}
	}
}

// coopGPUTiles makes CPU adapters take the GPUs' attention and delta-rule tiles (tests:
// SetCoopGPUTiles, so that lavapipe runs the tile shapes the H200 takes).
var coopGPUTiles bool

// coopAttnKernel returns stage st's pipeline for tile c.
func (d *Device) coopAttnKernel(op string, st coopAttnStage, c coopAttnTile) (*Kernel, error) {
	var access []Access
	switch st {
	case coopAttnFwd:
		access = []Access{Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}
	case coopAttnDQ:
		access = []Access{Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}
	case coopAttnDKV:
		access = []Access{Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite}
	}
	sg := d.tc.SubgroupSize
	k, err := d.coopProgram(op, coopProgramSpec{File: coopAttnFiles[st], WG: sg * c.NSG, Access: access, Uniforms: 8,
		Values: []uint32{uint32(sg), uint32(d.tc.Shape.M), uint32(c.HP), uint32(c.BR), uint32(c.BC), uint32(c.NSG)}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCoopOff, err)
	}
	return k, nil
}

// AttentionCoopmatFits reports whether AttentionAuto and AttentionBackwardAuto take the
// cooperative-matrix kernels on d for dims: tensor cores on (Device.TensorCores, or forced by
// SetTensorCores), a square shape, tiles that fit the device, and the f16 copies of q, k,
// v and dout within one storage binding each. False for a nil device.
func AttentionCoopmatFits(d *Device, dims AttentionDims) bool {
	return d != nil && d.coopUse() && d.coopAttnPlan(dims) == nil
}

// coopAttnPlan errors when the cooperative-matrix kernels cannot take dims on d.
func (d *Device) coopAttnPlan(dims AttentionDims) error {
	tc := d.TensorCores()
	if !tc.Available {
		return fmt.Errorf("%w: %s", errCoopOff, tc.Reason)
	}
	for st := range coopAttnFiles {
		if _, err := d.coopAttnTileFor(coopAttnStage(st), dims.HeadDim); err != nil {
			return err
		}
	}
	hp := roundUp(dims.HeadDim, 4*tc.Shape.M)
	words := uint64(dims.NB*dims.NH*roundUp(dims.T, coopPackRows)) * uint64(hp/2)
	if 4*words > d.info.MaxStorageBindingSize || words > maxU32Elems {
		return fmt.Errorf("the f16 copy of q (%d bytes) exceeds the device's binding size %d", 4*words, d.info.MaxStorageBindingSize)
	}
	return nil
}

// attnUniforms are coopmat_attention.comp's Params for dims and padded head dim hp.
func attnUniforms(dims AttentionDims, hp int) []uint32 {
	tp := roundUp(dims.T, coopPackRows)
	return []uint32{uint32(dims.NB), uint32(dims.T), uint32(dims.NH), uint32(dims.NKV), uint32(dims.HeadDim), uint32(tp),
		uint32(tp / coopPackRows), math.Float32bits(float32(1 / math.Sqrt(float64(dims.HeadDim))))}
}

// AttentionCoopmat records Attention (same arguments, layouts and outputs; host.Attention) on
// cooperative matrices: q, k, v packed to f16 (CoopmatPackHeads: a power-of-two scale per 64
// rows of a head, so no input range overflows or flushes), then one kernel
// (coopmat_attention.comp FWD) per (window, query head, tile of query rows) forming S = Q·Kᵀ
// tiles twice — for each row's log-sum-exp, then for P = e^{s − lse} as f16(2¹⁴·p) — with
// O += P·V accumulated in f32. Error bound (f16 operands, f32 accumulation; DESIGN.md §7):
// scores within (2⁻⁹ + 2(hd+2)·2⁻²⁴)·scale·Σ|q||k|, out within Σ_j p_ij·|v_j|·(δs_ij +
// δlse_i + 2⁻⁹ + …). Scratch: the f16 copies (borrowed, nb·t rounded up to 64 rows, head_dim
// rounded up to 4·L halves per head). Errors: those of Attention, tensor cores unavailable on
// the device, or a tile or copy the device cannot hold (AttentionCoopmatFits says false);
// nothing is left recorded on error.
func AttentionCoopmat(r *Recorder, q, k, v, out, lse *Buffer, dims AttentionDims) error {
	const op = "AttentionCoopmat"
	if err := dims.check(r, op); err != nil {
		return err
	}
	if err := attentionForwardBuffers(op, dims, q, k, v, out, lse); err != nil {
		return err
	}
	d := r.d
	if err := d.coopAttnPlan(dims); err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	tile, _ := d.coopAttnTileFor(coopAttnFwd, dims.HeadDim)
	kern, err := d.coopAttnKernel(op, coopAttnFwd, tile)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	grid, err := Grid1D(dims.NB * dims.NH * ((dims.T + tile.BR - 1) / tile.BR))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	mark := len(r.ops)
	packs, err := coopPackAttn(r, op, dims, tile.HP, q, k, v)
	defer packs.done()
	if err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	binds := append(packs.binds(), Whole(out), Whole(lse))
	if err := r.Dispatch(kern, grid, attnUniforms(dims, tile.HP), binds...); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	// Two Q·Kᵀ passes and P·V: 6·hd flops per causal pair.
	r.Cost(attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 6))
	coopDispatches.Add(1)
	return nil
}

// coopPacks are the packed operands of one attention call, in binding order.
type coopPacks []coopPacked

func (ps coopPacks) done() {
	for _, p := range ps {
		p.done()
	}
}

// binds are the packed operands' bindings: x16, scale for each, in order.
func (ps coopPacks) binds() []Binding {
	var b []Binding
	for _, p := range ps {
		b = append(b, Whole(p.x16), Whole(p.scale))
	}
	return b
}

// coopPackSpec is one operand of a cooperative-matrix kernel for coopPackHeads: the buffer,
// its heads and values per row, the packed row width, the layout, and where a row's values
// start in rows of stride values (0, 0: a plain tensor, rows of n values).
type coopPackSpec struct {
	b            *Buffer
	heads, n, np int
	headMajor    bool
	stride, col0 int
	// wins, rows, when not 0, replace the call's windows and rows per window (the delta
	// rule's per-chunk states: nb·hv·⌈t/64⌉ windows of dk rows).
	wins, rows int
}

// coopPackEach packs each operand of specs (coopPackHeads) for nb windows of t rows, in
// order. On error the packs made so far are in the result (call done).
func coopPackEach(r *Recorder, op string, nb, t int, specs ...coopPackSpec) (coopPacks, error) {
	var ps coopPacks
	for _, x := range specs {
		p, err := coopPackHeads(r, op, nb, t, x)
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// coopPackAttn packs q (and dout: nh heads) and k, v (nkv heads) of an attention call, in
// the order given: the first and any fourth have nh heads, the second and third nkv.
func coopPackAttn(r *Recorder, op string, dims AttentionDims, hp int, xs ...*Buffer) (coopPacks, error) {
	specs := make([]coopPackSpec, len(xs))
	for i, x := range xs {
		heads := dims.NH
		if i == 1 || i == 2 {
			heads = dims.NKV
		}
		specs[i] = coopPackSpec{b: x, heads: heads, n: dims.HeadDim, np: hp}
	}
	return coopPackEach(r, op, dims.NB, dims.T, specs...)
}

// AttentionBackwardCoopmat records AttentionBackward (same arguments, layouts and outputs;
// host.AttentionBackward) on cooperative matrices: q, k, v and dout packed to f16
// (CoopmatPackHeads), then two kernels of coopmat_attention.comp: DQ, one workgroup per
// (window, query head, tile of query rows) forming D_i = dout_i·out_i (f32, into a recorder
// temporary), and per key block S = Q·Kᵀ, dP = dO·Vᵀ, ds = p·(dp − D) in f32, dS to f16 with
// a power-of-two scale per tile, dq += dS·K; DKV, one workgroup per (window, KV head, tile of
// key rows) over the group's query heads and query blocks, dv += Pᵀ·dO and dk += dSᵀ·Q (no
// sum pass, no atomics: deterministic). Errors: those of AttentionBackward, tensor cores
// unavailable on the device, or a tile or copy the device cannot hold; nothing is left
// recorded on error.
func AttentionBackwardCoopmat(r *Recorder, q, k, v, out, lse, dout, dq, dk, dv *Buffer, dims AttentionDims) error {
	const op = "AttentionBackwardCoopmat"
	if err := dims.check(r, op); err != nil {
		return err
	}
	if err := attentionBackwardBuffers(op, dims, q, k, v, out, lse, dout, dq, dk, dv); err != nil {
		return err
	}
	d := r.d
	if err := d.coopAttnPlan(dims); err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	tq, _ := d.coopAttnTileFor(coopAttnDQ, dims.HeadDim)
	tkv, _ := d.coopAttnTileFor(coopAttnDKV, dims.HeadDim)
	kq, err := d.coopAttnKernel(op+".dq", coopAttnDQ, tq)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	kkv, err := d.coopAttnKernel(op+".dkv", coopAttnDKV, tkv)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gq, err := Grid1D(dims.NB * dims.NH * ((dims.T + tq.BR - 1) / tq.BR))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	gkv, err := Grid1D(dims.NB * dims.NKV * ((dims.T + tkv.BR - 1) / tkv.BR))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	if tq.HP != tkv.HP {
		return fmt.Errorf("gpu: %s: the stages' padded head dims differ (%d, %d)", op, tq.HP, tkv.HP)
	}
	mark := len(r.ops)
	fail := func(err error) error {
		r.ops = r.ops[:mark]
		return err
	}
	delta, err := r.Temp(op+" delta", F32, dims.NB*dims.T, dims.NH)
	if err != nil {
		return fail(err)
	}
	packs, err := coopPackAttn(r, op, dims, tq.HP, q, k, v, dout)
	defer packs.done()
	if err != nil {
		return fail(err)
	}
	uni := attnUniforms(dims, tq.HP)
	binds := append(packs.binds(), Whole(out), Whole(dout), Whole(lse), Whole(dq), Whole(delta))
	if err := r.Dispatch(kq, gq, uni, binds...); err != nil {
		return fail(err)
	}
	// dq: S and dP recomputed, dS·K: 6·hd flops per causal pair.
	r.Cost(attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 6))
	binds = append(packs.binds(), Whole(lse), Whole(delta), Whole(dk), Whole(dv))
	if err := r.Dispatch(kkv, gkv, uni, binds...); err != nil {
		return fail(err)
	}
	// dk, dv: Sᵀ, dPᵀ, Pᵀ·dO, dSᵀ·Q: 8·hd flops per causal pair.
	r.Cost(attentionCost(dims.NB, dims.T, dims.NH, dims.NKV, dims.HeadDim, 8))
	coopDispatches.Add(2)
	return nil
}
