package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestTargetLogits compares out[r] = h[r]·E[ids[r]] with the float64 dot product of the same
// (f32 h, f16 or f32 E) values. Bound per row: each product is exact in f32 up to u, the 64
// strided partial sums of ≤ ⌈n/64⌉ terms and the 6-level tree add ≤ (⌈n/64⌉ + 6)·u, all
// relative to Σ|h_c·E_c|; checked as (⌈n/64⌉ + 8)·u·Σ|h_c·E_c|. Sizes are awkward (hidden
// not a multiple of 64 or of 2, so f16 pairs straddle rows), ids include 0 and vocab−1; the
// cases with slice > 0 read E in 128-row slices as a head beyond one binding would be.
func TestTargetLogits(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(41, 42))
	for _, tc := range []struct {
		rows, hidden, vocab int
		f16                 bool
		slice               int
	}{{37, 77, 301, true, 0}, {37, 77, 301, true, 128}, {5, 256, 1000, false, 0}, {200, 33, 1000, false, 256},
		{130, 33, 17, true, 0}, {1, 1, 3, true, 0}} {
		restore := gpu.SetTargetLogitsSliceRows(tc.slice)
		hf, hd := randF32(rng, tc.rows*tc.hidden, 2)
		var e *gpu.Buffer
		var ed []float64
		if tc.f16 {
			var eb []uint16
			eb, ed = randF16(rng, tc.vocab*tc.hidden, 1)
			e = must(d.UploadF16("E", eb, tc.vocab, tc.hidden)).T(t)
		} else {
			var ef []float32
			ef, ed = randF32(rng, tc.vocab*tc.hidden, 1)
			e = must(d.UploadFloat32("E", ef, tc.vocab, tc.hidden)).T(t)
		}
		ids := make([]int, tc.rows)
		for i := range ids {
			ids[i] = rng.IntN(tc.vocab)
		}
		ids[0] = tc.vocab - 1
		if tc.rows > 1 {
			ids[1] = 0
		}
		h := must(d.UploadFloat32("h", hf, tc.rows, tc.hidden)).T(t)
		out := must(d.NewBuffer("out", gpu.F32, tc.rows)).T(t)
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.TargetLogits(r, h, e, ids, out) }); err != nil {
			t.Fatal(err)
		}
		got := must(d.ReadFloat32(out)).T(t)
		var worst float64
		for r, id := range ids {
			var want, mag float64
			for c := 0; c < tc.hidden; c++ {
				p := hd[r*tc.hidden+c] * ed[id*tc.hidden+c]
				want += p
				mag += math.Abs(p)
			}
			tol := float64((tc.hidden+63)/64+8) * u32 * mag
			err := math.Abs(float64(got[r]) - want)
			if !(err <= tol) {
				t.Errorf("%+v: row %d (id %d): got %g, want %g (|err| %.3g > %.3g)", tc, r, id, got[r], want, err, tol)
			}
			worst = math.Max(worst, err)
		}
		t.Logf("%+v: max |err| %.3g", tc, worst)

		r := d.Begin()
		if err := gpu.TargetLogits(r, h, e, append(append([]int{}, ids[:len(ids)-1]...), tc.vocab), out); err == nil {
			t.Error("id = vocab accepted")
		}
		if err := gpu.TargetLogits(r, h, e, append(append([]int{}, ids[:len(ids)-1]...), -1), out); err == nil {
			t.Error("negative id accepted")
		}
		if err := gpu.TargetLogits(r, h, e, append(ids, 0), out); err == nil {
			t.Error("more ids than rows accepted")
		}
		if err := gpu.TargetLogits(r, h, e, nil, out); err == nil {
			t.Error("no ids accepted")
		}
		if err := gpu.TargetLogits(r, h, h, ids, out); err == nil {
			t.Error("h as E (1-D shape mismatch / aliasing) accepted")
		}
		if r.Len() != 0 {
			t.Errorf("%d dispatches recorded by failing calls", r.Len())
		}
		r.Discard()
		for _, b := range []*gpu.Buffer{h, e, out} {
			b.Release()
		}
		restore()
	}
}
