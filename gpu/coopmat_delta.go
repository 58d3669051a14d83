package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The chunked gated delta rule on cooperative matrices (tensor cores): the inter-chunk
// stage of gpu/coopmat/coopmat_delta.comp (its math and numerics are written out there and
// in DESIGN.md §9 "The gated delta rule, chunked"), its operands packed to f16 by
// CoopmatPackHeads. The intra-chunk stage (K·Kᵀ, Q·Kᵀ and the forward substitution) stays
// the WGSL kernel of GatedDeltaRuleChunked. GatedDeltaRuleAuto takes this form where tensor
// cores are on and GatedDeltaRuleCoopmatFits; GatedDeltaRuleChunked stays the reference
// and the fallback.

// coopDeltaTile is a specialisation of coopmat_delta.comp: DKP = dk padded, CS value columns
// per workgroup, NSG subgroups (its SpecIds 2–4).
type coopDeltaTile struct{ DKP, CS, NSG int }

// shared is the kernel's workgroup memory in bytes for shape l (coopmat_delta.comp's
// arrays: F, Sh, Vt, V2, the gates and the subgroups' maxima).
func (c coopDeltaTile) shared() int {
	const ch = GatedDeltaRuleChunkLen
	return max(c.DKP, 2*ch)*(c.CS+4)*4 + c.DKP*(c.CS+8)*2 + 2*ch*(c.CS+8)*2 + 2*ch*4 + c.NSG*4
}

// check validates c for the kernel's rules on a device with subgroup size sg, shape l and
// info's limits.
func (c coopDeltaTile) check(sg, l int, info Info) error {
	nt := sg * c.NSG
	switch {
	case c.DKP%(4*l) != 0 || c.CS%l != 0 || c.CS < 8:
		return fmt.Errorf("delta-rule tile %+v does not divide into %d×%d fragments", c, l, l)
	case (c.DKP/l)*(c.CS/l)%c.NSG != 0 || c.NSG%(c.CS/l) != 0:
		return fmt.Errorf("delta-rule tile %+v: %d subgroups do not divide the state's fragments or are not a multiple of its %d fragment columns", c, c.NSG, c.CS/l)
	case info.MaxInvocations > 0 && nt > int(info.MaxInvocations):
		return fmt.Errorf("delta-rule tile %+v: %d threads exceed the device's %d", c, nt, info.MaxInvocations)
	case info.MaxWorkgroupStorage > 0 && c.shared() > int(info.MaxWorkgroupStorage):
		return fmt.Errorf("delta-rule tile %+v: %d bytes of workgroup memory exceed the device's %d", c, c.shared(), info.MaxWorkgroupStorage)
	}
	return nil
}

// coopDeltaColsForce is NVG_COOPMAT_DELTA_COLS, parsed at Open (0: automatic): the value
// columns per workgroup of the delta rule's sequential kernels (INTER, DHU), a knob for
// benchmarks (a tile that does not fit the device then fails the call, and the Auto
// functions take the WGSL forms).
var coopDeltaColsForce int

// coopDeltaWide, set by tests (SetCoopDeltaWide), makes coopDeltaTileFor start from 4·L
// value columns (halved until the workgroup memory fits), the widest tile the kernels take,
// so that the parity suites cover every fragment-column count.
var coopDeltaWide bool

// parseCoopDeltaCols parses NVG_COOPMAT_DELTA_COLS for the shape s: at least 8, and 1, 2
// or 4 times s.M (the 4 subgroups of a workgroup must be a multiple of its fragment
// columns: coopDeltaTile.check, which Open also runs on the structure).
func parseCoopDeltaCols(v string, s CoopType) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 8 || (n != s.M && n != 2*s.M && n != 4*s.M) {
		return 0, fmt.Errorf("NVG_COOPMAT_DELTA_COLS=%q: want %d, %d or %d (1, 2 or 4 cooperative-matrix tiles of %d columns), at least 8", v, s.M, 2*s.M, 4*s.M, s.M)
	}
	return n, nil
}

