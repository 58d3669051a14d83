package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// infDecayCases are the decay patterns of the chunked delta rule's −∞ tests: g = −∞ (the
// f32 value of −exp(A_log)·softplus once exp(A_log) overflows) or a finite g far below
// any representable decay (−1e30, −3e38: its exp is 0, and a chunk's cumulative sum of two
// overflows to −∞) at chosen tokens of value head 0, the other heads left ordinary. Every
// pattern has t not a multiple of 64 and several chunks. set marks the tokens τ of the
// window (all windows alike) whose head-0 g becomes val.
var infDecayCases = []infDecayCase{
	{"one -inf mid-chunk", 2, 150, 1, 2, 16, 20, math.Inf(-1), func(tau int) bool { return tau == 30 || tau == 100 }},
	{"-inf at chunk ends and starts", 1, 150, 2, 4, 32, 32, math.Inf(-1), func(tau int) bool { return tau == 0 || tau == 63 || tau == 64 || tau == 127 || tau == 149 }},
	{"all -inf", 2, 100, 1, 2, 16, 16, math.Inf(-1), func(int) bool { return true }},
	{"every third -inf", 1, 130, 1, 2, 16, 16, math.Inf(-1), func(tau int) bool { return tau%3 == 1 }},
	{"-1e30 run", 2, 150, 1, 2, 16, 20, -1e30, func(tau int) bool { return tau >= 40 && tau < 44 || tau == 90 }},
	{"-3e38 pairs", 1, 100, 1, 1, 16, 16, -3e38, func(tau int) bool { return tau%10 == 5 || tau%10 == 6 }},
}

// infDecayCase is one of infDecayCases.
type infDecayCase struct {
	name                  string
	nb, t, hk, hv, dk, dv int
	val                   float64
	set                   func(tau int) bool
}

// infDecayRun is one subtest of eachInfDecayCase: the case, its inputs (q, k, v, g, β as
// f32 and as their float64 values) and those inputs uploaded, in that order, to bs.
type infDecayRun struct {
	infDecayCase
	rng  *rand.Rand
	f    [5][]float32
	in   [5][]float64
	bs   testBufs
	bufs [5]*gpu.Buffer
}

// eachInfDecayCase runs body as a subtest per infDecayCases entry, on deltaInputs (drawn
// from a generator seeded with seed) with head 0's g set to val at the tokens set picks.
func eachInfDecayCase(t *testing.T, seed uint64, body func(t *testing.T, d *gpu.Device, r infDecayRun)) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for _, tc := range infDecayCases {
		t.Run(fmt.Sprintf("%s nb=%d t=%d hk=%d hv=%d dk=%d dv=%d", tc.name, tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv), func(t *testing.T) {
			rows := tc.nb * tc.t
			r := infDecayRun{infDecayCase: tc, rng: rng, bs: newBufs(t, d)}
			r.f, r.in = deltaInputs(t, rng, rows, tc.hk, tc.hv, tc.dk, tc.dv)
			for b := 0; b < tc.nb; b++ {
				for tau := 0; tau < tc.t; tau++ {
					if tc.set(tau) {
						e := (b*tc.t + tau) * tc.hv
						r.f[3][e], r.in[3][e] = float32(tc.val), float64(float32(tc.val))
					}
				}
			}
			for i, sh := range [][]int{{rows, tc.hk, tc.dk}, {rows, tc.hk, tc.dk}, {rows, tc.hv, tc.dv}, {rows, tc.hv}, {rows, tc.hv}} {
				r.bufs[i] = r.bs.up([]string{"q", "k", "v", "g", "beta"}[i], r.f[i], sh...)
			}
			body(t, d, r)
		})
	}
}

// infDecayTol is TestGatedDeltaRuleChunkedBackward's bound for t tokens: its forward bound
// is smaller, so it covers both. Past a −∞ token the chunk's cumulative log-decay is
// offset by the kernels' floor per such token (gpu.GatedDeltaRuleChunked), so the finite
// decays after it are differences of values up to 104·64 in size; the ordinary heads'
// decays already reach that size (gscale = 40 in chunkedCases), and the bound holds there.
func infDecayTol(t, dk, dv int) float64 {
	nck := float64((t + 63) / 64)
	return math.Max(32*math.Sqrt((nck+1)*float64(4*dk+4*dv+256))*u32, 16*math.Sqrt(float64(t*(2*dk+2*dv+8)))*u32)
}

