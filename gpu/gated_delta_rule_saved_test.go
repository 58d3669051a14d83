package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGatedDeltaRuleChunkedBackwardSaved: the chunked backward reading the intermediates a
// saving forward left (gpu.DeltaRuleSaved) instead of recording the forward again, under the
// backward parity suite with the chunked form's tolerance, in the WGSL form and, where tensor
// cores are available, the cooperative-matrix one with its tolerance.
func TestGatedDeltaRuleChunkedBackwardSaved(t *testing.T) {
	d := gputest.Open(t)
	t.Run("wgsl", func(t *testing.T) {
		testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.BackwardViaSaved(false), deltaRuleBackwardChunkedTol, true, true, true})
	})
	t.Run("coopmat", func(t *testing.T) {
		skipNoCoopmat(t, d)
		testDeltaRuleBackward(t, deltaRuleBackwardImpl{gpu.BackwardViaSaved(true), deltaRuleBackwardCoopTol, true, true, true})
	})
}

// TestGatedDeltaRuleSaved: the saving forward and the backward that reads it against the
// launchers they replace. For each form (WGSL; cooperative-matrix where available) the saving
// forward's o is within the form's tolerance of host.GatedDeltaRule, and the gradients are
// bit for bit those of the backward that records its own forward (the same kernels on the
// same inputs); the cooperative-matrix saving forward's o is GatedDeltaRuleChunkedCoopmat's
// bits. GatedDeltaRuleAutoSave saves exactly where GatedDeltaRuleBackwardAuto takes the
// cooperative-matrix form, and with GatedDeltaRuleBackwardAutoSaved gives GatedDeltaRuleAuto's
// o and GatedDeltaRuleBackwardAuto's gradients bit for bit (so a recomputing step matches one
// that keeps its activations) in fewer dispatches where it saved, the same ones elsewhere. A saved forward is refused by another recorder, after its recorder's
// submit, and for other inputs or dims, without recording anything.
func TestGatedDeltaRuleSaved(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(51, 52))
	type bwdFn = func(r *gpu.Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *gpu.Buffer, dims gpu.DeltaRuleDims) error
	for _, dm := range []gpu.DeltaRuleDims{{NB: 2, T: 100, HK: 1, HV: 2, DK: 16, DV: 20}, {NB: 1, T: 130, HK: 2, HV: 2, DK: 32, DV: 8}} {
		rows := dm.NB * dm.T
		f, in := chunkedInputs(t, rng, rows, dm.HK, dm.HV, dm.DK, dm.DV, 1)
		dof, _ := randF32(rng, rows*dm.HV*dm.DV, 1)
		bs := newBufs(t, d)
		q, k, v := bs.up("q", f[0], rows, dm.HK, dm.DK), bs.up("k", f[1], rows, dm.HK, dm.DK), bs.up("v", f[2], rows, dm.HV, dm.DV)
		g, beta, do := bs.up("g", f[3], rows, dm.HV), bs.up("beta", f[4], rows, dm.HV), bs.up("do", dof, rows, dm.HV, dm.DV)
		wo, _, err := host.GatedDeltaRule(in[0], in[1], in[2], in[3], in[4], dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV, false)
		if err != nil {
			t.Fatal(err)
		}
		// grads runs rec, which writes o and the five gradients, reads them back and counts
		// the dispatches rec recorded.
		grads := func(t *testing.T, rec func(r *gpu.Recorder, o *gpu.Buffer, out [5]*gpu.Buffer) error) (o []float32, out [5][]float32, dispatches int) {
			ob := bs.nw("o", rows, dm.HV, dm.DV)
			bufs := [5]*gpu.Buffer{bs.nw("dq", rows, dm.HK, dm.DK), bs.nw("dk", rows, dm.HK, dm.DK), bs.nw("dv", rows, dm.HV, dm.DV), bs.nw("dg", rows, dm.HV), bs.nw("dbeta", rows, dm.HV)}
			if err := d.Run(func(r *gpu.Recorder) error {
				err := rec(r, ob, bufs)
				dispatches = r.Len()
				return err
			}); err != nil {
				t.Fatal(err)
			}
			for i, b := range bufs {
				out[i] = must(d.ReadFloat32(b)).T(t)
			}
			return must(d.ReadFloat32(ob)).T(t), out, dispatches
		}
		sameO := func(t *testing.T, what string, got, want []float32) {
			t.Helper()
			for e := range got {
				if math.Float32bits(got[e]) != math.Float32bits(want[e]) {
					t.Fatalf("%s: o element %d: %g, want %g", what, e, got[e], want[e])
				}
			}
		}
		sameBits := func(t *testing.T, what string, got, want [5][]float32) {
			t.Helper()
			for i := range got {
				for e := range got[i] {
					if math.Float32bits(got[i][e]) != math.Float32bits(want[i][e]) {
						t.Fatalf("%s: gradient %d element %d: %g, want %g", what, i, e, got[i][e], want[i][e])
					}
				}
			}
		}
		name := fmt.Sprintf("nb=%d t=%d hk=%d hv=%d dk=%d dv=%d", dm.NB, dm.T, dm.HK, dm.HV, dm.DK, dm.DV)
		for _, coop := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s coop=%v", name, coop), func(t *testing.T) {
				tol, ref := deltaRuleChunkedTol(dm), bwdFn(gpu.GatedDeltaRuleChunkedBackward)
				if coop {
					skipNoCoopmat(t, d)
					tol, ref = deltaRuleCoopTol(dm), gpu.GatedDeltaRuleChunkedBackwardCoopmat
				}
				o, got, _ := grads(t, func(r *gpu.Recorder, o *gpu.Buffer, out [5]*gpu.Buffer) error {
					s, err := gpu.SaveChunkedForTest(r, q, k, v, g, beta, o, dm, coop)
					if err != nil {
						return err
					}
					return gpu.BackwardFromSavedForTest(r, s, q, k, v, g, beta, do, out[0], out[1], out[2], out[3], out[4], dm, coop)
				})
				checkClose(t, "saving forward's o vs host", o, wo, tol*maxAbs(wo), 0)
				_, want, _ := grads(t, func(r *gpu.Recorder, _ *gpu.Buffer, out [5]*gpu.Buffer) error {
					return ref(r, q, k, v, g, beta, do, out[0], out[1], out[2], out[3], out[4], dm)
				})
				sameBits(t, "backward from the saved forward vs the one recording its own", got, want)
				if coop { // the form GatedDeltaRuleAutoSave saves: o must be the plain forward's bits
					oPlain, _, _ := grads(t, func(r *gpu.Recorder, o *gpu.Buffer, _ [5]*gpu.Buffer) error {
						return gpu.GatedDeltaRuleChunkedCoopmat(r, q, k, v, g, beta, o, nil, dm)
					})
					sameO(t, "the saving cooperative-matrix forward vs GatedDeltaRuleChunkedCoopmat", o, oPlain)
				}
			})
		}
		for _, tc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s auto tensorcores=%v", name, tc), func(t *testing.T) {
				if tc {
					skipNoCoopmat(t, d)
				}
				defer gpu.SetTensorCores(tc)()
				wantSave := gpu.GatedDeltaRuleBackwardCoopmatFits(d, dm)
				if wantSave != tc {
					t.Fatalf("GatedDeltaRuleBackwardCoopmatFits = %v with tensor cores forced %v", wantSave, tc)
				}
				var saved bool
				o, got, n := grads(t, func(r *gpu.Recorder, o *gpu.Buffer, out [5]*gpu.Buffer) error {
					s, err := gpu.GatedDeltaRuleAutoSave(r, q, k, v, g, beta, o, dm)
					if err != nil {
						return err
					}
					saved = s != nil
					return gpu.GatedDeltaRuleBackwardAutoSaved(r, s, q, k, v, g, beta, do, out[0], out[1], out[2], out[3], out[4], dm)
				})
				if saved != wantSave {
					t.Errorf("GatedDeltaRuleAutoSave saved = %v, want %v (where the backward takes the cooperative-matrix form)", saved, wantSave)
				}
				oAuto, want, nAuto := grads(t, func(r *gpu.Recorder, o *gpu.Buffer, out [5]*gpu.Buffer) error {
					if err := gpu.GatedDeltaRuleAuto(r, q, k, v, g, beta, o, nil, dm); err != nil {
						return err
					}
					return gpu.GatedDeltaRuleBackwardAuto(r, q, k, v, g, beta, do, out[0], out[1], out[2], out[3], out[4], dm)
				})
				sameO(t, "GatedDeltaRuleAutoSave vs GatedDeltaRuleAuto", o, oAuto)
				sameBits(t, "GatedDeltaRuleBackwardAutoSaved vs GatedDeltaRuleBackwardAuto", got, want)
				switch {
				case saved && n >= nAuto:
					t.Errorf("%d dispatches with the saved forward, not fewer than %d recording it again", n, nAuto)
				case !saved && n != nAuto:
					t.Errorf("%d dispatches without a saved forward, want GatedDeltaRuleAuto's and GatedDeltaRuleBackwardAuto's %d", n, nAuto)
				}
				t.Logf("saved %v: %d dispatches, %d recording the forward again", saved, n, nAuto)
			})
		}
		t.Run(name+" errors", func(t *testing.T) {
			o := bs.nw("o", rows, dm.HV, dm.DV)
			dq, dkey, dval := bs.nw("dq", rows, dm.HK, dm.DK), bs.nw("dk", rows, dm.HK, dm.DK), bs.nw("dv", rows, dm.HV, dm.DV)
			dg, dbeta := bs.nw("dg", rows, dm.HV), bs.nw("dbeta", rows, dm.HV)
			r := d.Begin()
			defer r.Discard()
			s, err := gpu.SaveChunkedForTest(r, q, k, v, g, beta, o, dm, false)
			if err != nil {
				t.Fatal(err)
			}
			n := r.Len()
			other := d.Begin()
			defer other.Discard()
			with := dm
			with.T--
			for what, c := range map[string]struct {
				err  error
				want string
			}{
				"another recorder": {gpu.GatedDeltaRuleBackwardAutoSaved(other, s, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dm), "another recorder"},
				"q and k swapped":  {gpu.GatedDeltaRuleBackwardAutoSaved(r, s, k, q, v, g, beta, do, dq, dkey, dval, dg, dbeta, dm), "buffers the saved forward read"},
				"other dims":       {gpu.GatedDeltaRuleBackwardAutoSaved(r, s, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, with), "differ from the saved forward's"},
			} {
				if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
					t.Errorf("%s: error %v, want one saying %q", what, c.err, c.want)
				}
			}
			if r.Len() != n || other.Len() != 0 {
				t.Errorf("failing calls recorded %d and %d dispatches", r.Len()-n, other.Len())
			}
			r.Discard()
			if err := gpu.GatedDeltaRuleBackwardAutoSaved(r, s, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dm); err == nil || !strings.Contains(err.Error(), "already submitted or discarded") {
				t.Errorf("after Discard: error %v, want one saying the recorder was already submitted or discarded", err)
			}
		})
	}
}