// coopDeltaTileFor picks the tile for key heads of dk on d: DKP = dk rounded up to 4·L; on
// GPUs (and under SetCoopGPUTiles) L value columns per workgroup (NVIDIA's L = 16: dv = 128 in 8 slices, 1,024 workgroups at the 0.8B's nb 8, hv 16) with 4
// subgroups; on CPU adapters 2·L columns and 4 subgroups, halved to L where the workgroup
// memory does not fit; NVG_COOPMAT_DELTA_COLS: that many columns (an error where the tile
// does not fit). The sequential kernels are latency-bound, so more
// workgroups beat wider ones: 16 columns against 32 on an H100 (2026-12-07,
// BenchmarkGatedDeltaRuleChunked(Backward), nb 8, t 512): DHU 629 → 406 µs at the 0.8B's
// heads and 1,246 → 775 at the 4B's, INTER 603 → 568 and 2,319 → 1,796. Errors: a shape
// that is not square or not a multiple of 8, or no tile that fits.
func (d *Device) coopDeltaTileFor(dk int) (coopDeltaTile, error) {
	s, sg := d.tc.Shape, d.tc.SubgroupSize
	l := s.M
	if s.N != l || s.K != l || l%8 != 0 {
		return coopDeltaTile{}, fmt.Errorf("the cooperative-matrix shape %s is not square", s)
	}
	c := coopDeltaTile{DKP: roundUp(dk, 4*l), CS: l, NSG: 4}
	if d.info.CPU && !coopGPUTiles {
		c.CS = 2 * l
	}
	if coopDeltaWide {
		c.CS = 4 * l
	}
	if coopDeltaColsForce > 0 {
		c.CS = coopDeltaColsForce
		return c, c.check(sg, l, d.info)
	}
	for {
		err := c.check(sg, l, d.info)
		if err == nil {
			return c, nil
		}
		if c.CS/2 < l || c.CS/2 < 8 {
			return coopDeltaTile{}, err
		}
		c.CS /= 2
	}
}

// GatedDeltaRuleCoopmatFits reports whether GatedDeltaRuleAuto takes the cooperative-matrix
// form (GatedDeltaRuleChunkedCoopmat) on d for dims: tensor cores on (Device.TensorCores, or
// forced by SetTensorCores), dk a multiple of 4 and ≤ 256 (the intra-chunk kernel's limits),
// a tile that fits the device, and the scratch and packed copies within one storage binding
// each. False for a nil device.
func GatedDeltaRuleCoopmatFits(d *Device, dims DeltaRuleDims) bool {
	return d != nil && d.coopUse() && dims.DK%4 == 0 && dims.DK <= 256 &&
		fitsBinding(d, dims.NB*dims.T*dims.HV, max(dims.DK, dims.DV, GatedDeltaRuleChunkLen)) && d.coopDeltaPlan(dims) == nil
}

// coopDeltaPlan errors when the cooperative-matrix inter-chunk kernel cannot take dims on d
// (errCoopOff when tensor cores are unavailable).
func (d *Device) coopDeltaPlan(dims DeltaRuleDims) error {
	tc := d.TensorCores()
	if !tc.Available {
		return fmt.Errorf("%w: %s", errCoopOff, tc.Reason)
	}
	c, err := d.coopDeltaTileFor(dims.DK)
	if err != nil {
		return err
	}
	tp := uint64(roundUp(dims.T, GatedDeltaRuleChunkLen))
	dvPad := uint64(roundUp(dims.DV, max(4*tc.Shape.M, c.CS)))
	for _, words := range []uint64{uint64(dims.NB*dims.HV) * tp * uint64(c.DKP/2), uint64(dims.NB*dims.HV) * tp * GatedDeltaRuleChunkLen / 2,
		uint64(dims.NB*dims.HV) * tp * dvPad / 2} {
		if 4*words > d.info.MaxStorageBindingSize || words > maxU32Elems {
			return fmt.Errorf("an f16 copy of %d bytes exceeds the device's binding size %d", 4*words, d.info.MaxStorageBindingSize)
		}
	}
	return nil
}

// coopDeltaKernel returns coopmat_delta.comp's pipeline for tile c, writing the final state
// when wantState and the per-chunk states and V' when saveH.
func (d *Device) coopDeltaKernel(op string, c coopDeltaTile, wantState, saveH bool) (*Kernel, error) {
	sg := d.tc.SubgroupSize
	k, err := d.coopProgram(op, coopProgramSpec{File: "coopmat_delta.spv", WG: sg * c.NSG, Uniforms: 8,
		Access: []Access{Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite},
		Values: []uint32{uint32(sg), uint32(d.tc.Shape.M), uint32(c.DKP), uint32(c.CS), uint32(c.NSG), b2u(wantState), b2u(saveH)}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCoopOff, err)
	}
	return k, nil
}

