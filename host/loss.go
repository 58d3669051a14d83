package host

import (
	"fmt"
	"math"
)

// KLLoss is the distillation loss of a block of rows (DESIGN.md §6): the mean over the rows
// of KL(p_T ‖ p_S), where p_T is the teacher's top-k distribution renormalised over its k
// entries and p_S the student's full-vocabulary softmax read at the teacher's ids:
//
//	KL_r = Σ_k p_T[r,k]·(log p_T[r,k] − log p_S[r, id_{r,k}]),   loss = (1/rows)·Σ_r KL_r,
//
// with 0·log 0 = 0, and its gradient with respect to the logits,
//
//	dlogits[r, v] = (1/rows)·(p_S[r, v]·Σ_k p_T[r,k] − Σ_{k: id_{r,k} = v} p_T[r,k])
//	              = (1/rows)·(p_S[r, v] − p_T[r, v])   (p_T is zero off the top-k ids).
//
// logits is [rows, vocab] row-major; topkIDs [rows, k] holds distinct ids in [0, vocab) per
// row and topkProb [rows, k] non-negative finite teacher probabilities with a positive sum
// per row (they are renormalised here, so raw or already-normalised top-k probs give the
// same result). It returns the loss, the per-row KL [rows] and dlogits [rows, vocab].
// Net.StudentLossGrad applies the same computation a block of rows at a time.
// Errors: non-positive sizes, k > vocab, lengths that disagree, or a bad teacher row (an id
// out of range or repeated, a negative or non-finite probability, a zero sum), named by row.
func KLLoss(logits []float64, rows, vocab int, topkIDs []int, topkProb []float64, k int) (loss float64, perToken, dlogits []float64, err error) {
	if err := checkPos("KLLoss", "rows, vocab, k", rows, vocab, k); err != nil {
		return 0, nil, nil, err
	}
	if err := checkLen("KLLoss", "logits", logits, rows*vocab, "rows·vocab"); err != nil {
		return 0, nil, nil, err
	}
	pT, err := teacherTopK("KLLoss", topkIDs, topkProb, rows, vocab, k)
	if err != nil {
		return 0, nil, nil, err
	}
	perToken = make([]float64, rows)
	dlogits = make([]float64, rows*vocab)
	klRows(logits, rows, vocab, topkIDs, pT, k, 1/float64(rows), perToken, dlogits)
	for _, v := range perToken {
		loss += v
	}
	return loss / float64(rows), perToken, dlogits, nil
}

// teacherTopK validates the teacher's top-k rows and returns the probabilities
// renormalised per row.
func teacherTopK(op string, ids []int, prob []float64, rows, vocab, k int) ([]float64, error) {
	if k > vocab {
		return nil, fmt.Errorf("host.%s: k = %d exceeds the vocabulary %d", op, k, vocab)
	}
	if len(ids) != rows*k {
		return nil, fmt.Errorf("host.%s: topkIDs has %d values, want rows·k = %d·%d = %d", op, len(ids), rows, k, rows*k)
	}
	if err := checkLen(op, "topkProb", prob, rows*k, "rows·k"); err != nil {
		return nil, err
	}
	pT := make([]float64, rows*k)
	for r := 0; r < rows; r++ {
		var sum float64
		for i := 0; i < k; i++ {
			id, p := ids[r*k+i], prob[r*k+i]
			if id < 0 || id >= vocab {
				return nil, fmt.Errorf("host.%s: teacher id [%d, %d] = %d is outside [0, %d)", op, r, i, id, vocab)
			}
			for j := 0; j < i; j++ {
				if ids[r*k+j] == id {
					return nil, fmt.Errorf("host.%s: teacher id %d appears twice in row %d (entries %d and %d)", op, id, r, j, i)
				}
			}
			if !(p >= 0) || math.IsInf(p, 0) {
				return nil, fmt.Errorf("host.%s: teacher probability [%d, %d] = %g is not finite and ≥ 0", op, r, i, p)
			}
			sum += p
		}
		if !(sum > 0) || math.IsInf(sum, 0) {
			return nil, fmt.Errorf("host.%s: teacher probabilities of row %d sum to %g, want a positive finite sum", op, r, sum)
		}
		for i := 0; i < k; i++ {
			pT[r*k+i] = prob[r*k+i] / sum
		}
	}
	return pT, nil
}

