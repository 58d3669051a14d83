package compress

import (
	"fmt"
	"math"
	"sort"
)

// Calibration holds what a teacher pass sees of each compressed linear's input x (one row
// per calibration token, n input features): per weight, keyed by its checkpoint tensor name
// ("model.layers.0.mlp.down_proj.weight"), the number of tokens and the per-input-feature sum
// of squares Σ_t x_{t,j}², from which SecondMoment gives E[x_j²]. Projections that share an
// input (q, k, v or in_proj_qkv, in_proj_z, in_proj_b, in_proj_a share the input RMSNorm;
// gate_proj and up_proj the post-attention RMSNorm) each have their own entry with the same
// values. Options.Calibration passes it to the compressor, which weights the reconstruction
// error of InitRefine by diag(s), s_j = √E[x_j²] (DESIGN.md §5).
//
// Fill it with Add (a block of activations, e.g. host.Net.LinearInputs on calibration
// windows of the training split, never the held-out ones) or AddSumSq (a reduction done
// elsewhere, e.g. on the GPU). The zero value is not usable: use NewCalibration. A
// Calibration is not safe for concurrent Add/AddSumSq; reads may run concurrently.
type Calibration struct {
	inputs map[string]*inputMoments
}

// inputMoments are the running sums of one weight's input.
type inputMoments struct {
	tokens int
	sumSq  []float64 // Σ_t x_{t,j}², [n]
}

// NewCalibration returns an empty Calibration.
func NewCalibration() *Calibration {
	return &Calibration{inputs: map[string]*inputMoments{}}
}

// Add accumulates the rows×cols row-major block x of the input of the weight name (cols its
// input features n). Errors, naming the tensor: a nil or zero Calibration, rows or cols < 1,
// len(x) ≠ rows·cols, a non-finite value, or cols different from earlier additions.
func (c *Calibration) Add(name string, x []float64, rows, cols int) error {
	if rows < 1 || cols < 1 || len(x) != rows*cols {
		return fmt.Errorf("calibration %s: %d values for a %d×%d block of inputs", name, len(x), rows, cols)
	}
	sumSq := make([]float64, cols)
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("calibration %s: input (token %d, feature %d) = %g is not finite", name, i/cols, i%cols, v)
		}
		sumSq[i%cols] += v * v
	}
	return c.AddSumSq(name, sumSq, rows)
}

// AddSumSq accumulates the per-feature sums of squares sumSq[j] = Σ_t x_{t,j}² of tokens
// tokens of the input of the weight name (len(sumSq) is its input features n). Errors,
// naming the tensor: a nil or zero Calibration, tokens < 1, an empty sumSq, a negative or
// non-finite entry, or a length different from earlier additions.
func (c *Calibration) AddSumSq(name string, sumSq []float64, tokens int) error {
	if c == nil || c.inputs == nil {
		return fmt.Errorf("calibration %s: nil Calibration (use NewCalibration)", name)
	}
	if tokens < 1 || len(sumSq) == 0 {
		return fmt.Errorf("calibration %s: %d tokens, %d features: want ≥ 1 of each", name, tokens, len(sumSq))
	}
	for j, v := range sumSq {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("calibration %s: sum of squares of feature %d = %g (want finite, ≥ 0)", name, j, v)
		}
	}
	in := c.inputs[name]
	if in == nil {
		c.inputs[name] = &inputMoments{tokens: tokens, sumSq: append([]float64(nil), sumSq...)}
		return nil
	}
	if len(in.sumSq) != len(sumSq) {
		return fmt.Errorf("calibration %s: %d input features, but earlier additions had %d", name, len(sumSq), len(in.sumSq))
	}
	in.tokens += tokens
	for j, v := range sumSq {
		in.sumSq[j] += v
	}
	return nil
}

// Names returns the weights with statistics, sorted.
func (c *Calibration) Names() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.inputs))
	for k := range c.inputs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Tokens returns the number of calibration tokens accumulated for the weight name (0 when
// it has none).
func (c *Calibration) Tokens(name string) int {
	if c == nil || c.inputs[name] == nil {
		return 0
	}
	return c.inputs[name].tokens
}

// SecondMoment returns E[x_j²] = Σ_t x_{t,j}² / tokens of the input of the weight name,
// which must have n input features. Errors, naming the tensor: no statistics for it, or a
// different number of features.
func (c *Calibration) SecondMoment(name string, n int) ([]float64, error) {
	if c == nil || c.inputs[name] == nil {
		return nil, fmt.Errorf("calibration: no input statistics for %s (its input was not seen by the calibration pass)", name)
	}
	in := c.inputs[name]
	if len(in.sumSq) != n {
		return nil, fmt.Errorf("calibration %s: statistics of %d input features, but the weight has n = %d", name, len(in.sumSq), n)
	}
	out := make([]float64, n)
	for j, v := range in.sumSq {
		out[j] = v / float64(in.tokens)
	}
	return out, nil
}

// inputWeights returns the column weights s_j = √E[x_j²] of the weight name (n input
// features), floored at weightFloor·max_j s_j so that a feature the calibration never saw
// active keeps a small weight instead of none (its column of Ŵ stays determined). Errors:
// those of SecondMoment, or every E[x_j²] zero.
func (c *Calibration) inputWeights(name string, n int) ([]float64, error) {
	s, err := c.SecondMoment(name, n)
	if err != nil {
		return nil, err
	}
	var mx float64
	for j, v := range s {
		s[j] = math.Sqrt(v)
		mx = max(mx, s[j])
	}
	if mx == 0 {
		return nil, fmt.Errorf("calibration %s: every input feature has E[x²] = 0 over %d tokens", name, c.inputs[name].tokens)
	}
	for j := range s {
		s[j] = max(s[j], weightFloor*mx)
	}
	return s, nil
}

// weightFloor is the smallest column weight relative to the largest (see inputWeights).
const weightFloor = 1e-3