// coopDeltaInter records the inter-chunk stage on cooperative matrices after the intra-chunk
// kernel wrote sc: q, k, W and Aqk packed to f16 (a power-of-two scale per chunk of each
// head), then coopmat_delta.comp, one workgroup per (window, value head, slice of value
// columns). state, h and vnew may be nil (not written). Errors: those of the packs, Borrow,
// coopDeltaKernel and Dispatch (the caller drops what was recorded).
func coopDeltaInter(r *Recorder, op string, q, k *Buffer, sc *gdrcScratch, o, state, h, vnew *Buffer, dims DeltaRuleDims) error {
	d := r.d
	c, err := d.coopDeltaTileFor(dims.DK)
	if err != nil {
		return err
	}
	kern, err := d.coopDeltaKernel(op, c, state != nil, h != nil)
	if err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	grid, err := Grid1D(nb * hv * ((dv + c.CS - 1) / c.CS))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	packs, err := coopPackEach(r, op, nb, t, coopDeltaOperands(dims, c.DKP, q, k, sc)...)
	defer packs.done()
	if err != nil {
		return err
	}
	binds := append(packs.binds(), Whole(sc.u), Whole(sc.gc), Whole(o))
	for _, b := range []*Buffer{state, h, vnew} {
		if b == nil { // a binding the kernel does not write (WANT_STATE or SAVE_H off)
			var done func()
			if b, done, err = r.Borrow(op+" unused", F32, 1); err != nil {
				return err
			}
			defer done()
		}
		binds = append(binds, Whole(b))
	}
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	tp := nck * GatedDeltaRuleChunkLen
	uni := []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(nck), uint32(tp), uint32(dk), uint32(dv)}
	if err := r.Dispatch(kern, grid, uni, binds...); err != nil {
		return err
	}
	r.Cost(gdrcInterCost(dims, state != nil, h != nil))
	coopDispatches.Add(1)
	return nil
}

// coopDeltaDhu records Dhu (gated_delta_rule_chunked_backward.wgsl's first stage after the
// forward) on cooperative matrices (coopmat_delta.comp DHU): q, k, W, Aqk and dO packed to
// f16, then one workgroup per (window, value head, slice of value columns) running the chunks
// in reverse with the state's gradient in f32 accumulators, writing dh (the gradient of the
// state after each chunk) and dV'. Errors: those of the packs, coopProgram (errCoopOff) and
// Dispatch (the caller drops what was recorded).
func coopDeltaDhu(r *Recorder, op string, q, k *Buffer, sc *gdrcScratch, do, dh, dvp *Buffer, dims DeltaRuleDims) error {
	d := r.d
	c, err := d.coopDeltaTileFor(dims.DK)
	if err != nil {
		return err
	}
	sg := d.tc.SubgroupSize
	dvPad := roundUp(dims.DV, max(4*d.tc.Shape.M, c.CS))
	kern, err := d.coopProgram(op+".dhu", coopProgramSpec{File: "coopmat_delta_dhu.spv", WG: sg * c.NSG, Uniforms: 8,
		Access: []Access{Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, Read, ReadWrite, ReadWrite},
		Values: []uint32{uint32(sg), uint32(d.tc.Shape.M), uint32(c.DKP), uint32(c.CS), uint32(c.NSG), uint32(dvPad)}})
	if err != nil {
		return fmt.Errorf("%w: %w", errCoopOff, err)
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	grid, err := Grid1D(nb * hv * ((dv + c.CS - 1) / c.CS))
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	packs, err := coopPackEach(r, op, nb, t, append(coopDeltaOperands(dims, c.DKP, q, k, sc), coopPackSpec{b: do, heads: hv, n: dv, np: dvPad})...)
	defer packs.done()
	if err != nil {
		return err
	}
	binds := append(packs.binds(), Whole(do), Whole(sc.gc), Whole(dh), Whole(dvp))
	nck := (t + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	uni := []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv), uint32(nck), uint32(nck * GatedDeltaRuleChunkLen), uint32(dk), uint32(dv)}
	if err := r.Dispatch(kern, grid, uni, binds...); err != nil {
		return err
	}
	fc, fk, fv := float64(nb*t*hv), float64(dk), float64(dv)
	r.Cost(fc*2*(2*fk*fv+32*fv), 4*(fc*(2*fk+GatedDeltaRuleChunkLen+1+2*fv)+float64(nb*hv*nck)*fk*fv))
	coopDispatches.Add(1)
	return nil
}

