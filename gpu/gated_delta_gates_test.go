package gpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

// TestGatedDeltaGates: beta = sigmoid(b) is one exp (≤ 3 + 2|b| ulp, |b| ≤ 8) and a
// division: relative ≤ (20 + 1)·2u ≈ 2.5e-6. g = −exp(A_log)·softplus(x), x = a + dt_bias
// rounded (relative error of softplus from that ≤ |x|·u ≤ 10u), exp(A_log) ≤ (3 + 2·2)
// ulp, exp(−|x|) ≤ 23 ulp, and log(1+e) for e ≥ 1/8 has Vulkan's absolute bound 2⁻²¹ on a
// result ≥ 0.117, i.e. ≤ 4.1e-6 relative (the series branch below 1/8 is within f32
// rounding). Sum: rtol 1e-5 for both, atol 1e-37. Arguments span both softplus branches,
// large |x| (softplus ≈ x and ≈ eˣ) and rows·hv not a multiple of the workgroup.
func TestGatedDeltaGates(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(13, 14))
	rows, hv := 2*37, 5 // 370 elements: two partial workgroups
	n := rows * hv
	af, ad := randF32(rng, n, 8)
	bf, bd := randF32(rng, n, 8)
	lf, ld := randF32(rng, hv, 2)
	df, dd := randF32(rng, hv, 2)
	// extremes: softplus(−25) ≈ 1.4e-11 (series branch), softplus(30) ≈ 30.
	af[0], ad[0] = -25, -25
	af[1], ad[1] = 30, 30
	a := must(d.UploadFloat32("a", af, rows, hv)).T(t)
	b := must(d.UploadFloat32("b", bf, rows, hv)).T(t)
	aLog := must(d.UploadFloat32("aLog", lf, hv)).T(t)
	dt := must(d.UploadFloat32("dtBias", df, hv)).T(t)
	g := must(d.NewBuffer("g", gpu.F32, rows, hv)).T(t)
	beta := must(d.NewBuffer("beta", gpu.F32, rows, hv)).T(t)
	for _, b := range []*gpu.Buffer{a, b, aLog, dt, g, beta} {
		defer b.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error { return gpu.GatedDeltaGates(r, a, b, aLog, dt, g, beta, rows, hv) }); err != nil {
		t.Fatal(err)
	}
	wg, wb, err := host.GatedDeltaGates(ad, bd, rows, hv, ld, dd)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "GatedDeltaGates g", must(d.ReadFloat32(g)).T(t), wg, 1e-37, 1e-5)
	checkClose(t, "GatedDeltaGates beta", must(d.ReadFloat32(beta)).T(t), wb, 1e-37, 1e-5)

	r := d.Begin()
	if err := gpu.GatedDeltaGates(r, a, b, aLog, dt, g, beta, rows, hv+1); err == nil {
		t.Error("wrong hv accepted")
	}
	if err := gpu.GatedDeltaGates(r, a, b, aLog, dt, g, g, rows, hv); err == nil {
		t.Error("g and beta aliased accepted")
	}
	if err := gpu.GatedDeltaGates(r, a, b, dt, dt, g, beta, rows, hv); err == nil {
		t.Error("aliased inputs accepted")
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
	r.Discard()
}