// klRows computes, for nr rows of logits [nr, vocab], each row's KL into kl[:nr] and
// gscale·(p_S − p_T) into dl [nr, vocab] (pT normalised per row, ids checked).
func klRows(logits []float64, nr, vocab int, ids []int, pT []float64, k int, gscale float64, kl, dl []float64) {
	parallelFor(nr, func(r int) {
		x := logits[r*vocab : (r+1)*vocab]
		m, ls := maxLogSum(x)
		d := dl[r*vocab : (r+1)*vocab]
		for v, xv := range x {
			d[v] = gscale * math.Exp((xv-m)-ls)
		}
		var s float64
		for i := 0; i < k; i++ {
			p, id := pT[r*k+i], ids[r*k+i]
			d[id] -= gscale * p
			if p > 0 {
				s += p * (math.Log(p) - ((x[id] - m) - ls))
			}
		}
		kl[r] = s
	})
}

// HiddenLossEps is the ε of HiddenLoss's denominators (gpu.HiddenLossEps is the same value).
const HiddenLossEps = 1e-6

// HiddenLoss is the per-token hidden-state loss of one layer's output (DESIGN.md §6
// "Hidden-state loss"), the reference of gpu.HiddenLoss: for each row r of the student's
// hidden state hs and the teacher's ht (both [rows, n] row-major), with s = hs[r, :],
// t = ht[r, :] and ε = HiddenLossEps,
//
//	normalised MSE (cosine false):  e_r = ‖s − t‖² / (‖t‖² + ε),
//	                                ∂e_r/∂s = 2·(s − t) / (‖t‖² + ε)
//	cosine (cosine true):           e_r = 1 − ⟨s, t⟩ / (n_s·n_t),  n_s = √(‖s‖² + ε), n_t = √(‖t‖² + ε),
//	                                ∂e_r/∂s = cos·s / n_s² − t / (n_s·n_t),  cos = ⟨s, t⟩ / (n_s·n_t)
//
// It returns e [rows] and ∂e/∂hs [rows, n] (unscaled: a loss that weights or averages the
// rows scales both). Errors: non-positive sizes, lengths that disagree.
func HiddenLoss(hs, ht []float64, rows, n int, cosine bool) (loss, dhs []float64, err error) {
	const op = "HiddenLoss"
	if err := checkPos(op, "rows, n", rows, n); err != nil {
		return nil, nil, err
	}
	if err := checkLens(op, lenCheck{"hs", hs, rows * n, "rows·n"}, lenCheck{"ht", ht, rows * n, "rows·n"}); err != nil {
		return nil, nil, err
	}
	loss, dhs = make([]float64, rows), make([]float64, rows*n)
	for r := range rows {
		s, t, g := hs[r*n:(r+1)*n], ht[r*n:(r+1)*n], dhs[r*n:(r+1)*n]
		var d2, t2, s2, st float64
		for c := range n {
			d := s[c] - t[c]
			d2 += d * d
			t2 += t[c] * t[c]
			s2 += s[c] * s[c]
			st += s[c] * t[c]
		}
		if cosine {
			ns, nt := math.Sqrt(s2+HiddenLossEps), math.Sqrt(t2+HiddenLossEps)
			cs := st / (ns * nt)
			loss[r] = 1 - cs
			for c := range n {
				g[c] = cs*s[c]/(ns*ns) - t[c]/(ns*nt)
			}
			continue
		}
		den := t2 + HiddenLossEps
		loss[r] = d2 / den
		for c := range n {
			g[c] = 2 * (s[c] - t[c]) / den
		}
	}
	return loss, dhs, nil
}
