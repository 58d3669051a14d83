package compress

import (
	"fmt"
	"math"
)

// metric is how one tensor's reconstruction error is weighted by its calibration: not at all
// (s nil: the plain Frobenius norm), by the diagonal weights s_j = √E[x_j²] (floored,
// Calibration.inputWeights), and, where the calibration kept it, by the input's Gram
// C = E[x·xᵀ] (n×n): ‖Δ‖²_C = tr(Δ·C·Δᵀ) = E_x‖Δ·x‖², the output error itself.
type metric struct {
	s    []float64
	gram []float64
	// wsq, when not nil, is the tensor's ‖w‖² in this metric (withWeight), which errors
	// then reuses: every error of one tensor is against its own w.
	wsq *float64
}

// withWeight returns mt holding ‖w‖² in its metric (w row-major m×n), computed once through
// prod: an n×n Gram makes it m·n² multiply-adds, which errors would otherwise repeat for
// every candidate. errors must then be given the same w. Without weights mt is returned.
func (mt metric) withWeight(w []float64, m, n int, prod Products) (metric, error) {
	if mt.s == nil {
		return mt, nil
	}
	ws, err := mt.sq(w, m, n, prod)
	if err != nil {
		return metric{}, err
	}
	mt.wsq = &ws
	return mt, nil
}

// metricFor returns the metric of the weight name (n input features) from c (nil: none).
// Errors: those of Calibration.inputWeights and Calibration.Gram.
func metricFor(c *Calibration, name string, n int) (metric, error) {
	if c == nil {
		return metric{}, nil
	}
	s, err := c.inputWeights(name, n)
	if err != nil {
		return metric{}, err
	}
	g, err := c.Gram(name, n)
	return metric{s: s, gram: g}, err
}

// sq returns the squared weighted norm of the row-major m×n x: Σ_i x_i·C·x_iᵀ with the Gram,
// Σ_ij x_ij²·s_j² with the diagonal weights only, 0 without weights. The product x·C goes
// through prod.
func (mt metric) sq(x []float64, m, n int, prod Products) (float64, error) {
	var sum float64
	switch {
	case mt.gram != nil:
		xc := make([]float64, m*n)
		if err := prod.Mul(xc, x, mt.gram, m, n, n); err != nil {
			return 0, fmt.Errorf("weighted error: %w", err)
		}
		for i, v := range x {
			sum += v * xc[i]
		}
	case mt.s != nil:
		for i, v := range x {
			sum += v * v * mt.s[i%n] * mt.s[i%n]
		}
	}
	return sum, nil
}

// errors returns the relative errors of resid = w − Ŵ (row-major m×n): rel = ‖resid‖_F/‖w‖_F
// and weighted, the same in the metric (0 without weights); a zero denominator gives the
// numerator's root.
func (mt metric) errors(w, resid []float64, m, n int, prod Products) (rel, weighted float64, err error) {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.Sqrt(a)
		}
		return math.Sqrt(max(a, 0) / b)
	}
	var rr, ww float64
	for i, e := range resid {
		rr += e * e
		ww += w[i] * w[i]
	}
	if mt.s == nil {
		return ratio(rr, ww), 0, nil
	}
	rs, err := mt.sq(resid, m, n, prod)
	if err != nil {
		return 0, 0, err
	}
	if mt.wsq != nil {
		return ratio(rr, ww), ratio(rs, *mt.wsq), nil
	}
	ws, err := mt.sq(w, m, n, prod)
	if err != nil {
		return 0, 0, err
	}
	return ratio(rr, ww), ratio(rs, ws), nil
}

// regularisedGram returns the Gram shrunk toward its diagonal and made definite:
// C + gramShrink·diag(C) + gramRidge·max_j C_jj·I. The objective tr(ΔCΔᵀ) then also charges
// gramShrink times the diagonal metric ‖Δ·diag(s)‖²: a few thousand calibration tokens
// estimate C poorly along directions they barely visit, and without the shrinkage Ŵ grows
// there unchecked (the plain error rises while the calibration's output error falls). On
// the tiny teacher (8 × 64 held-out tokens) the compressed student's perplexity was 148,
// 128, 114, 123 and 156 at gramShrink 0, 0.01, 0.1, 0.3 and 1, the calibration's output
// error about the same up to 0.3; on 32 × 512 held-out tokens 121 at 0 and 128 at 0.1 (the
// small evaluation is noisy). The shrinkage matters where tokens are few per feature. The
// ridge keeps a feature the calibration never saw active at a small weight, as the floor
// of the diagonal weights does.
func (mt metric) regularisedGram(n int) []float64 {
	c := append([]float64(nil), mt.gram...)
	var mx float64
	for j := 0; j < n; j++ {
		mx = max(mx, c[j*n+j])
	}
	for j := 0; j < n; j++ {
		c[j*n+j] += gramShrink*c[j*n+j] + gramRidge*mx
	}
	return c
}

// gramShrink is the weight of the diagonal added to the Gram (regularisedGram).
const gramShrink = 0.1

// gramRidge is the ridge of regularisedGram relative to the largest E[x_j²]: weightFloor².
const gramRidge = weightFloor * weightFloor
