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

// TestKLLossBackward compares kl, loss and dh with host.KLLoss on the f64 logits of the same
// f32 h and f16 E (dh_ref = dlogits·E, added to a non-zero dh), with raw (unnormalised)
// teacher probabilities, a zero probability, several slices (the last partial) and an
// automatic slice size. Bounds, per row (u = 2⁻²⁴; Vulkan: exp within (3 + 2|x|) ulp, log 3
// ulp or 2⁻²¹ absolute near 1):
//   - each logit is an H-term f32 dot product: |err| ≤ b_v = (H+1)·u·Σ|h e|, B = max_v b_v;
//   - lse: B + (20 + 4·spread + cols/WG + 2·slices)·u + 2⁻²¹ + 7u·|lse| (exp arguments in
//     [−spread, 0], the sums, log and the final add);
//   - KL: Σ_k q_k·(B + δlse + 6u·|log q_k| + 2⁻²¹ + (k+2)·u) + (k+4)·u·Σ_k q_k·|log q_k − log p_S|;
//     the loss: the mean of those plus (rows+8)·u·mean|KL|;
//   - dlogits_v: scale·(p_S·(b_v + δlse + (8 + 4|x − lse|)·u) + q_v·(k+3)·u) + u·|dl_v|;
//   - dh_j: Σ_v |δdl_v|·|E_vj| + (cols + slices + 2)·u·Σ_v|dl_v E_vj| + u·|dh_j|.
//
// The "coopmat" line runs the vocabulary GEMMs (logits, dh) on the cooperative-matrix
// kernels (hidden a multiple of 8, E in f16): each logit's H-term bound becomes coopRel(H)
// (h rounds to f16), and dh's sum over the vocabulary adds 2⁻¹⁰·Σ|dl E| (dlogits round to f16).
func TestKLLossBackward(t *testing.T) {
	t.Run("wgsl", func(t *testing.T) {
		testKLLossBackward(t, false, []klCase{
			{5, 33, 1000, 7, 256, false},
			{3, 16, 77, 1, 0, false},
			{9, 40, 300, 32, 128, true}, // E in f32 (the same f16-exact values)
		})
	})
	t.Run("coopmat", func(t *testing.T) {
		testKLLossBackward(t, true, []klCase{{5, 40, 1000, 7, 256, false}, {3, 16, 77, 1, 0, false}})
	})
}

// klCase is one geometry of TestKLLossBackward: rows, hidden_size, vocabulary, top-k, the
// slice rows (0: automatic), and E in f32 instead of f16.
type klCase struct {
	rows, hidden, vocab, k, slice int
	f32E                          bool
}

