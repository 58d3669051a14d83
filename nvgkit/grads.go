package nvgkit

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"

	"github.com/nvg-project/nvg/gpu"
)

// gradSumSquares returns Σ g² over every gradient buffer of a Student (f32 on the GPU,
// gpu.GradSumSquares over each gradient arena, one submit and a readback), as float64. The
// value is kept until the gradients change (Step, ZeroGrads, ClipGrads's scaling), so the
// trainer's GradNorm after Step costs no second pass over the gradients.
func (n *Net) gradSumSquares() (float64, error) {
	if n.st.ssValid {
		return n.st.ss, nil
	}
	err := n.dev.Run(func(r *gpu.Recorder) error {
		if err := gpu.Zero(r, n.st.gss); err != nil {
			return err
		}
		for _, a := range n.st.arenas {
			if err := gpu.GradSumSquares(r, a.Grad, n.st.gss); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	v, err := n.dev.ReadFloat32(n.st.gss)
	if err != nil {
		return 0, err
	}
	n.st.ss, n.st.ssValid = float64(v[0]), true
	return n.st.ss, nil
}

// ZeroGrads sets every gradient buffer of a Student (each BLR path's h, ℓ, g and every norm
// gain) to zero, in one submit (one Zero per gradient arena): Step accumulates into them.
// Errors: a nil, released or Teacher net; a GPU error.
func ZeroGrads(net *Net) error {
	if err := net.requireStudent("ZeroGrads"); err != nil {
		return err
	}
	net.st.ssValid = false
	return net.dev.Run(func(r *gpu.Recorder) error {
		for _, a := range net.st.arenas {
			if err := gpu.Zero(r, a.Grad); err != nil {
				return fmt.Errorf("nvgkit.ZeroGrads: %w", err)
			}
		}
		return nil
	})
}

// GradNorm returns the global L2 norm sqrt(Σ g²) over every gradient of a Student (every
// element of every trainable's gradient buffer; masked rank padding holds exact zeros),
// summed in f32 on the GPU (gpu.GradSumSquares) and rooted in float64. +Inf or NaN when a
// gradient is not finite or the f32 sum overflows. Errors: a nil, released or Teacher net;
// a GPU error.
func GradNorm(net *Net) (float64, error) {
	if err := net.requireStudent("GradNorm"); err != nil {
		return 0, err
	}
	ss, err := net.gradSumSquares()
	if err != nil {
		return 0, fmt.Errorf("nvgkit.GradNorm: %w", err)
	}
	return math.Sqrt(ss), nil
}

// ClipGrads computes the global gradient norm (GradNorm) and, when it is above maxNorm,
// scales every gradient by maxNorm/norm (gpu.GradScale, f32), so the norm becomes maxNorm.
// It returns the norm before clipping. A non-finite norm is returned as is and nothing is
// scaled (the caller skips such a step: StepStats.Finite). Errors: maxNorm not finite and
// > 0; a nil, released or Teacher net; a GPU error.
func ClipGrads(net *Net, maxNorm float64) (norm float64, err error) {
	if !(maxNorm > 0) || math.IsInf(maxNorm, 0) {
		return 0, fmt.Errorf("nvgkit.ClipGrads: maxNorm = %g must be finite and > 0", maxNorm)
	}
	if err := net.requireStudent("ClipGrads"); err != nil {
		return 0, err
	}
	if norm, err = GradNorm(net); err != nil {
		return 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) || norm <= maxNorm {
		return norm, nil
	}
	s := maxNorm / norm
	net.st.ssValid = false
	err = net.dev.Run(func(r *gpu.Recorder) error {
		for _, a := range net.st.arenas {
			if err := gpu.GradScale(r, a.Grad, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return norm, fmt.Errorf("nvgkit.ClipGrads: %w", err)
	}
	return norm, nil
}

// readAll reads one buffer of every trainable (sel picks it) into a map by trainable name.
func (n *Net) readAll(op string, sel func(*trainable) *gpu.Buffer) (map[string][]float32, error) {
	if err := n.requireStudent(op); err != nil {
		return nil, err
	}
	out := make(map[string][]float32, len(n.st.trainables))
	for _, t := range n.st.trainables {
		v, err := n.dev.ReadFloat32(sel(t))
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		out[t.name] = v
	}
	return out, nil
}

// Params returns a host copy of every trained vector of a Student, by name: each RMSNorm gain
// by its HF tensor name (the stored w; the zero-centred norms apply 1 + w), each BLR metric
// scale as arch.MetricName(tensor, path, scale) ([m], [r], [n], f32). Net.Trainables
// lists the names in order. Errors: a nil, released or Teacher net; a readback error.
func Params(net *Net) (map[string][]float32, error) {
	return net.readAll("Params", func(t *trainable) *gpu.Buffer { return t.param })
}

// Grads returns a host copy of every gradient buffer of a Student (what Step accumulated
// since the last ZeroGrads, after any ClipGrads), keyed as Params — the keys of
// host.StudentGrads.Grads. Errors as Params.
func Grads(net *Net) (map[string][]float32, error) {
	return net.readAll("Grads", func(t *trainable) *gpu.Buffer { return t.grad })
}

var layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)
var blrName = regexp.MustCompile(`\.([A-Za-z0-9_]+)\.weight\.p\d+\.[hlg]$`)
var gainName = regexp.MustCompile(`\.?([A-Za-z0-9_]+)\.weight$`)

// LayerNorms groups vectors named like Grads' or Params' keys by decoder layer and kind (see
// Trainer.LayerGradNorms) and returns their L2 norms (squares summed in float64 in name
// order, so equal inputs give equal bits), for nLayers layers. Names outside
// "model.layers.N." are left out. Errors: a layer index ≥ nLayers, no names matched.
func LayerNorms(vecs map[string][]float32, nLayers int) (layers []int, kinds []string, norms [][]float64, err error) {
	sums := map[string][]float64{}
	names := make([]string, 0, len(vecs))
	for name := range vecs {
		names = append(names, name)
	}
	sort.Strings(names) // the float64 sums in one order: the same bits on every call
	for _, name := range names {
		v := vecs[name]
		m := layerName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		l, _ := strconv.Atoi(m[1])
		if l >= nLayers {
			return nil, nil, nil, fmt.Errorf("nvgkit.LayerNorms: %s: layer %d of %d", name, l, nLayers)
		}
		var kind string
		if b := blrName.FindStringSubmatch(name); b != nil {
			kind = b[1]
		} else if g := gainName.FindStringSubmatch(m[2]); g != nil {
			kind = g[1]
		} else {
			kind = m[2]
		}
		if sums[kind] == nil {
			sums[kind] = make([]float64, nLayers)
			for i := range sums[kind] {
				sums[kind][i] = math.NaN()
			}
		}
		acc := sums[kind][l]
		if math.IsNaN(acc) {
			acc = 0
		}
		for _, x := range v {
			acc += float64(x) * float64(x)
		}
		sums[kind][l] = acc
	}
	if len(sums) == 0 {
		return nil, nil, nil, errors.New("nvgkit.LayerNorms: no per-layer vectors")
	}
	for k := range sums {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		row := sums[k]
		for i := range row {
			row[i] = math.Sqrt(row[i]) // NaN stays NaN
		}
		norms = append(norms, row)
	}
	for i := range nLayers {
		layers = append(layers, i)
	}
	return layers, kinds, norms, nil
}
