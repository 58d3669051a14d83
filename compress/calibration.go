package compress

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Calibration holds what a teacher pass sees of each compressed linear's input x (one row
// per calibration token, n input features), keyed by the checkpoint names of the weights
// that read it ("model.layers.0.mlp.down_proj.weight"): the number of tokens, the
// per-feature sums of squares Σ_t x_{t,j}² (SecondMoment gives E[x_j²]) and, for inputs of
// at most the Calibration's Gram limit of features, the Gram Σ_t x_t·x_tᵀ (Gram gives
// E[x·xᵀ]). Projections that share an input (q, k, v; in_proj_qkv, in_proj_z, in_proj_b,
// in_proj_a; gate_proj and up_proj) are added together, by all their names at once, and
// share one set of statistics. Options.Calibration passes it to the compressor: InitRefine
// minimises the output error E_x‖(W − Ŵ)·x‖² = tr((W − Ŵ)·E[xxᵀ]·(W − Ŵ)ᵀ) where it has
// the Gram, and its diagonal form ‖(W − Ŵ)·diag(s)‖_F², s_j = √E[x_j²], everywhere first
// (DESIGN.md §5).
//
// Fill it with Add (a block of activations, e.g. from host.Net.LinearInputs on calibration
// windows of the training split, never the held-out ones) or AddMoments (reductions done
// elsewhere, e.g. on the GPU). The zero value is not usable: use NewCalibration. A
// Calibration is not safe for concurrent additions; reads may run concurrently.
type Calibration struct {
	gramMax int
	inputs  map[string]*inputMoments // by weight name; the names of a shared input share one
}

// inputMoments are the running sums of one input.
type inputMoments struct {
	names  []string // the weights that read the input, sorted
	tokens int
	sumSq  []float64 // Σ_t x_{t,j}², [n]
	gram   []float64 // Σ_t x_t·x_tᵀ, [n, n] row-major; nil when n > gramMax
}

// NewCalibration returns an empty Calibration that keeps the Gram of every input of at
// most gramMax features (0: none, only the second moments). A Gram costs 8·n² bytes and
// n² multiply-adds per token (n = 1024: 8 MiB; the intermediate size of a large model,
// 17,408: 2.3 GiB).
func NewCalibration(gramMax int) *Calibration {
	return &Calibration{gramMax: max(gramMax, 0), inputs: map[string]*inputMoments{}}
}

// Add accumulates the rows×cols row-major block x (rows tokens, cols input features) of the
// input read by the weights names (at least one). Errors, naming the weights: a nil or zero
// Calibration, no name, rows or cols < 1, len(x) ≠ rows·cols, a non-finite value, or
// names that disagree with earlier additions (another feature count, or another grouping).
func (c *Calibration) Add(x []float64, rows, cols int, names ...string) error {
	if rows < 1 || cols < 1 || len(x) != rows*cols {
		return fmt.Errorf("calibration %s: %d values for a %d×%d block of inputs", strings.Join(names, ", "), len(x), rows, cols)
	}
	sumSq := make([]float64, cols)
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("calibration %s: input (token %d, feature %d) = %g is not finite", strings.Join(names, ", "), i/cols, i%cols, v)
		}
		sumSq[i%cols] += v * v
	}
	var gram []float64
	if cols <= c.gramLimit() {
		gram = make([]float64, cols*cols) // xᵀ·x (Dsyrk fills the upper triangle)
		X := blas64.General{Rows: rows, Cols: cols, Stride: cols, Data: x}
		blas64.Syrk(blas.Trans, 1, X, 0, blas64.Symmetric{Uplo: blas.Upper, N: cols, Stride: cols, Data: gram})
		for a := 0; a < cols; a++ {
			for b := 0; b < a; b++ {
				gram[a*cols+b] = gram[b*cols+a]
			}
			gram[a*cols+a] = sumSq[a] // the same sum, kept bit-identical to the second moments
		}
	}
	return c.AddMoments(sumSq, gram, rows, names...)
}

// GramMax returns the largest number of input features whose Gram c keeps (NewCalibration's
// gramMax; 0 for a nil Calibration): AddMoments wants a Gram exactly for inputs within it.
func (c *Calibration) GramMax() int { return c.gramLimit() }

func (c *Calibration) gramLimit() int {
	if c == nil {
		return 0
	}
	return c.gramMax
}