// TestGatedDeltaRuleChunkedInfDecay: the chunked forward with decays g = −∞ or hugely
// negative (infDecayCases) against the host's float64 recurrence and the token-by-token
// GPU kernel, which multiply the state by exp(g) = 0 there: outputs and final states
// finite and within infDecayTol of both.
// The lane-blocked form of CPU adapters (GatedDeltaRuleLanes) runs the same checks where it
// runs, and the cooperative-matrix form (GatedDeltaRuleChunkedCoopmat, where tensor cores
// are available) with the larger of infDecayTol and deltaRuleCoopTol.
func TestGatedDeltaRuleChunkedInfDecay(t *testing.T) {
	eachInfDecayForm(t, [3]func(r *gpu.Recorder, q, k, v, g, beta, o, state *gpu.Buffer, dims gpu.DeltaRuleDims) error{
		gpu.GatedDeltaRuleChunked, gpu.GatedDeltaRuleLanes, gpu.GatedDeltaRuleChunkedCoopmat}, deltaRuleCoopTol, testInfDecayForward)
}

func testInfDecayForward(t *testing.T, name string, run func(r *gpu.Recorder, q, k, v, g, beta, o, state *gpu.Buffer, dims gpu.DeltaRuleDims) error, tolf func(t, dk, dv int) float64) {
	eachInfDecayCase(t, 171, func(t *testing.T, d *gpu.Device, tc infDecayRun) {
		nb, tt, hk, hv, dk, dv := tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv
		dims := gpu.DeltaRuleDims{NB: nb, T: tt, HK: hk, HV: hv, DK: dk, DV: dv}
		rows, bs, in := nb*tt, tc.bs, tc.in
		q, k, v, g, beta := tc.bufs[0], tc.bufs[1], tc.bufs[2], tc.bufs[3], tc.bufs[4]
		o, oRef := bs.nw("o", rows, hv, dv), bs.nw("o token", rows, hv, dv)
		st, stRef := bs.nw("state", nb, hv, dk, dv), bs.nw("state token", nb, hv, dk, dv)
		if err := d.Run(func(r *gpu.Recorder) error {
			if err := run(r, q, k, v, g, beta, o, st, dims); err != nil {
				return err
			}
			return gpu.GatedDeltaRule(r, q, k, v, g, beta, oRef, stRef, dims)
		}); err != nil {
			t.Fatal(err)
		}
		wo, ws, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], nb, tt, hk, hv, dk, dv, true)
		if err != nil {
			t.Fatal(err)
		}
		tol := tolf(tt, dk, dv)
		for _, c := range []struct {
			name     string
			got, ref *gpu.Buffer
			want     []float64
		}{{"o", o, oRef, wo}, {"state", st, stRef, ws}} {
			got := must(d.ReadFloat32(c.got)).T(t)
			checkClose(t, name+" "+c.name+" vs host", got, c.want, tol*maxAbs(c.want), 0)
			checkClose(t, name+" "+c.name+" vs token-by-token GPU", got, f64(must(d.ReadFloat32(c.ref)).T(t)), tol*maxAbs(c.want), 0)
		}
	})
}

// TestGatedDeltaRuleChunkedBackwardInfDecay: the chunked backward on infDecayCases against
// host.GatedDeltaRuleBackward and the token-by-token GPU backward, with
// TestGatedDeltaRuleChunkedBackward's tolerance (infDecayTol; dg's scale includes dq's and
// dk's). Both references give dg = Σ Ŝ⊙dŜ = 0 where g = −∞ (Ŝ = e^g·S = 0), and so must
// the chunked form, exactly: a residue there would be multiplied by exp(A_log) in the
// gates' backward.
// The lane-blocked backward of CPU adapters (GatedDeltaRuleBackwardLanes) runs the same
// checks where it runs, and the cooperative-matrix backward
// (GatedDeltaRuleChunkedBackwardCoopmat, where tensor cores are available) with the larger of
// infDecayTol and deltaRuleBackwardCoopTol.
func TestGatedDeltaRuleChunkedBackwardInfDecay(t *testing.T) {
	eachInfDecayForm(t, [3]func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error{
		gpu.GatedDeltaRuleChunkedBackward, gpu.GatedDeltaRuleBackwardLanes, gpu.GatedDeltaRuleChunkedBackwardCoopmat},
		deltaRuleBackwardCoopTol, testInfDecayBackward)
}

