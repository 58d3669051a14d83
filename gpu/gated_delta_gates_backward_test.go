package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGatedDeltaGatesBackward compares with host.GatedDeltaGatesBackward on an awkward
// rows·hv (2·37 rows, hv = 3; the per-head A_log and dt_bias index j = i mod hv is
// exercised), with |a|, |b| up to 12 so the sigmoids saturate on both sides. Bounds
// (u = 2⁻²⁴): exp(−|x|) carries |x|·u from its argument plus 2u, the divisions 2u, so
// σ(b)(1 − σ(b)) = e/(1 + e)² is within (8 + 2|b|)·u and db adds u; a + dt_bias rounds
// (u·|a + dt|), σ of it is within (6 + 2|a + dt|)·u, exp(A_log) within (2 + |A_log|)·u, so
// da is within (10 + 2|a + dt| + |A_log|)·u·|da|.
func TestGatedDeltaGatesBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(93, 94))
	const u = 1.0 / (1 << 24)
	rows, hv := 2*37, 3
	n := rows * hv
	af, ad := randF32(rng, n, 12)
	bf, bd := randF32(rng, n, 12)
	lf, ld := randF32(rng, hv, 1.5)
	tf, td := randF32(rng, hv, 2)
	gf, gd := randF32(rng, n, 1)
	ef, ed := randF32(rng, n, 1)
	a := must(d.UploadFloat32("a", af, rows, hv)).T(t)
	b := must(d.UploadFloat32("b", bf, rows, hv)).T(t)
	aLog := must(d.UploadFloat32("aLog", lf, hv)).T(t)
	dtBias := must(d.UploadFloat32("dtBias", tf, hv)).T(t)
	dg := must(d.UploadFloat32("dg", gf, rows, hv)).T(t)
	dbeta := must(d.UploadFloat32("dbeta", ef, rows, hv)).T(t)
	da := must(d.NewBuffer("da", gpu.F32, rows, hv)).T(t)
	db := must(d.NewBuffer("db", gpu.F32, rows, hv)).T(t)
	for _, x := range []*gpu.Buffer{a, b, aLog, dtBias, dg, dbeta, da, db} {
		defer x.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error {
		return gpu.GatedDeltaGatesBackward(r, a, b, aLog, dtBias, dg, dbeta, da, db, rows, hv)
	}); err != nil {
		t.Fatal(err)
	}
	wa, wb, err := host.GatedDeltaGatesBackward(ad, bd, rows, hv, ld, td, gd, ed)
	if err != nil {
		t.Fatal(err)
	}
	bb := make([]float64, n)
	for i := range bb {
		bb[i] = (9 + 2*math.Abs(bd[i])) * u * math.Abs(wb[i])
	}
	checkBound(t, "da", must(d.ReadFloat32(da)).T(t), wa, daBound(ad, td, ld, wa))
	checkBound(t, "db", must(d.ReadFloat32(db)).T(t), wb, bb)

	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"hv":       gpu.GatedDeltaGatesBackward(r, a, b, aLog, dtBias, dg, dbeta, da, db, rows, hv+1),
		"rows":     gpu.GatedDeltaGatesBackward(r, a, b, aLog, dtBias, dg, dbeta, da, db, 0, hv),
		"da is db": gpu.GatedDeltaGatesBackward(r, a, b, aLog, dtBias, dg, dbeta, db, db, rows, hv),
		"db is b":  gpu.GatedDeltaGatesBackward(r, a, b, aLog, dtBias, dg, dbeta, da, b, rows, hv),
	})
}

// TestGatedDeltaGatesBackwardHugeALog: head 0 has A_log = 90, so exp(A_log) overflows f32
// (its g is −∞ and the delta rule's backward gives dg = 0 there); head 1 is ordinary. da is
// 0 for head 0, as host.GatedDeltaGatesBackward's −0·e^{90} (finite in float64), not
// 0·∞ = NaN, and within TestGatedDeltaGatesBackward's bound of the host for head 1.
func TestGatedDeltaGatesBackwardHugeALog(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(95, 96))
	rows, hv := 37, 2
	n := rows * hv
	bs := newBufs(t, d)
	af, ad := randF32(rng, n, 3)
	bf, bd := randF32(rng, n, 3)
	gf, gd := randF32(rng, n, 1)
	ef, ed := randF32(rng, n, 1)
	for r := 0; r < rows; r++ {
		gf[r*hv], gd[r*hv] = 0, 0
	}
	ld, td := []float64{90, 0.5}, []float64{0.25, -1}
	da, db := bs.nw("da", rows, hv), bs.nw("db", rows, hv)
	if err := d.Run(func(r *gpu.Recorder) error {
		return gpu.GatedDeltaGatesBackward(r, bs.up("a", af, rows, hv), bs.up("b", bf, rows, hv), bs.up("aLog", []float32{90, 0.5}, hv),
			bs.up("dtBias", []float32{0.25, -1}, hv), bs.up("dg", gf, rows, hv), bs.up("dbeta", ef, rows, hv), da, db, rows, hv)
	}); err != nil {
		t.Fatal(err)
	}
	wa, _, err := host.GatedDeltaGatesBackward(ad, bd, rows, hv, ld, td, gd, ed)
	if err != nil {
		t.Fatal(err)
	}
	checkBound(t, "da", must(d.ReadFloat32(da)).T(t), wa, daBound(ad, td, ld, wa))
}

// daBound is TestGatedDeltaGatesBackward's bound on da for a [rows, hv], dt_bias and A_log
// [hv] and the host's da: (10 + 2|a + dt| + |A_log|)·u·|da|.
func daBound(a, dt, aLog, da []float64) []float64 {
	b := make([]float64, len(da))
	for i := range b {
		j := i % len(aLog)
		b[i] = (10 + 2*math.Abs(a[i]+dt[j]) + math.Abs(aLog[j])) * u32 * math.Abs(da[i])
	}
	return b
}