// coopDeltaOperands are the packed operands of the sequential kernels, in binding order: q,
// k (key heads, dk padded to dkp), W (value heads, dkp) and Aqk (value heads, 64 columns).
func coopDeltaOperands(dims DeltaRuleDims, dkp int, q, k *Buffer, sc *gdrcScratch) []coopPackSpec {
	return []coopPackSpec{{b: q, heads: dims.HK, n: dims.DK, np: dkp}, {b: k, heads: dims.HK, n: dims.DK, np: dkp},
		{b: sc.w, heads: dims.HV, n: dims.DK, np: dkp, headMajor: true},
		{b: sc.aqk, heads: dims.HV, n: GatedDeltaRuleChunkLen, np: GatedDeltaRuleChunkLen, headMajor: true}}
}

// coopDeltaChunkNSG is the subgroups per workgroup of coopmat_delta_chunk.comp (a 2×2 grid).
const coopDeltaChunkNSG = 4

// coopDeltaChunkShared is coopmat_delta_chunk.comp's workgroup memory in bytes on d (its
// arrays St — a staged [64, 4·L] slice with rows padded by 8 halves, or the subgroups' f32
// epilogue tiles —, gam, Red, Ms, Mh; the largest variant's, QK's and FST's: 36,608 bytes at
// 16×16×16 with subgroups of 32, 32,128 at lavapipe's 8×8×8 with subgroups of 8).
func (d *Device) coopDeltaChunkShared() int {
	l, ch, nsg := d.tc.Shape.M, GatedDeltaRuleChunkLen, coopDeltaChunkNSG
	return max(ch*(4*l+8)*2, nsg*l*l*4) + ch*4 + nsg*d.tc.SubgroupSize*4 + ch*(ch+4)*4 + ch*(ch+8)*2
}