// AddMoments accumulates reductions of tokens tokens of the input read by the weights names
// (at least one): sumSq[j] = Σ_t x_{t,j}² (n values) and, when n is within the Gram limit,
// gram = Σ_t x_t·x_tᵀ (n×n row-major; nil otherwise). Errors, naming the weights: a nil or
// zero Calibration, no name, tokens < 1, an empty sumSq, a negative or non-finite sum of
// squares, a non-finite or asymmetric Gram or one whose diagonal is not sumSq (relative
// 10⁻⁹), a Gram missing within the limit or given beyond it, or names that disagree with
// earlier additions.
func (c *Calibration) AddMoments(sumSq, gram []float64, tokens int, names ...string) error {
	who := strings.Join(names, ", ")
	if c == nil || c.inputs == nil {
		return fmt.Errorf("calibration %s: nil Calibration (use NewCalibration)", who)
	}
	if len(names) == 0 {
		return fmt.Errorf("calibration: statistics for no weight")
	}
	n := len(sumSq)
	if tokens < 1 || n == 0 {
		return fmt.Errorf("calibration %s: %d tokens, %d features: want ≥ 1 of each", who, tokens, n)
	}
	for j, v := range sumSq {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("calibration %s: sum of squares of feature %d = %g (want finite, ≥ 0)", who, j, v)
		}
	}
	if want := n <= c.gramMax; want != (gram != nil) {
		return fmt.Errorf("calibration %s: %d features with a Gram limit of %d: the Gram must be given exactly when n ≤ the limit (given: %v)", who, n, c.gramMax, gram != nil)
	}
	if gram != nil {
		if len(gram) != n*n {
			return fmt.Errorf("calibration %s: Gram of %d values for %d features", who, len(gram), n)
		}
		for a := 0; a < n; a++ {
			for b := 0; b <= a; b++ {
				v, w := gram[a*n+b], gram[b*n+a]
				if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v-w) > 1e-9*(math.Abs(v)+math.Abs(w)) {
					return fmt.Errorf("calibration %s: Gram entries (%d, %d) = %g and (%d, %d) = %g: want finite and symmetric", who, a, b, v, b, a, w)
				}
			}
			if d := gram[a*n+a]; math.Abs(d-sumSq[a]) > 1e-9*math.Abs(sumSq[a]) {
				return fmt.Errorf("calibration %s: Gram diagonal %d = %g, but the sum of squares is %g", who, a, d, sumSq[a])
			}
		}
	}
	sorted := slices.Clone(names)
	sort.Strings(sorted)
	in := c.inputs[sorted[0]]
	if in == nil {
		for _, name := range sorted {
			if c.inputs[name] != nil {
				return fmt.Errorf("calibration %s: %s was added with %s before", who, name, strings.Join(c.inputs[name].names, ", "))
			}
		}
		in = &inputMoments{names: sorted, sumSq: make([]float64, n)}
		if gram != nil {
			in.gram = make([]float64, n*n)
		}
		for _, name := range sorted {
			c.inputs[name] = in
		}
	}
	if !slices.Equal(in.names, sorted) {
		return fmt.Errorf("calibration %s: these weights were added as %s before", who, strings.Join(in.names, ", "))
	}
	if len(in.sumSq) != n {
		return fmt.Errorf("calibration %s: %d input features, but earlier additions had %d", who, n, len(in.sumSq))
	}
	in.tokens += tokens
	for j, v := range sumSq {
		in.sumSq[j] += v
	}
	for i, v := range gram {
		in.gram[i] += v
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

// moments returns the statistics of the weight name, which must have n input features.
func (c *Calibration) moments(name string, n int) (*inputMoments, error) {
	if c == nil || c.inputs[name] == nil {
		return nil, fmt.Errorf("calibration: no input statistics for %s (its input was not seen by the calibration pass)", name)
	}
	in := c.inputs[name]
	if len(in.sumSq) != n {
		return nil, fmt.Errorf("calibration %s: statistics of %d input features, but the weight has n = %d", name, len(in.sumSq), n)
	}
	return in, nil
}

// SecondMoment returns E[x_j²] = Σ_t x_{t,j}² / tokens of the input of the weight name,
// which must have n input features. Errors, naming the tensor: no statistics for it, or a
// different number of features.
func (c *Calibration) SecondMoment(name string, n int) ([]float64, error) {
	in, err := c.moments(name, n)
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for j, v := range in.sumSq {
		out[j] = v / float64(in.tokens)
	}
	return out, nil
}

// Gram returns E[x·xᵀ] = Σ_t x_t·x_tᵀ / tokens (n×n row-major) of the input of the weight
// name, or nil when the input has more features than the Gram limit. Errors as SecondMoment.
func (c *Calibration) Gram(name string, n int) ([]float64, error) {
	in, err := c.moments(name, n)
	if err != nil || in.gram == nil {
		return nil, err
	}
	out := make([]float64, n*n)
	for i, v := range in.gram {
		out[i] = v / float64(in.tokens)
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
