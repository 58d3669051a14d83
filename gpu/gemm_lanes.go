package gpu

import "fmt"

// The lane-blocked GEMM (wgsl/gemm_lanes.wgsl, linear_lanes.wgsl, blr_forward_lanes.wgsl) is
// the GEMM of CPU adapters: one subgroup per workgroup, each operand element loaded once per
// workgroup and shared between the lanes by subgroupBroadcast. It computes every output as
// one fma chain in K order, like the tiled kernels and their naive twins, so it is
// bit-identical to them (TestLinearFamily, TestBLRForward, …) and nothing downstream changes
// with the adapter's choice. Measured on lavapipe (Mesa 22.3, 2 AMD EPYC cores, AVX2),
// Linear 256×768×256 with f16 W: tiled 64×64×16 0.86 GFLOP/s, lanes S 8 × R 4 × C 8
// 9.7 GFLOP/s (DESIGN §9, "CPU adapters").

// lanesProbeWG is the workgroup of the subgroup probe (a multiple of every plausible S).
const lanesProbeWG = 64

// probeSubgroup returns the subgroup size S of a CPU adapter when a workgroup of S
// invocations is exactly one subgroup whose lane ids are the local invocation indices (the
// lane-blocked kernels' assumption), else 0. It runs one small kernel.
func (d *Device) probeSubgroup() (int, error) {
	out, err := d.NewBuffer("subgroup probe", U32, 2*lanesProbeWG)
	if err != nil {
		return 0, err
	}
	defer out.Release()
	err = d.Run(func(r *Recorder) error {
		return r.dispatch1D(KernelSpec{Name: "SubgroupSize", File: "subgroup_size.wgsl",
			Params: struct{ WG int }{lanesProbeWG}, Bindings: []Access{ReadWrite}}, 1, nil, Whole(out))
	})
	if err != nil {
		return 0, err
	}
	v, err := d.ReadUint32(out)
	if err != nil {
		return 0, err
	}
	s := int(v[0])
	if s < 4 || s > lanesProbeWG || lanesProbeWG%s != 0 {
		return 0, nil
	}
	for i := range lanesProbeWG {
		if int(v[i]) != s || int(v[lanesProbeWG+i]) != i%s {
			return 0, nil
		}
	}
	return s, nil
}

// gemmLanesForce: tests and benchmarks force the lane-blocked kernel where it applies
// (else the automatic choice: on CPU adapters only).
var gemmLanesForce bool

// rowLanesOff, set by tests (SetRowLanes), makes the row kernels take their workgroup form on
// CPU adapters too, so the forms can be compared.
var rowLanesOff bool

// rowGroupRows is how many short rows (rowForm) a workgroup of the row kernels' workgroup
// form takes; a test may set it (SetRowGroupRows) and rowGroupRowsAll, to take it for every
// row length.
var (
	rowGroupRows    = 4
	rowGroupRowsAll bool
)

// pathPairsOff, set by tests (SetPathPairs), makes BLRForward and BLRBackward run each path's
// t1 and dt2 GEMMs (blrGEMMPair) and column reductions (gradColDot2's twin) on their own on
// CPU adapters too.
var pathPairsOff bool

// causalConvRunsOff, set by tests (SetCausalConvRuns), makes the causal convolution kernels
// take their per-element form, the run form's simple twin.
var causalConvRunsOff bool

// gemmLanesDispatches counts the lane-blocked GEMMs recorded (tests check a forced variant ran).
var gemmLanesDispatches int

// lanesParams are the lane-blocked kernels' block: S lanes, R row blocks (S·R rows per
// workgroup), C columns per lane (S·C columns per workgroup); with Pair, two outputs that
// share A (blrGEMMPair), C/2 columns of each per lane.
type lanesParams struct {
	S, R, C int
	Pair    bool
}

// H is the number of columns a lane owns of each output: C, or C/2 in a pair (the templates
// read it as .H).
func (p lanesParams) H() int {
	if p.Pair {
		return p.C / 2
	}
	return p.C
}

// gemmLanes picks the lane-blocked block for an m×n output of depth k, or ok false where the
// kernel does not apply: an adapter without a probed subgroup size, a tiled variant forced
// (gemmForce), the automatic choice on a GPU, k not a multiple of 4, a binding not on a
// 16-byte boundary, or (evenN) an odd n. R and C shrink for small outputs so that few lanes
// idle: R = min(4, ceil(m/S)), C the least of 2, 4, 8 with S·C ≥ n (8 for larger n; 16 for
// a multiple of 16 when n ≥ 4096, or k ≥ 4096 and n ≥ 16·S).
func (d *Device) gemmLanes(m, n, k int, evenN bool, binds ...Binding) (lanesParams, bool) {
	s := d.info.SubgroupSize
	if s == 0 || gemmForce != (gemmVariant{}) || !(gemmLanesForce || d.info.CPU) || k%4 != 0 || (evenN && n%2 != 0) {
		return lanesParams{}, false
	}
	for _, b := range binds {
		if b.Offset%16 != 0 {
			return lanesParams{}, false
		}
	}
	p := lanesParams{S: s, R: min(4, (m+s-1)/s), C: 8}
	for _, c := range []int{2, 4} {
		if s*c >= n {
			p.C = c
			break
		}
	}
	if (n >= 4096 || k >= 4096 && n >= s*16) && n%16 == 0 {
		// The head's vocabulary-wide GEMMs: A is reloaded and broadcast for every column
		// block, and 16 columns per lane halve that cost — the logits (n = vocab) and dh
		// (k = vocab) of the tiny step 73 → 62 and 73 → 61 ms — for larger pipelines (~0.3 s
		// more compile each on lavapipe).
		p.C = 16
	}
	return p, true
}

