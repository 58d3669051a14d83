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

// TestHiddenLoss compares gpu.HiddenLoss with host.HiddenLoss for both kinds, an F32 and an
// F16 teacher (odd n: a row's last half shares its u32 with the next row's first), with and
// without the gradient, on awkward rows and n (below, above and not a multiple of the
// 128-thread workgroup), the losses written at an offset into a longer buffer whose other
// elements must stay as they were, dh accumulated onto non-zero values, and rows where the
// student is within 1e-3 of the teacher (the loss near 0, where MSE's d2 and cosine's 1 − cos
// are small differences). Bounds (u = 2⁻²⁴, f32 sums of n terms by strided partial sums and a
// tree; Vulkan lets a division be off by 2.5 ulp = 5u and sqrt by 3 ulp = 6u): MSE
// e = d2/(t2 + ε) with d2, t2 each within (n + 4)·u relatively (positive terms), so
// |err e| ≤ (2n + 14)·u·e; its gradient dh += 2·scale·(s − t)/(t2 + ε) within (n + 13)·u of
// the term, plus u of the sum. Cosine: st within (n + 2)·u·Σ|s·t|, n_s and n_t within
// (n/2 + 9)·u, so cos within δ = (n + 2)·u·Σ|s·t|/(n_s n_t) + (n + 24)·u·|cos| and
// e = 1 − cos within δ + u; the gradient cos·s/n_s² − t/(n_s n_t) within
// scale·(|s|·(δ + (n + 24)·u·|cos|)/n_s² + |t|·(n + 24)·u/(n_s n_t)) plus u of each product,
// of their difference and of the sum, and u·|dh| more: Mesa's compiler treats float adds as
// inexact and may add the first product to dh before subtracting the second (errors of one
// ulp of dh were seen on lavapipe).
func TestHiddenLoss(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(36, 3))
	const u = 1.0 / (1 << 24)
	for _, sz := range [][2]int{{1, 5}, {13, 333}, {70, 40}, {9, 1000}} {
		for _, cosine := range []bool{false, true} {
			for _, f16 := range []bool{false, true} {
				for _, grad := range []bool{true, false} {
					rows, n := sz[0], sz[1]
					name := fmt.Sprintf("rows=%d n=%d cosine=%v f16=%v grad=%v", rows, n, cosine, f16, grad)
					t.Run(name, func(t *testing.T) {
						var tBits []uint16
						var tf []float32
						var td []float64
						if f16 {
							tBits, td = randF16(rng, rows*n, 2)
						} else {
							tf, td = randF32(rng, rows*n, 2)
						}
						// The student: the teacher plus noise, 1e-3 of it in the first half
						// of the rows, 0.5 in the rest.
						sf := make([]float32, rows*n)
						sd := make([]float64, rows*n)
						for i := range sf {
							amp := 0.5
							if i/n < rows/2 {
								amp = 1e-3
							}
							sf[i] = float32(td[i] + (rng.Float64()*2-1)*amp)
							sd[i] = float64(sf[i])
						}
						const off, scale = 7, 0.37
						loss0f, _ := randF32(rng, off+rows+3, 1)
						dh0f, dh0 := randF32(rng, rows*n, 1)
						hs := must(d.UploadFloat32("hs", sf, rows, n)).T(t)
						var ht *gpu.Buffer
						if f16 {
							ht = must(d.UploadF16("ht", tBits, rows, n)).T(t)
						} else {
							ht = must(d.UploadFloat32("ht", tf, rows, n)).T(t)
						}
						lossB := must(d.UploadFloat32("loss", loss0f, off+rows+3)).T(t)
						var dh *gpu.Buffer
						if grad {
							dh = must(d.UploadFloat32("dh", dh0f, rows, n)).T(t)
							defer dh.Release()
						}
						for _, b := range []*gpu.Buffer{hs, ht, lossB} {
							defer b.Release()
						}
						kind := gpu.HiddenMSE
						if cosine {
							kind = gpu.HiddenCosine
						}
						if err := d.Run(func(r *gpu.Recorder) error {
							return gpu.HiddenLoss(r, hs, ht, dh, lossB, gpu.HiddenLossDims{Rows: rows, Hidden: n, Offset: off}, kind, scale)
						}); err != nil {
							t.Fatal(err)
						}
						wl, wg, err := host.HiddenLoss(sd, td, rows, n, cosine)
						if err != nil {
							t.Fatal(err)
						}
						gotLoss := must(d.ReadFloat32(lossB)).T(t)
						for i, v := range gotLoss {
							if (i < off || i >= off+rows) && math.Float32bits(v) != math.Float32bits(loss0f[i]) {
								t.Fatalf("loss[%d] = %g changed (was %g): outside [Offset, Offset+Rows)", i, v, loss0f[i])
							}
						}
						bl := make([]float64, rows)
						wantDH := make([]float64, rows*n)
						bdh := make([]float64, rows*n)
						fn := float64(n)
						for r := range rows {
							s, tt := sd[r*n:(r+1)*n], td[r*n:(r+1)*n]
							var s2, t2, ast float64
							for c := range n {
								s2 += s[c] * s[c]
								t2 += tt[c] * tt[c]
								ast += math.Abs(s[c] * tt[c])
							}
							ns, nt := math.Sqrt(s2+host.HiddenLossEps), math.Sqrt(t2+host.HiddenLossEps)
							cs := 1 - wl[r]
							delta := (fn+2)*u*ast/(ns*nt) + (fn+24)*u*math.Abs(cs)
							if cosine {
								bl[r] = delta + u
							} else {
								bl[r] = (2*fn + 14) * u * wl[r]
							}
							for c := range n {
								e := r*n + c
								wantDH[e] = dh0[e] + scale*wg[e]
								if cosine {
									bdh[e] = scale*(math.Abs(s[c])*(delta+(fn+24)*u*math.Abs(cs))/(ns*ns)+math.Abs(tt[c])*(fn+24)*u/(ns*nt)) +
										u*scale*(math.Abs(cs*s[c])/(ns*ns)+math.Abs(tt[c])/(ns*nt)+math.Abs(wg[e])) + u*(math.Abs(wantDH[e])+math.Abs(dh0[e]))
								} else {
									bdh[e] = (fn+13)*u*math.Abs(scale*wg[e]) + u*math.Abs(wantDH[e])
								}
							}
						}
						checkBound(t, "loss", gotLoss[off:off+rows], wl, bl)
						if grad {
							checkBound(t, "dh", must(d.ReadFloat32(dh)).T(t), wantDH, bdh)
						}
					})
				}
			}
		}
	}
}

