package gpu

import (
	"fmt"
)

// BLRGrad holds the accumulated gradients of one BLR path's metric: H F32 [m], L (ℓ) F32
// [r] and G F32 [n]. DT2, when not nil, receives the path's dt2 = (dy⊙h)·U F32 [rows, r] of
// the backward (overwritten), so BLRSignGrad can reuse it; nil: a temporary.
type BLRGrad struct {
	H, L, G *Buffer
	DT2     *Buffer
}

// BLRBackward records the backward of BLRForward for the layer l applied to x F32
// [rows, l.N], given dy F32 [rows, l.M] (row-major). Per path, with t1 = (x⊙g)·Vᵀ
// [rows, r] (host.BLRLinearBackward's a):
//
//	u = dy ⊙ h;  dh += Σ_rows dy ⊙ ((t1⊙ℓ)·Uᵀ);  dt2 = u·U [rows, r];
//	dℓ += Σ_rows dt2 ⊙ t1;  dxg = (dt2 ⊙ ℓ)·V [rows, n];  dg += Σ_rows dxg ⊙ x;
//	dx = Σ_p dxg ⊙ g.
//
// grads[p] receives path p's gradients, added to what the buffers hold (accumulation over
// windows and calls); where l.Live is 0, dℓ is set to exactly 0. dx F32 [rows, l.N] is
// overwritten; nil skips it. kept holds what BLRForward kept of this x (BLRKept): t1 and c
// per path, each slice nil to recompute it. Four sign-bit GEMMs per path (t1, c, dt2, dxg;
// two with both kept) and three column reductions; f32 throughout, the same bits whether
// t1 and c are kept or recomputed. Host reference: host.BLRLinearBackward.
// Errors: an invalid layer, rows < 1, buffers of the wrong dtype or length, a grads count
// other than the number of paths, or aliasing buffers.
func BLRBackward(r *Recorder, l *BLRLayer, x *Buffer, kept BLRKept, dy, dx *Buffer, grads []BLRGrad, rows int) error {
	const op = "BLRBackward"
	if err := checkBLRRows(op, l, rows, x, "dy", dy); err != nil {
		return err
	}
	m, n, rk := l.M, l.N, l.Rank
	if dx != nil {
		if err := need(op, "dx", dx, rows*n, F32); err != nil {
			return err
		}
	}
	if err := checkKept(op, l, kept, rows); err != nil {
		return err
	}
	if len(grads) != len(l.Paths) {
		return fmt.Errorf("gpu: %s: %d grads for %d paths", op, len(grads), len(l.Paths))
	}
	all := map[string]*Buffer{"x": x, "dy": dy}
	if dx != nil {
		all["dx"] = dx
	}
	if l.Live != nil {
		all["Live"] = l.Live
	}
	for p := range kept.T1 {
		all[fmt.Sprintf("t1[%d]", p)] = kept.T1[p]
	}
	for p := range kept.C {
		all[fmt.Sprintf("c[%d]", p)] = kept.C[p]
	}
	for p, q := range l.Paths {
		g := grads[p]
		if err := need(op, fmt.Sprintf("grads[%d].H", p), g.H, m, F32); err != nil {
			return err
		}
		if err := need(op, fmt.Sprintf("grads[%d].L", p), g.L, rk, F32); err != nil {
			return err
		}
		if err := need(op, fmt.Sprintf("grads[%d].G", p), g.G, n, F32); err != nil {
			return err
		}
		if g.DT2 != nil {
			if err := need(op, fmt.Sprintf("grads[%d].DT2", p), g.DT2, rows*rk, F32); err != nil {
				return err
			}
			all[fmt.Sprintf("path %d dt2", p)] = g.DT2
		}
		for name, b := range map[string]*Buffer{"h": q.H, "g": q.G, "ℓ": q.L, "U": q.U, "V": q.V,
			"dh": g.H, "dℓ": g.L, "dg": g.G} {
			all[fmt.Sprintf("path %d %s", p, name)] = b
		}
	}
	if err := distinct(op, all); err != nil {
		return err
	}
	fail := r.rollback()
	// Intermediates live only in this call: borrowed, so the calls of one submit share them.
	var dones []func()
	defer func() {
		for _, done := range dones {
			done()
		}
	}()
	take := func(label string, cols int) (*Buffer, error) {
		b, done, err := r.Borrow(op+" "+label, F32, rows, cols)
		if err != nil {
			return nil, err
		}
		dones = append(dones, done)
		return b, nil
	}
	// On CPU adapters the two paths' column reductions run as one pass each (gradColDot2:
	// dh loads dy once, dg loads x once and writes dx once; the same bits), so both paths'
	// c and dxg are live at once.
	paired := len(l.Paths) == 2 && r.d.info.CPU && !pathPairsOff
	var cs [2]*Buffer
	var err error
	if kept.C == nil {
		for p := range len(l.Paths) {
			if p == 0 || paired {
				if cs[p], err = take(fmt.Sprintf("c%d", p), m); err != nil {
					return err
				}
			}
		}
	}
	// On tensor cores both paths' A operands of t1 (x ⊙ g_p, when recomputed) and of dt2
	// (dy ⊙ h_p) are packed in one pass each, into one a16 and one rs buffer per operand, and
	// both paths' GEMMs on them then run as one dispatch each (coopBLRGEMMPair).
	var t1A, dt2A [2]*coopA
	if len(l.Paths) == 2 {
		var done func()
		if kept.T1 == nil {
			if t1A, done, err = coopPackPaths(r, op+".t1", x, [2]*Buffer{l.Paths[0].G, l.Paths[1].G}, rows, n, rk); err != nil {
				return fail(err)
			}
			defer done()
		}
		if dt2A, done, err = coopPackPaths(r, op+".dt2", dy, [2]*Buffer{l.Paths[0].H, l.Paths[1].H}, rows, m, rk); err != nil {
			return fail(err)
		}
		defer done()
	}
	// dt2 per path: the caller's (BLRGrad.DT2) or borrowed, one buffer for the paths
	// without, two where both paths' dt2 run as one pass (blrGEMMPair, CPU adapters;
	// coopBLRGEMMPair, tensor cores, where the twin pack ran and the GEMM does not split K).
	var dt2s [2]*Buffer
	var shared *Buffer
	_, pairDT2 := r.d.coopPairGEMMPlan(rows, m, rk, false)
	pairDT2 = pairDT2 && dt2A[0] != nil
	for p, g := range grads {
		if g.DT2 != nil {
			dt2s[p] = g.DT2
			continue
		}
		if shared == nil || paired || pairDT2 {
			if shared, err = take(fmt.Sprintf("dt2 %d", p), rk); err != nil {
				return fail(err)
			}
		}
		dt2s[p] = shared
	}
	pairedDT2 := false
	us := [2]*Buffer{l.Paths[0].U, nil}
	if len(l.Paths) == 2 {
		us[1] = l.Paths[1].U
	}
	if paired {
		if pairedDT2, err = blrGEMMPair(r, op+".dt2", dy, us, [2]*Buffer{l.Paths[0].H, l.Paths[1].H}, dt2s, rows, m, rk, false); err != nil {
			return fail(err)
		}
	}
	if !pairedDT2 && pairDT2 {
		if pairedDT2, err = coopBLRGEMMPair(r, op+".dt2", dt2A, us, dt2s, rows, m, rk, false); err != nil {
			return fail(err)
		}
	}
	var dxgs [2]*Buffer
	for p := range len(l.Paths) {
		if p == 0 || paired {
			if dxgs[p], err = take(fmt.Sprintf("dxg%d", p), n); err != nil {
				return fail(err)
			}
		}
	}
	// The recomputed t1 (kept.T1 nil): one buffer both paths share, or one per path where
	// both paths' t1 run as one dispatch (coopBLRGEMMPair, tensor cores).
	var t1s [2]*Buffer
	pairedT1 := false
	if kept.T1 == nil {
		if t1s[0], err = take("t1 0", rk); err != nil {
			return fail(err)
		}
		t1s[1] = t1s[0]
		if _, ok := r.d.coopPairGEMMPlan(rows, n, rk, false); ok && t1A[0] != nil {
			if t1s[1], err = take("t1 1", rk); err != nil {
				return fail(err)
			}
			if pairedT1, err = coopBLRGEMMPair(r, op+".t1", t1A, [2]*Buffer{l.Paths[0].V, l.Paths[1].V}, t1s, rows, n, rk, true); err != nil {
				return fail(err)
			}
		}
	}
	var c, dxg [2]*Buffer // path p's
	// The column reductions' second stages (GPUs' stage "reduce4") run as one dispatch at
	// the end, not one per gradient: each was a ~13 µs dispatch of almost no work (H200).
	var pend *colReduces
	if !colReduceBatchOff {
		pend = &colReduces{}
	}
	for p, q := range l.Paths {
		g := grads[p]
		tb := t1s[p]
		if kept.T1 != nil {
			tb = kept.T1[p]
		} else if !pairedT1 {
			if err := blrGEMMPre(r, op+".t1", false, t1A[p], x, q.V, q.G, nil, tb, nil, rows, n, rk, true, false); err != nil {
				return fail(err)
			}
		}
		dt2 := dt2s[p]
		own := 0 // the scratch slot: path p's own when paired, else the one both share
		if paired {
			own = p
		}
		c[p], dxg[p] = cs[own], dxgs[own]
		if kept.C != nil {
			c[p] = kept.C[p]
		} else if err := blrGEMM(r, op+".c", false, tb, q.U, q.L, nil, c[p], nil, rows, rk, m, true, false); err != nil {
			return fail(err)
		}
		if !paired {
			if err := gradColDotDeferred(r, op+".dh", pend, dy, c[p], nil, nil, nil, g.H, nil, rows, m, false); err != nil {
				return fail(err)
			}
		}
		if !pairedDT2 {
			if err := blrGEMMPre(r, op+".dt2", false, dt2A[p], dy, q.U, q.H, nil, dt2, nil, rows, m, rk, false, false); err != nil {
				return fail(err)
			}
		}
		if err := gradColDotDeferred(r, op+".dl", pend, dt2, tb, nil, l.Live, nil, g.L, nil, rows, rk, false); err != nil {
			return fail(err)
		}
		if err := blrGEMM(r, op+".dxg", false, dt2, q.V, q.L, nil, dxg[p], nil, rows, rk, n, false, false); err != nil {
			return fail(err)
		}
		if paired {
			continue
		}
		var s *Buffer
		if dx != nil {
			s = q.G
		}
		if err := gradColDotDeferred(r, op+".dg", pend, dxg[p], x, nil, nil, s, g.G, dx, rows, n, p > 0); err != nil {
			return fail(err)
		}
	}
	if pend != nil {
		if err := pend.flush(r, op+".reduce"); err != nil {
			return fail(err)
		}
	}
	if paired {
		if err := gradColDot2(r, op+".dh", true, dy, c[0], c[1], nil, nil, grads[0].H, grads[1].H, nil, rows, m); err != nil {
			return fail(err)
		}
		var s0, s1 *Buffer
		if dx != nil {
			s0, s1 = l.Paths[0].G, l.Paths[1].G
		}
		if err := gradColDot2(r, op+".dg", false, dxg[0], x, dxg[1], s0, s1, grads[0].G, grads[1].G, dx, rows, n); err != nil {
			return fail(err)
		}
	}
	return nil
}