// coopDeltaBwdPlan errors when the chunk-parallel cooperative-matrix stages cannot take dims
// on d: their workgroup memory, or the f16 copies of the per-chunk states past one binding.
func (d *Device) coopDeltaBwdPlan(dims DeltaRuleDims) error {
	if shm := d.coopDeltaChunkShared(); int(d.info.MaxWorkgroupStorage) < shm {
		return fmt.Errorf("the delta rule's chunk stages need %d bytes of workgroup memory, the device allows %d", shm, d.info.MaxWorkgroupStorage)
	}
	l := d.tc.Shape.M
	if s := d.tc.Shape; s.N != l || s.K != l || l%8 != 0 || (GatedDeltaRuleChunkLen/l)%2 != 0 {
		return fmt.Errorf("the delta rule's chunk stages need a square cooperative-matrix shape dividing 32, not %s", s)
	}
	nck := (dims.T + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	words := uint64(dims.NB*dims.HV*nck) * uint64(roundUp(dims.DK, coopPackRows)) * uint64(roundUp(dims.DV, 4*l)/2)
	if 4*words > d.info.MaxStorageBindingSize || words > maxU32Elems {
		return fmt.Errorf("the f16 copy of the per-chunk states (%d bytes) exceeds the device's binding size %d", 4*words, d.info.MaxStorageBindingSize)
	}
	return nil
}

// coopDeltaBwd is what the chunk-parallel cooperative-matrix stages of one backward call
// share: the sizes, the scratch, and the operands packed to f16 (each once, on first use;
// given back by done).
type coopDeltaBwd struct {
	r        *Recorder
	op       string
	dims     DeltaRuleDims
	sc       *gdrcScratch
	dkp, dvp int
	packs    map[coopPackSpec]coopPacked
}

func newCoopDeltaBwd(r *Recorder, op string, dims DeltaRuleDims, sc *gdrcScratch) *coopDeltaBwd {
	l := r.d.tc.Shape.M
	return &coopDeltaBwd{r: r, op: op, dims: dims, sc: sc, dkp: roundUp(dims.DK, 4*l), dvp: roundUp(dims.DV, 4*l),
		packs: map[coopPackSpec]coopPacked{}}
}

func (c *coopDeltaBwd) done() {
	for _, p := range c.packs {
		p.done()
	}
}

// keys are the packed operands of a value head's rows (x [nb·t, hv, dv] token-major, or
// the scratch rows [nb·hv·t, n] head-major), of q and k, and of the per-chunk states.
func (c *coopDeltaBwd) values(x *Buffer, headMajor bool) coopPackSpec {
	return coopPackSpec{b: x, heads: c.dims.HV, n: c.dims.DV, np: c.dvp, headMajor: headMajor}
}

func (c *coopDeltaBwd) keys(x *Buffer) coopPackSpec {
	return coopPackSpec{b: x, heads: c.dims.HK, n: c.dims.DK, np: c.dkp}
}

func (c *coopDeltaBwd) states(x *Buffer) coopPackSpec {
	nck := (c.dims.T + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	return coopPackSpec{b: x, heads: 1, n: c.dims.DV, np: c.dvp, headMajor: true, wins: c.dims.NB * c.dims.HV * nck, rows: c.dims.DK}
}

// stage records coopmat_delta_chunk.comp's variant file with the packed operands ins (each
// bound as its f16 words and scales, in order) then the f32 buffers outs, the last nw of them
// written. Errors: those of the packs, coopProgram (errCoopOff) and Dispatch.
func (c *coopDeltaBwd) stage(file string, ins []coopPackSpec, outs []*Buffer, nw int, flops, bytes float64) error {
	r, dims := c.r, c.dims
	var binds []Binding
	var access []Access
	for _, s := range ins {
		p, ok := c.packs[s]
		if !ok {
			var err error
			if p, err = coopPackHeads(r, c.op, dims.NB, dims.T, s); err != nil {
				return err
			}
			c.packs[s] = p
		}
		binds = append(binds, Whole(p.x16), Whole(p.scale))
		access = append(access, Read, Read)
	}
	for i, b := range outs {
		binds = append(binds, Whole(b))
		access = append(access, map[bool]Access{false: Read, true: ReadWrite}[i >= len(outs)-nw])
	}
	d := r.d
	sg := d.tc.SubgroupSize
	kern, err := d.coopProgram(c.op+"."+strings.TrimSuffix(strings.TrimPrefix(file, "coopmat_delta_"), ".spv"),
		coopProgramSpec{File: file, WG: sg * coopDeltaChunkNSG, Access: access, Uniforms: 9,
			Values: []uint32{uint32(sg), uint32(d.tc.Shape.M), uint32(c.dkp), uint32(c.dvp), coopDeltaChunkNSG}})
	if err != nil {
		return fmt.Errorf("%w: %w", errCoopOff, err)
	}
	nck := (dims.T + GatedDeltaRuleChunkLen - 1) / GatedDeltaRuleChunkLen
	grid, err := Grid1D(dims.NB * dims.HV * nck)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", c.op, err)
	}
	uni := []uint32{uint32(dims.NB), uint32(dims.T), uint32(dims.HK), uint32(dims.HV), uint32(nck),
		uint32(nck * GatedDeltaRuleChunkLen), uint32(dims.DK), uint32(dims.DV), uint32(roundUp(dims.DK, coopPackRows))}
	if err := r.Dispatch(kern, grid, uni, binds...); err != nil {
		return err
	}
	r.Cost(flops, bytes)
	coopDispatches.Add(1)
	return nil
}

// record records the backward's stage name (dhu, state, qk or f: the kernels of
// coopmat_delta.comp DHU and coopmat_delta_chunk.comp) with the call's buffers (names as in
// gatedDeltaRuleChunkedBackward), annotated with the WGSL stage's flops and bytes.
func (c *coopDeltaBwd) record(name string, do, h, dh, vnew, dvp, q, k, beta, wyb, dqv, dkv, dwt, dgl *Buffer, flops, bytes float64) error {
	dims, sc := c.dims, c.sc
	switch name {
	case "dhu":
		return coopDeltaDhu(c.r, c.op, q, k, sc, do, dh, dvp, dims)
	case "state":
		return c.stage("coopmat_delta_state.spv", []coopPackSpec{c.values(do, false), c.values(vnew, true), c.values(dvp, true),
			c.states(h), c.states(dh)}, []*Buffer{h, dh, sc.gc, dqv, dkv, dwt, dgl}, 4, flops, bytes)
	case "qk":
		return c.stage("coopmat_delta_qk.spv", []coopPackSpec{c.values(do, false), c.values(vnew, true), c.keys(q), c.keys(k)},
			[]*Buffer{sc.gc, dqv, dkv}, 2, flops, bytes)
	case "f":
		ws := 3*dims.DK + dims.DV
		return c.stage("coopmat_delta_f.spv", []coopPackSpec{
			{b: wyb, heads: dims.HV, n: dims.DK, np: c.dkp, headMajor: true, stride: ws},
			{b: wyb, heads: dims.HV, n: dims.DV, np: c.dvp, headMajor: true, stride: ws, col0: dims.DK},
			{b: sc.w, heads: dims.HV, n: dims.DK, np: c.dkp, headMajor: true}, c.values(sc.u, true), c.keys(k)},
			[]*Buffer{sc.gc, beta, wyb}, 1, flops, bytes)
	}
	return fmt.Errorf("gpu: %s: no cooperative-matrix stage %q", c.op, name)
}

// GatedDeltaRuleChunkedBackwardCoopmat records GatedDeltaRuleChunkedBackward (same arguments,
// layouts and outputs; host.GatedDeltaRuleBackward) with its products on cooperative
// matrices: the forward's inter-chunk pass saving the per-chunk states and V'
// (coopmat_delta.comp with SAVE_H), Dhu, the state gradients chunk by chunk in reverse
// (coopmat_delta.comp DHU), and the chunk-parallel stages State, QK and F
// (coopmat_delta_chunk.comp), their operands packed to f16 with a power-of-two scale per
// chunk (the per-chunk states per 64 of their rows) and their f32 tiles dM and F scaled to
// f16 by their largest value; the intra-chunk kernel, the WY substitution (Wy) and Final
// stay GatedDeltaRuleChunkedBackward's WGSL kernels (their f32 forward and backward
// substitutions dominate them). Limits: those of GatedDeltaRuleChunkedBackward (dk and dv
// multiples of 4, dk ≤ 256). Errors: those of GatedDeltaRuleChunkedBackward, tensor cores
// unavailable on the device, or a tile or copy the device cannot hold; nothing is left
// recorded on error.
func GatedDeltaRuleChunkedBackwardCoopmat(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	return chunkedBackwardCoopmat(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, nil)
}

// chunkedBackwardCoopmat is GatedDeltaRuleChunkedBackwardCoopmat reading saved (when not
// nil) instead of recording the forward.
func chunkedBackwardCoopmat(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims, saved *DeltaRuleSaved) error {
	const op = "GatedDeltaRuleChunkedBackwardCoopmat"
	if err := dims.check(r, op); err != nil {
		return err
	}
	if err := r.d.coopDeltaBwdPlan(dims); err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	return gatedDeltaRuleChunkedBackward(r, op, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, true, saved)
}

// GatedDeltaRuleChunkedCoopmat records GatedDeltaRuleChunked (same arguments, layouts and
// outputs; host.GatedDeltaRule) with its inter-chunk stage on cooperative matrices
// (coopmat_delta.comp): the intra-chunk WGSL kernel (K·Kᵀ, Q·Kᵀ, the forward substitution in
// f32), then q, k, W and Aqk packed to f16 with a power-of-two scale per chunk of a head, and
// the chunks in order per (window, value head, slice of value columns) with S in f32
// accumulators and W·S, Q·S, Aqk·V' and the state update Kᵀ·V' on f16 operands (S and V'
// to f16 each chunk with a power-of-two scale from their largest value: neither is
// bounded). Accepts dv of any size (the slices are masked) and dk a multiple of 4 ≤ 256.
// Errors: those of GatedDeltaRuleChunked, tensor cores unavailable on the device, or a tile
// or copy the device cannot hold; nothing is left recorded on error.
func GatedDeltaRuleChunkedCoopmat(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	_, err := gatedDeltaRuleChunked(r, "GatedDeltaRuleChunkedCoopmat", q, k, v, g, beta, o, state, nil, nil, dims, true)
	return err
}

// coopOrWGSL runs coop and, where it reports the device has no usable tensor cores
// (errCoopOff: off, or a kernel the layer did not swap), wgsl instead.
func coopOrWGSL(coop, wgsl func() error) error {
	if err := coop(); !errors.Is(err, errCoopOff) {
		return err
	}
	return wgsl()
}