func testKLLossBackward(t *testing.T, coop bool, cases []klCase) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(71, 72))
	const u = 1.0 / (1 << 24)
	rel := func(k int) float64 { return float64(k+1) * u }
	if coop {
		skipNoCoopmat(t, d)
		defer gpu.SetTensorCores(true)()
		rel = coopRel
		coop0 := gpu.CoopDispatches()
		defer func() {
			if gpu.CoopDispatches() == coop0 {
				t.Error("no cooperative-matrix GEMM recorded")
			}
		}()
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			rows, hidden, vocab, k := c.rows, c.hidden, c.vocab, c.k
			hf, hd := randF32(rng, rows*hidden, 1)
			eb, ed := randF16(rng, vocab*hidden, 1)
			ids := make([]int, rows*k)
			idsU := make([]uint32, rows*k)
			pf := make([]float32, rows*k)
			pd := make([]float64, rows*k)
			for r := 0; r < rows; r++ {
				perm := rng.Perm(vocab)
				for i := 0; i < k; i++ {
					ids[r*k+i], idsU[r*k+i] = perm[i], uint32(perm[i])
					pf[r*k+i] = float32(rng.Float64())
					if i == 1 && r == 0 {
						pf[r*k+i] = 0
					}
					pd[r*k+i] = float64(pf[r*k+i])
				}
			}
			dh0f, dh0 := randF32(rng, rows*hidden, 0.1)
			var bufs []*gpu.Buffer
			keep := func(b *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, b); return b }
			defer func() {
				for _, b := range bufs {
					b.Release()
				}
			}()
			h := keep(must(d.UploadFloat32("h", hf, rows, hidden)).T(t))
			var e *gpu.Buffer
			if c.f32E {
				ef := make([]float32, len(ed))
				for i, x := range ed {
					ef[i] = float32(x)
				}
				e = keep(must(d.UploadFloat32("E", ef, vocab, hidden)).T(t))
			} else {
				e = keep(must(d.UploadF16("E", eb, vocab, hidden)).T(t))
			}
			idb := keep(must(d.UploadUint32("ids", idsU, rows, k)).T(t))
			pt := keep(must(d.UploadFloat32("pT", pf, rows, k)).T(t))
			dh := keep(must(d.UploadFloat32("dh", dh0f, rows, hidden)).T(t))
			kl := keep(must(d.NewBuffer("kl", gpu.F32, rows)).T(t))
			loss := keep(must(d.NewBuffer("loss", gpu.F32, 1)).T(t))
			scale := 1 / float64(rows)
			// The logits store (pass 1's logits kept for pass 2) must give bit-identical
			// results: run with it on into separate outputs first, then off (checked below).
			dhS := keep(must(d.UploadFloat32("dh stored", dh0f, rows, hidden)).T(t))
			klS := keep(must(d.NewBuffer("kl stored", gpu.F32, rows)).T(t))
			lossS := keep(must(d.NewBuffer("loss stored", gpu.F32, 1)).T(t))
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.KLLossBackward(r, h, e, idb, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: c.slice}, scale, gpu.KLOptions{LogitsStore: 1 << 30}, dhS, klS, lossS)
			}); err != nil {
				t.Fatal(err)
			}
			if err := d.Run(func(r *gpu.Recorder) error {
				return gpu.KLLossBackward(r, h, e, idb, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: c.slice}, scale, gpu.KLOptions{LogitsStore: -1}, dh, kl, loss)
			}); err != nil {
				t.Fatal(err)
			}
			for _, pair := range [][2]*gpu.Buffer{{dh, dhS}, {kl, klS}, {loss, lossS}} {
				a, b := must(d.ReadFloat32(pair[0])).T(t), must(d.ReadFloat32(pair[1])).T(t)
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%s[%d]: %g recomputed vs %g stored: the logits store must not change results", pair[0].Label(), i, a[i], b[i])
					}
				}
			}
			logits, abs := refGEMM(hd, rows, hidden, ed, vocab, true)
			wantLoss, wantKL, dl, err := host.KLLoss(logits, rows, vocab, ids, pd, k)
			if err != nil {
				t.Fatal(err)
			}
			slice := c.slice
			if slice == 0 || slice > vocab {
				slice = vocab
			}
			nsl := float64((vocab + slice - 1) / slice)
			bKL := make([]float64, rows)
			bDL := make([]float64, rows*vocab)
			var meanAbsKL, meanBKL float64
			for r := 0; r < rows; r++ {
				row := logits[r*vocab : (r+1)*vocab]
				mn, mx, B := row[0], row[0], 0.0
				for v, x := range row {
					mn, mx = math.Min(mn, x), math.Max(mx, x)
					B = math.Max(B, rel(hidden)*abs[r*vocab+v])
				}
				var s float64
				for _, x := range row {
					s += math.Exp(x - mx)
				}
				lse := mx + math.Log(s)
				dlse := B + (20+4*(mx-mn)+float64(slice)/128+2*nsl)*u + 1.0/(1<<21) + 7*u*math.Abs(lse)
				var z float64
				for i := 0; i < k; i++ {
					z += pd[r*k+i]
				}
				q := make([]float64, vocab)
				for i := 0; i < k; i++ {
					qi := pd[r*k+i] / z
					q[ids[r*k+i]] = qi
					if qi > 0 {
						lq := math.Log(qi)
						bKL[r] += qi*(B+dlse+6*u*math.Abs(lq)+1.0/(1<<21)+float64(k+2)*u) +
							float64(k+4)*u*qi*math.Abs(lq-(row[ids[r*k+i]]-lse))
					}
				}
				for v, x := range row {
					ps := math.Exp(x - lse)
					bDL[r*vocab+v] = scale*(ps*(rel(hidden)*abs[r*vocab+v]+dlse+(8+4*math.Abs(x-lse))*u)+q[v]*float64(k+3)*u) +
						u*math.Abs(dl[r*vocab+v])
				}
				meanAbsKL += math.Abs(wantKL[r]) / float64(rows)
				meanBKL += bKL[r] / float64(rows)
			}
			wantDH := make([]float64, rows*hidden)
			bDH := make([]float64, rows*hidden)
			for r := 0; r < rows; r++ {
				for j := 0; j < hidden; j++ {
					var s, a, ea float64
					for v := 0; v < vocab; v++ {
						ev := ed[v*hidden+j]
						s += dl[r*vocab+v] * ev
						a += math.Abs(dl[r*vocab+v] * ev)
						ea += bDL[r*vocab+v] * math.Abs(ev)
					}
					wantDH[r*hidden+j] = dh0[r*hidden+j] + s
					bDH[r*hidden+j] = ea + (float64(slice)+nsl+2)*u*a + u*math.Abs(wantDH[r*hidden+j])
					if coop {
						bDH[r*hidden+j] += (rel(slice) - float64(slice+1)*u) * a
					}
				}
			}
			checkBound(t, "kl", must(d.ReadFloat32(kl)).T(t), wantKL, bKL)
			checkBound(t, "loss", must(d.ReadFloat32(loss)).T(t), []float64{wantLoss},
				[]float64{meanBKL + float64(rows+8)*u*meanAbsKL})
			checkBound(t, "dh", must(d.ReadFloat32(dh)).T(t), wantDH, bDH)
		})
	}
}

