package host

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/internal/prng"
)

// BLRSignGrad is the float64 reference of gpu.BLRSignGrad: the straight-through gradients
// of L = Σ dy ⊙ w.Apply(x) with respect to the signs of every path, the signs treated as
// real values: gu[p] [m·r] = ((dy⊙h)ᵀ·(t1⊙ℓ)) and gv[p] [r·n] = ((dt2⊙ℓ)ᵀ·(x⊙g)) with
// t1 = (x⊙g)·Vᵀ and dt2 = (dy⊙h)·U, row-major in the bit order of U and V. Padded ranks
// (ℓ = 0 beyond live) come out as exactly 0 for V and as h·0 = 0 for U. x [rows, n],
// dy [rows, m]. Errors: an invalid weight, rows < 1, slice lengths.
func BLRSignGrad(w *cmf.BLRWeight, x []float64, rows int, dy []float64) (gu, gv [][]float64, err error) {
	if err := w.Validate(); err != nil {
		return nil, nil, fmt.Errorf("host.BLRSignGrad: %w", err)
	}
	if rows <= 0 {
		return nil, nil, fmt.Errorf("host.BLRSignGrad: rows = %d must be positive", rows)
	}
	m, n, r := w.M, w.N, w.Rank
	if err := checkLen("BLRSignGrad", "x", x, rows*n, "rows·n"); err != nil {
		return nil, nil, err
	}
	if err := checkLen("BLRSignGrad", "dy", dy, rows*m, "rows·m"); err != nil {
		return nil, nil, err
	}
	for p := range w.Paths {
		q := &w.Paths[p]
		U := signsF64(q.U, m, r)
		V := signsF64(q.V, r, n)
		t1 := make([]float64, rows*r)
		dt2 := make([]float64, rows*r)
		for i := 0; i < rows; i++ {
			for k := 0; k < r; k++ {
				var s, d float64
				for j := 0; j < n; j++ {
					s += x[i*n+j] * float64(q.G[j]) * V[k*n+j]
				}
				for o := 0; o < m; o++ {
					d += dy[i*m+o] * float64(q.H[o]) * U[o*r+k]
				}
				t1[i*r+k], dt2[i*r+k] = s, d
			}
		}
		u := make([]float64, m*r)
		v := make([]float64, r*n)
		for i := 0; i < rows; i++ {
			for o := 0; o < m; o++ {
				a := dy[i*m+o] * float64(q.H[o])
				for k := 0; k < r; k++ {
					u[o*r+k] += a * t1[i*r+k] * float64(q.L[k])
				}
			}
			for k := 0; k < r; k++ {
				a := dt2[i*r+k] * float64(q.L[k])
				for j := 0; j < n; j++ {
					v[k*n+j] += a * x[i*n+j] * float64(q.G[j])
				}
			}
		}
		gu, gv = append(gu, u), append(gv, v)
	}
	return gu, gv, nil
}

// SignHash is lowbias32 (prng.Hash), the integer hash of sign_score_update.wgsl.
func SignHash(x uint32) uint32 { return prng.Hash(x) }

// SignUniform is the stochastic-rounding offset of sign e of matrix matrix at step step
// under seed seed, in [0, 1) with 24 bits, as gpu.SignScoreUpdate draws it.
func SignUniform(seed, step, matrix, e uint32) float32 {
	h := SignHash(SignHash(SignHash(SignHash(seed)^step)^matrix) ^ e)
	return float32(h>>8) * (1.0 / 16777216)
}

// SignLive reports whether sign e of a rows×cols sign matrix is live given live ranks
// (rank index e % cols when rankCols, for U; e / cols otherwise, for V).
func SignLive(e, cols int, rankCols bool, live int) bool {
	if rankCols {
		return e%cols < live
	}
	return e/cols < live
}

// SignScoreUpdate is the reference of gpu.SignScoreUpdate on one sign matrix of
// len(scores) signs (bits: its packed payload bits, 1 ↦ +1; g its sign gradient, f32 as the
// GPU holds it), computed in float32 operation by operation like the kernel; scores is
// updated in place. Padded signs (SignLive false) get 0. The kernel may contract a
// multiply-add, so an element may differ from the GPU by 1 where v + u lands within an
// f32 rounding of an integer.
func SignScoreUpdate(bits []byte, scores []int8, g []float32, cols int, rankCols bool, live int, alpha, beta float32, seed, step, matrix uint32) {
	var ss float32
	for _, v := range g {
		ss = float32(float64(v)*float64(v) + float64(ss))
	}
	sigma := float32(math.Sqrt(float64(ss / float32(len(g)))))
	var scale float32
	if sigma > 0 && sigma <= 3e38 {
		scale = alpha / sigma
	}
	for e := range scores {
		if !SignLive(e, cols, rankCols, live) {
			scores[e] = 0
			continue
		}
		b := float32(-1)
		if bits[e>>3]>>(e&7)&1 != 0 {
			b = 1
		}
		push := (g[e] * b) * scale
		if !(math.Abs(float64(push)) <= 1e30) {
			push = 0
		}
		v := beta*float32(scores[e]) + push
		q := math.Floor(float64(v + SignUniform(seed, step, matrix, uint32(e))))
		scores[e] = int8(math.Max(-127, math.Min(127, q)))
	}
}

// SignFlip is the reference of gpu.SignFlip: the live signs whose scores are ≥ the cutoff
// (the lowest score value v ≥ tau such that the signs scoring ≥ v number ≤ budget) flip;
// of the next score value ≥ tau present (the boundary), the signs in the first index buckets
// of ceil(len/4096) signs whose counts fit the budget left flip too. Flipped signs have
// their bit XORed and their score reset to 0; it returns the number of flips.
func SignFlip(bits []byte, scores []int8, cols int, rankCols bool, live, tau, budget int) int {
	var hist [128]int
	for e, s := range scores {
		if int(s) >= tau && SignLive(e, cols, rankCols, live) {
			hist[s]++
		}
	}
	cut, total, boundary := 128, 0, 0
	for b := 127; b >= tau; b-- {
		if hist[b] == 0 {
			continue
		}
		if total+hist[b] > budget {
			boundary = b
			break
		}
		total += hist[b]
		cut = b
	}
	bsize := (len(scores) + 4095) / 4096
	bcut := 0
	if boundary != 0 {
		buckets := make([]int, (len(scores)+bsize-1)/bsize)
		for e, s := range scores {
			if int(s) == boundary && SignLive(e, cols, rankCols, live) {
				buckets[e/bsize]++
			}
		}
		left := budget - total
		for bcut < len(buckets) && buckets[bcut] <= left {
			left -= buckets[bcut]
			total += buckets[bcut]
			bcut++
		}
	}
	for e, s := range scores {
		if (int(s) >= cut || (boundary != 0 && int(s) == boundary && e/bsize < bcut)) && SignLive(e, cols, rankCols, live) {
			bits[e>>3] ^= 1 << (e & 7)
			scores[e] = 0
		}
	}
	return total
}