// blrLanes is gemmLanes for the BLR GEMM stages, whose B is sign bits: cheap to load, so for
// n > 8·S (and n % 16 == 0, which keeps a lane's columns within one word of bits) the block
// is 16 columns by 2 row blocks instead of 8 by 4 — the same R·S·C accumulators per lane (so
// the same compile time), but every loaded and broadcast A value feeds twice the columns. Per tiny
// step on lavapipe: dt2 131 → 110 ms, dxg 78 → 68, t1 93 → 87. (The Linear GEMMs of the
// teacher and the head load f16 weights: there the halved row blocks cost more than they
// save, 75 → 90 ms for the head's logits.) Every output is the same fma chain whatever the
// block.
//
// B [k, n] (not transB) with n ≥ 32·S and n % 32 == 0 takes 32 columns by 1 row block: a
// lane's columns of one k are then one whole word of signs. Measured on the tiny student's
// dxg shapes (k = rank 48–80, n = 256–768; interleaved, medians of 12): 5–17 % faster than
// 16 by 2 in all nine; for transB (y) it was 8–16 % slower, so those keep 16 by 2.
//
// ok is also false where blr_forward_lanes.wgsl cannot load the signs: k % 8 ≠ 0 for B [n, k]
// (transB; blrChunk), n % 8 ≠ 0 for B [k, n].
func (d *Device) blrLanes(m, n, k int, transB bool, binds ...Binding) (lanesParams, bool) {
	p, ok := d.gemmLanes(m, n, k, false, binds...)
	ok = ok && (transB && k%8 == 0 || !transB && n%8 == 0)
	switch {
	case ok && !transB && n >= p.S*32 && n%32 == 0:
		p.C, p.R = 32, 1
	case ok && n > p.S*8 && n%16 == 0:
		p.C, p.R = 16, min(2, p.R)
	}
	return p, ok
}

// dispatchLanes records a lane-blocked kernel over the m×n output.
func (r *Recorder) dispatchLanes(kn *Kernel, p lanesParams, m, n int, uniforms []uint32, binds ...Binding) error {
	cols := p.S * p.H() // output columns per workgroup
	gx, gy := (n+cols-1)/cols, (m+p.S*p.R-1)/(p.S*p.R)
	if gx > 65535 || gy > 65535 {
		return fmt.Errorf("gpu: %s: %d×%d output needs a %d×%d grid (max 65535 per dimension)", kn.spec.Name, m, n, gx, gy)
	}
	if err := r.Dispatch(kn, [3]int{gx, gy, 1}, uniforms, binds...); err != nil {
		return err
	}
	gemmLanesDispatches++
	return nil
}

// rowForm is the form of a row kernel (reduce.wgsl's red_row_open), part of its template
// parameters: the workgroup form, WG threads a row and RW rows a workgroup (Lanes false, Q
// 1), or on CPU adapters the lanes form (one subgroup of S lanes per row, each doing Q = WG/S
// threads' work; RW 1). Every form gives the same bits.
type rowForm struct {
	WG, S, Q, RW int
	Lanes        bool
}

// groups is the number of workgroups for rows rows.
func (f rowForm) groups(rows int) int { return (rows + f.RW - 1) / f.RW }

// rowForm returns the form a row kernel of wg threads a row takes on rows of n values: the
// lanes form on CPU adapters with a probed subgroup size dividing wg (unless a test turned it
// off); else the workgroup form, with rowGroupRows rows a workgroup where n ≤ 2·wg (a head's
// dk or dv): on an H100 L2Norm's 65,536 workgroups of one 128-value row each ran at 0.7 TB/s
// (92 µs a call) whichever form, the workgroups themselves the cost. A workgroup's slots past
// the last row repeat it (reduce.wgsl's red_row_open), so only kernels whose writes are
// overwrites take this; the others take rowFormOne.
func (d *Device) rowForm(wg, n int) rowForm {
	f := d.rowFormOne(wg)
	if !f.Lanes && (n <= 2*wg || rowGroupRowsAll) {
		f.RW = rowGroupRows
		if lim := int(d.info.MaxInvocations); lim > 0 {
			f.RW = max(1, min(f.RW, lim/wg)) // the workgroup's WG·RW threads within the device's limit
		}
	}
	return f
}

// rowFormOne is rowForm with one row a workgroup: for kernels that add to their outputs.
func (d *Device) rowFormOne(wg int) rowForm {
	s := d.info.SubgroupSize
	if s == 0 || !d.info.CPU || wg%s != 0 || rowLanesOff {
		return rowForm{WG: wg, S: max(s, 1), Q: 1, RW: 1}
	}
	return rowForm{WG: wg, S: s, Q: wg / s, Lanes: true, RW: 1}
}