// TestHiddenLossErrors: bad arguments are refused before anything is recorded, each error
// naming what is wrong.
func TestHiddenLossErrors(t *testing.T) {
	d := gputest.Open(t)
	hs := must(d.NewBuffer("hs", gpu.F32, 3, 8)).T(t)
	ht := must(d.NewBuffer("ht", gpu.F16, 3, 8)).T(t)
	dh := must(d.NewBuffer("dh", gpu.F32, 3, 8)).T(t)
	loss := must(d.NewBuffer("loss", gpu.F32, 5)).T(t)
	ids := must(d.NewBuffer("ids", gpu.U32, 3, 8)).T(t)
	for _, b := range []*gpu.Buffer{hs, ht, dh, loss, ids} {
		defer b.Release()
	}
	dims := gpu.HiddenLossDims{Rows: 3, Hidden: 8}
	r := d.Begin()
	defer r.Discard()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"rows", gpu.HiddenLoss(r, hs, ht, dh, loss, gpu.HiddenLossDims{Rows: 0, Hidden: 8}, gpu.HiddenMSE, 1), "must be positive"},
		{"hidden", gpu.HiddenLoss(r, hs, ht, dh, loss, gpu.HiddenLossDims{Rows: 3, Hidden: 9}, gpu.HiddenMSE, 1), "hs"},
		{"offset", gpu.HiddenLoss(r, hs, ht, dh, loss, gpu.HiddenLossDims{Rows: 3, Hidden: 8, Offset: 3}, gpu.HiddenMSE, 1), "at least Offset + Rows = 6"},
		{"negative offset", gpu.HiddenLoss(r, hs, ht, dh, loss, gpu.HiddenLossDims{Rows: 3, Hidden: 8, Offset: -1}, gpu.HiddenMSE, 1), "Offset -1"},
		{"kind", gpu.HiddenLoss(r, hs, ht, dh, loss, dims, gpu.HiddenLossKind(7), 1), "unknown kind HiddenLossKind(7)"},
		{"scale", gpu.HiddenLoss(r, hs, ht, dh, loss, dims, gpu.HiddenCosine, math.NaN()), "scale = NaN"},
		{"teacher dtype", gpu.HiddenLoss(r, hs, ids, dh, loss, dims, gpu.HiddenMSE, 1), "ht"},
		{"dh is hs", gpu.HiddenLoss(r, hs, ht, hs, loss, dims, gpu.HiddenMSE, 1), "same buffer"},
		{"nil recorder", gpu.HiddenLoss(nil, hs, ht, dh, loss, dims, gpu.HiddenMSE, 1), "nil"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("%d dispatches recorded by failing calls", r.Len())
	}
}