func testInfDecayBackward(t *testing.T, name string, bwRun func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error, tolf func(t, dk, dv int) float64) {
	eachInfDecayCase(t, 173, func(t *testing.T, d *gpu.Device, tc infDecayRun) {
		nb, tt, hk, hv, dk, dv := tc.nb, tc.t, tc.hk, tc.hv, tc.dk, tc.dv
		dims := gpu.DeltaRuleDims{NB: nb, T: tt, HK: hk, HV: hv, DK: dk, DV: dv}
		rows, bs, in := nb*tt, tc.bs, tc.in
		q, k, v, g, beta := tc.bufs[0], tc.bufs[1], tc.bufs[2], tc.bufs[3], tc.bufs[4]
		dof, dod := randF32(tc.rng, rows*hv*dv, 1)
		do := bs.up("do", dof, rows, hv, dv)
		outs := []*gpu.Buffer{bs.nw("dq", rows, hk, dk), bs.nw("dk", rows, hk, dk), bs.nw("dv", rows, hv, dv), bs.nw("dg", rows, hv), bs.nw("dbeta", rows, hv)}
		run := func(bw func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error) [5][]float32 {
			if err := d.Run(func(r *gpu.Recorder) error {
				return bw(r, q, k, v, g, beta, do, outs[0], outs[1], outs[2], outs[3], outs[4], dims)
			}); err != nil {
				t.Fatal(err)
			}
			var out [5][]float32
			for i, b := range outs {
				out[i] = must(d.ReadFloat32(b)).T(t)
			}
			return out
		}
		ref := run(gpu.GatedDeltaRuleBackward)
		got := run(bwRun)
		wq, wk, wv, wg, wb, err := host.GatedDeltaRuleBackward(in[0], in[1], in[2], in[3], in[4], dod, nb, tt, hk, hv, dk, dv)
		if err != nil {
			t.Fatal(err)
		}
		tol := tolf(tt, dk, dv)
		for i, w := range [][]float64{wq, wk, wv, wg, wb} {
			what := []string{"dq", "dk", "dv", "dg", "dbeta"}[i]
			m := maxAbs(w)
			if what == "dg" {
				m = math.Max(m, math.Max(maxAbs(wq), maxAbs(wk)))
			}
			checkClose(t, name+" "+what+" vs host", got[i], w, tol*m, 0)
			checkClose(t, name+" "+what+" vs token-by-token GPU", got[i], f64(ref[i]), tol*m, 0)
		}
		for e, x := range in[3] {
			if math.Exp(x) == 0 && (got[3][e] != 0 || ref[3][e] != 0 || wg[e] != 0) {
				t.Fatalf("dg at row-head %d (g = %g): %s %g, token-by-token %g, host %g; want 0", e, x, name, got[3][e], ref[3][e], wg[e])
			}
		}
	})
}

// testBufs uploads and allocates test buffers on d, released when the test ends.
type testBufs struct {
	t *testing.T
	d *gpu.Device
}

func newBufs(t *testing.T, d *gpu.Device) testBufs { return testBufs{t, d} }

// up uploads x with the given shape.
func (b testBufs) up(name string, x []float32, shape ...int) *gpu.Buffer {
	buf := must(b.d.UploadFloat32(name, x, shape...)).T(b.t)
	b.t.Cleanup(buf.Release)
	return buf
}

// nw allocates an f32 buffer of the given shape.
func (b testBufs) nw(name string, shape ...int) *gpu.Buffer {
	buf := must(b.d.NewBuffer(name, gpu.F32, shape...)).T(b.t)
	b.t.Cleanup(buf.Release)
	return buf
}

// nwU32 allocates a u32 buffer of the given shape.
func (b testBufs) nwU32(name string, shape ...int) *gpu.Buffer {
	buf := must(b.d.NewBuffer(name, gpu.U32, shape...)).T(b.t)
	b.t.Cleanup(buf.Release)
	return buf
}

// eachInfDecayForm runs test on the chunked, lane-blocked and cooperative-matrix forms of a
// delta-rule op (forms, in that order) as subtests, skipping a form the device lacks, with
// infDecayTol, or for the cooperative-matrix form the larger of it and coopTol.
func eachInfDecayForm[F any](t *testing.T, forms [3]F, coopTol func(gpu.DeltaRuleDims) float64,
	test func(t *testing.T, name string, run F, tol func(t, dk, dv int) float64)) {
	for i, name := range []string{"chunked", "lanes", "coopmat"} {
		t.Run(name, func(t *testing.T) {
			tol := infDecayTol
			switch name {
			case "lanes":
				skipNoLanes(t, gputest.Open(t))
			case "coopmat":
				skipNoCoopmat(t, gputest.Open(t))
				tol = func(t, dk, dv int) float64 {
					return math.Max(infDecayTol(t, dk, dv), coopTol(gpu.DeltaRuleDims{T: t, DK: dk, DV: dv}))
				}
			}
			test(t, name, forms[i], tol)
		})
	}
}
