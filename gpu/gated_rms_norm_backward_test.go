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

// TestGatedRMSNormBackward compares with host.GatedRMSNormBackward at the model's dv = 128
// (two windows of 37 tokens, hv = 2) and an awkward dv = 37 (fewer values than the 64
// threads, hv = 3), dw accumulated onto non-zero values. Bounds (u = 2⁻²⁴): inv =
// rsqrt(Σx²/dv + eps) has relative error δ ≤ (dv/2 + 8)·u (as TestRMSNormBackward); σ(z)
// from exp(−|z|) and a division is within (6 + 2|z|)·u, so dn = dy·z·σ(z) is within
// (8 + 2|z|)·u·|dn|; the dot Σ w·dn·x adds (dv + 2)·u·Σ|w dn x| of summation. Hence
// dx = inv·w·dn − inv³·x·dot/dv is within |inv w dn|·(δ + (11 + 2|z|)·u) +
// inv³·|x|/dv·(3δ·|dot| + (dv + 14 + 2·max|z|)·u·Σ|w dn x|) + u·|dx|; dz =
// dy·w·(x·inv)·σ(1 + z(1 − σ)) may cancel near z ≈ −1.28, so its bound is relative to the
// term magnitudes: (δ + (16 + 4|z|)·u)·|dy w x inv|·σ·(1 + |z|(1 − σ)); dw sums rows·hv
// terms dn·x·inv (each within δ + (10 + 2·max|z|)·u) with 4 lanes then a tree:
// (δ + (rows·hv + 14 + 2·max|z|)·u)·Σ|dn x inv| + u·|dw|.
func TestGatedRMSNormBackward(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(71, 72))
	const u = 1.0 / (1 << 24)
	for _, tc := range []struct{ rows, hv, dv int }{{2 * 37, 2, 128}, {11, 3, 37}} {
		t.Run(fmt.Sprintf("rows=%d hv=%d dv=%d", tc.rows, tc.hv, tc.dv), func(t *testing.T) {
			rows, hv, dv, eps := tc.rows, tc.hv, tc.dv, 1e-6
			n := rows * hv * dv
			const zmax = 4.0
			xf, xd := randF32(rng, n, 2)
			zf, zd := randF32(rng, n, zmax)
			wf, wd := randF32(rng, dv, 1.5)
			yf, yd := randF32(rng, n, 1)
			dw0f, dw0 := randF32(rng, dv, 1)
			x := must(d.UploadFloat32("x", xf, rows, hv, dv)).T(t)
			z := must(d.UploadFloat32("z", zf, rows, hv, dv)).T(t)
			w := must(d.UploadFloat32("w", wf, dv)).T(t)
			dy := must(d.UploadFloat32("dy", yf, rows, hv, dv)).T(t)
			dx := must(d.NewBuffer("dx", gpu.F32, rows, hv, dv)).T(t)
			dz := must(d.NewBuffer("dz", gpu.F32, rows, hv, dv)).T(t)
			dw := must(d.UploadFloat32("dw", dw0f, dv)).T(t)
			for _, b := range []*gpu.Buffer{x, z, w, dy, dx, dz, dw} {
				defer b.Release()
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, dw, rows, hv, dv, eps)
			}); err != nil {
				t.Fatal(err)
			}
			wdx, wdz, wdw, err := host.GatedRMSNormBackward(xd, zd, rows, hv, dv, wd, eps, yd)
			if err != nil {
				t.Fatal(err)
			}
			delta := (float64(dv)/2 + 8) * u
			bdx := make([]float64, n)
			bdz := make([]float64, n)
			bdw := make([]float64, dv)
			for gi := 0; gi < rows*hv; gi++ {
				base := gi * dv
				var ss, dot, adot float64
				for i := 0; i < dv; i++ {
					e := base + i
					zv := zd[e]
					dn := yd[e] * zv / (1 + math.Exp(-zv))
					ss += xd[e] * xd[e]
					dot += wd[i] * dn * xd[e]
					adot += math.Abs(wd[i] * dn * xd[e])
				}
				inv := 1 / math.Sqrt(ss/float64(dv)+eps)
				for i := 0; i < dv; i++ {
					e := base + i
					zv := zd[e]
					s := 1 / (1 + math.Exp(-zv))
					dn := yd[e] * zv * s
					bdx[e] = math.Abs(inv*wd[i]*dn)*(delta+(11+2*math.Abs(zv))*u) +
						inv*inv*inv*math.Abs(xd[e])/float64(dv)*(3*delta*math.Abs(dot)+(float64(dv)+14+2*zmax)*u*adot) +
						u*math.Abs(wdx[e])
					bdz[e] = (delta + (16+4*math.Abs(zv))*u) * math.Abs(yd[e]*wd[i]*xd[e]*inv) * s * (1 + math.Abs(zv)*(1-s))
					bdw[i] += (delta + (float64(rows*hv)+14+2*zmax)*u) * math.Abs(dn*xd[e]*inv)
				}
			}
			wantDW := accumulated(dw0, wdw, bdw)
			checkBound(t, "dx", must(d.ReadFloat32(dx)).T(t), wdx, bdx)
			checkBound(t, "dz", must(d.ReadFloat32(dz)).T(t), wdz, bdz)
			got := must(d.ReadFloat32(dw)).T(t)
			checkBound(t, "dw", got, wantDW, bdw)
			// Deterministic: a second call from the same dw gives the same bits.
			if err := d.WriteFloat32(dw, dw0f); err != nil {
				t.Fatal(err)
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, dw, rows, hv, dv, eps)
			}); err != nil {
				t.Fatal(err)
			}
			for i, v := range must(d.ReadFloat32(dw)).T(t) {
				if math.Float32bits(v) != math.Float32bits(got[i]) {
					t.Fatalf("dw[%d]: second call gave %g, first %g", i, v, got[i])
				}
			}

			r := d.Begin()
			defer r.Discard()
			checkErrors(t, r, map[string]error{
				"hv":       gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, dw, rows, hv+1, dv, eps),
				"eps":      gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, dw, rows, hv, dv, math.Inf(1)),
				"dx is dy": gpu.GatedRMSNormBackward(r, x, z, w, dy, dy, dz, dw, rows, hv, dv, eps),
				"dw is w":  gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dz, w, rows, hv, dv, eps),
				"dz is dx": gpu.GatedRMSNormBackward(r, x, z, w, dy, dx, dx, dw, rows, hv, dv, eps),
			})
		})
	}
}
