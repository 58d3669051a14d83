package gpu

import "fmt"

// gatedDeltaRuleCols is the number of value columns per workgroup, and
// gatedDeltaRuleRowSlices the number of invocations sharing one column's rows (reduced to a
// divisor of dk/4).
const (
	gatedDeltaRuleCols      = 32
	gatedDeltaRuleRowSlices = 4
)

// GatedDeltaRule records the gated delta-rule recurrence of the GatedDeltaNet, token by
// token (host.GatedDeltaRule, DESIGN.md §3). For every window b and value head j, with key
// head kh = j / (hv/hk) and state S ∈ R^{dk×dv} in f32 starting from zero at the window's
// first token:
//
//	S ← e^{g_t} · S
//	S ← S + k_t ⊗ β_t (v_t − Sᵀ k_t)
//	o_t = Sᵀ q_t
//
// Layouts, all F32 row-major: q and k [nb·t, hk, dk] (already L2-normalised; q already
// scaled by dk^−½), v [nb·t, hv, dv], g and beta [nb·t, hv] (GatedDeltaGates), the output
// o [nb·t, hv, dv]. state, when not nil, receives the final state of every window and value
// head, [nb, hv, dk, dv] (S[r,c] at ((b·hv + j)·dk + r)·dv + c), for the backward's
// checkpoints; pass nil when it is not needed.
//
// One workgroup per (window, value head, 32 value columns); 4 invocations share a column of
// S, each keeping a quarter of its rows in registers (fewer when dk/4 is not a multiple of
// 4), so dk is bounded: dk must be a multiple of 4 and ≤ 256. The time loop is sequential
// (t steps, two barriers each).
// Errors: non-positive sizes, hv not a multiple of hk, dk out of range, dtype or length
// mismatches, aliasing among the buffers, or any Dispatch error.
func GatedDeltaRule(r *Recorder, q, k, v, g, beta, o, state *Buffer, dims DeltaRuleDims) error {
	const op = "GatedDeltaRule"
	access, binds, err := tokenForwardBindings(r, op, dims, q, k, v, g, beta, o, state)
	if err != nil {
		return err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	// np invocations share a column (each holding dk/np of its rows): more invocations and
	// shorter dependent chains per step, at the price of a second barrier per step.
	np := gatedDeltaRuleRowSlices
	for (dk/4)%np != 0 {
		np /= 2
	}
	kern, err := r.d.Kernel(KernelSpec{
		Name: op, File: "gated_delta_rule.wgsl",
		Params: struct {
			DK, DV, COLS, P int
			WantState       bool
			Idx             [][2]int
		}{dk, dv, gatedDeltaRuleCols, np, state != nil, unrollIdx(dk / 4 / np)},
		Bindings: access, Uniforms: 4,
	})
	if err != nil {
		return err
	}
	slices := (dv + gatedDeltaRuleCols - 1) / gatedDeltaRuleCols
	grid, err := Grid1D(nb * hv * slices)
	if err != nil {
		return fmt.Errorf("gpu: %s: %w", op, err)
	}
	return r.Dispatch(kern, grid, []uint32{uint32(nb), uint32(t), uint32(hk), uint32(hv)}, binds...)
}

// tokenForwardBindings validates a token-by-token forward's arguments (GatedDeltaRule,
// GatedDeltaRuleLanes: sizes, dk a multiple of 4 and ≤ 256, the 2³¹ index range, buffers)
// and returns its bindings and their access: q, k, v, g, beta, o, then state when not nil.
func tokenForwardBindings(r *Recorder, op string, dims DeltaRuleDims, q, k, v, g, beta, o, state *Buffer) ([]Access, []Binding, error) {
	if err := dims.check(r, op); err != nil {
		return nil, nil, err
	}
	nb, t, hk, hv, dk, dv := dims.NB, dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	if dk%4 != 0 || dk > 256 {
		return nil, nil, fmt.Errorf("gpu: %s: dk = %d must be a multiple of 4 and ≤ 256", op, dk)
	}
	rows := nb * t
	if rows*hv*dv > maxU32Elems || rows*hk*dk > maxU32Elems || nb*hv*dk*dv > maxU32Elems {
		return nil, nil, fmt.Errorf("gpu: %s: sizes nb=%d t=%d hk=%d hv=%d dk=%d dv=%d exceed 2³¹ elements", op, nb, t, hk, hv, dk, dv)
	}
	bufs, err := gdrForwardBuffers(op, dims, q, k, v, g, beta, o, state)
	if err != nil {
		return nil, nil, err
	}
	if err := distinct(op, bufs); err != nil {
		return nil, nil, err
	}
	access := []Access{Read, Read, Read, Read, Read, ReadWrite}
	binds := []Binding{Whole(q), Whole(k), Whole(v), Whole(g), Whole(beta), Whole(o)}
	if state != nil {
		access = append(access, ReadWrite)
		binds = append(binds, Whole(state))
	}
	return access, binds, nil
}

// gdrForwardBuffers checks the forward's buffers against dims (all F32: q, k
// [NB·T, HK, DK]; v, o [NB·T, HV, DV]; g, beta [NB·T, HV]; state, when not nil,
// [NB, HV, DK, DV]) and returns them by name, for the aliasing check.
func gdrForwardBuffers(op string, dims DeltaRuleDims, q, k, v, g, beta, o, state *Buffer) (map[string]*Buffer, error) {
	rows, hk, hv, dk, dv := dims.NB*dims.T, dims.HK, dims.HV, dims.DK, dims.DV
	bufs := map[string]*Buffer{"q": q, "k": k, "v": v, "g": g, "beta": beta, "o": o}
	for _, c := range []struct {
		name string
		n    int
	}{{"q", rows * hk * dk}, {"k", rows * hk * dk}, {"v", rows * hv * dv}, {"g", rows * hv}, {"beta", rows * hv}, {"o", rows * hv * dv}} {
		if err := need(op, c.name, bufs[c.name], c.n, F32); err != nil {
			return nil, err
		}
	}
	if state != nil {
		if err := need(op, "state", state, dims.NB*hv*dk*dv, F32); err != nil {
			return nil, err
		}
		bufs["state"] = state
	}
	return bufs, nil
}

// unrollIdx returns [a, a mod 4] for a < n: the template's unrolled register indices and
// their partial-sum slots.
func unrollIdx(n int) [][2]int {
	idx := make([][2]int, n)
	for a := range idx {
		idx[a] = [2]int{a, a % 4}
	}
	return idx
}