// TestKLLossBackwardBadID: an id outside the vocabulary cannot be checked on the host (it
// lives on the GPU); it must make the row's KL (and the loss) NaN, never pass silently.
func TestKLLossBackwardBadID(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(73, 74))
	rows, hidden, vocab, k := 2, 8, 130, 2
	hf, _ := randF32(rng, rows*hidden, 1)
	eb, _ := randF16(rng, vocab*hidden, 1)
	h := must(d.UploadFloat32("h", hf, rows, hidden)).T(t)
	e := must(d.UploadF16("E", eb, vocab, hidden)).T(t)
	ids := must(d.UploadUint32("ids", []uint32{3, 5, 7, 999}, rows, k)).T(t)
	pt := must(d.UploadFloat32("pT", []float32{0.5, 0.5, 0.5, 0.5}, rows, k)).T(t)
	dh := must(d.NewBuffer("dh", gpu.F32, rows, hidden)).T(t)
	kl := must(d.NewBuffer("kl", gpu.F32, rows)).T(t)
	loss := must(d.NewBuffer("loss", gpu.F32, 1)).T(t)
	for _, b := range []*gpu.Buffer{h, e, ids, pt, dh, kl, loss} {
		defer b.Release()
	}
	if err := d.Run(func(r *gpu.Recorder) error {
		return gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 128}, 0.5, gpu.KLOptions{}, dh, kl, loss)
	}); err != nil {
		t.Fatal(err)
	}
	got := must(d.ReadFloat32(kl)).T(t)
	l := must(d.ReadFloat32(loss)).T(t)
	if math.IsNaN(float64(got[0])) || !math.IsNaN(float64(got[1])) || !math.IsNaN(float64(l[0])) {
		t.Errorf("kl = %v, loss = %v: want row 0 finite, row 1 and the loss NaN", got, l)
	}
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"k > vocab": gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: vocab + 1, SliceRows: 128}, 0.5, gpu.KLOptions{}, dh, kl, loss),
		"slice":     gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 100}, 0.5, gpu.KLOptions{}, dh, kl, loss),
		"scale":     gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 128}, math.NaN(), gpu.KLOptions{}, dh, kl, loss),
		"dh is h":   gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 128}, 0.5, gpu.KLOptions{}, h, kl, loss),
		"loss size": gpu.KLLossBackward(r, h, e, ids, pt, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 128}, 0.5, gpu.KLOptions{}, dh, kl, kl),
	})
}
