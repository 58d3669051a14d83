package nvgkit

import (
	"fmt"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/gpu"
)

// trainable is one trained vector of a Student net: a norm gain or one scale vector (h, ℓ or
// g) of one path of a BLR projection.
type trainable struct {
	name  string      // HF gain name, or arch.MetricName(tensor, path, scale)
	param *gpu.Buffer // F32 [n]: owned by the layer's param, the BLR layer or the net
	grad  *gpu.Buffer // F32 [n], owned by the student state
	m, v  *gpu.Buffer // Adam's moments, F32 [n], owned by the student state
	live  *gpu.Buffer // U32 [n] rank mask (ℓ of a padded BLR layer), or nil
	// metric is true for BLR scales (relative Adam steps), false for norm gains.
	metric bool
	shape  []int // the gain's HF shape (metric: [n])
}

// studentState holds what a Student net adds to a Teacher's weights.
type studentState struct {
	trainables []*trainable
	byName     map[string]*trainable
	byParam    map[*gpu.Buffer]*trainable // a gain's trainable by its weight buffer
	blrs       []*linear                  // every BLR projection, in load order (Export)
	blrLayers  []*gpu.BLRLayer
	owned      []*gpu.Buffer
	gss        *gpu.Buffer // F32 [1]: GradSumSquares scratch
	// arenas hold every trainable's param, grad and moments packed (gpu.NewAdamArena), so
	// ZeroGrads, the gradient norm, clipping and Adam take a few dispatches, not a few per
	// trainable; the trainables' buffers are views into them.
	arenas []*gpu.AdamArena
	// signs is the sign-learning state (signs.go), allocated with the state, on after EnableSigns.
	signs *signNet
	// ss is Σ g² over the gradients when ssValid (gradSumSquares); whatever changes the
	// gradients clears ssValid.
	ss      float64
	ssValid bool
}

func (s *studentState) release() {
	if s == nil {
		return
	}
	s.releaseCaptures()
	for _, b := range s.owned {
		b.Release()
	}
	for _, l := range s.blrLayers {
		l.Release()
	}
	for _, a := range s.arenas {
		a.Release()
	}
	s.owned, s.blrLayers, s.arenas = nil, nil, nil
}

// blrBytes is the GPU bytes of a BLR layer's scales, sign bits and mask.
func blrBytes(l *gpu.BLRLayer) uint64 {
	var n uint64
	for _, p := range l.Paths {
		for _, b := range []*gpu.Buffer{p.H, p.G, p.L, p.U, p.V} {
			if b != nil {
				n += b.Bytes()
			}
		}
	}
	if l.Live != nil {
		n += l.Live.Bytes()
	}
	return n
}

// newBuf allocates a zeroed F32 buffer owned by the student state.
func (n *Net) newBuf(label string, size int) (*gpu.Buffer, error) {
	b, err := n.dev.NewBuffer(label, gpu.F32, size)
	if err != nil {
		return nil, err
	}
	n.st.owned = append(n.st.owned, b)
	return b, nil
}

// addTrainable registers param (F32 [size]) under name with zeroed gradient and moments.
func (n *Net) addTrainable(name string, param, live *gpu.Buffer, metric bool, shape []int) error {
	size := param.Len()
	t := &trainable{name: name, param: param, live: live, metric: metric, shape: shape}
	var err error
	if t.grad, err = n.newBuf(name+".grad", size); err != nil {
		return err
	}
	if t.m, err = n.newBuf(name+".adam_m", size); err != nil {
		return err
	}
	if t.v, err = n.newBuf(name+".adam_v", size); err != nil {
		return err
	}
	if _, dup := n.st.byName[name]; dup {
		return fmt.Errorf("trainable %s registered twice", name)
	}
	n.st.trainables = append(n.st.trainables, t)
	n.st.byName[name] = t
	if !metric {
		n.st.byParam[param] = t
	}
	return nil
}

// studentLinear makes projection t of a Student: a BLR layer from the source (src.BLR)
// becomes a linear with gradient buffers and trainables (arch.MetricName per path and scale;
// ℓ masked past the live ranks); a projection the source keeps dense a frozen f16 plane (as a
// Teacher's).
func (b *builder) studentLinear(t arch.Tensor) linear {
	if b.err != nil {
		return linear{}
	}
	bl, live, err := b.src.BLR(t)
	if err != nil {
		b.err = err
		return linear{}
	}
	if bl == nil {
		return b.dense(t)
	}
	n, L := b.n, b.L
	n.st.blrLayers = append(n.st.blrLayers, bl) // released with the net, even half-built
	L.blrs = append(L.blrs, bl)
	l := &linear{blr: bl, name: t.Name, out: t.Shape[0], in: t.Shape[1], signs: &blrSigns{net: n.st.signs}, layer: L.index, liveRank: live}
	for p, q := range bl.Paths {
		var g gpu.BLRGrad
		for _, s := range []struct {
			key   string
			param *gpu.Buffer
			live  *gpu.Buffer
			dst   **gpu.Buffer
		}{{arch.ScaleH, q.H, nil, &g.H}, {arch.ScaleL, q.L, bl.Live, &g.L}, {arch.ScaleG, q.G, nil, &g.G}} {
			tn := arch.MetricName(t.Name, p, s.key)
			if err := n.addTrainable(tn, s.param, s.live, true, []int{s.param.Len()}); err != nil {
				b.err = err
				return linear{}
			}
			*s.dst = n.st.byName[tn].grad
		}
		l.grads = append(l.grads, g)
	}
	n.st.blrs = append(n.st.blrs, l)
	return *l
}

// finishStudent allocates the gradient-norm scratch and packs the trainables into arenas
// (each within one storage binding; gpu.NewAdamArena), after every addTrainable.
func (n *Net) finishStudent() error {
	var err error
	if n.st.gss, err = n.newBuf("student.gradSumSquares", 1); err != nil {
		return err
	}
	limit := n.dev.Info().MaxStorageBindingSize
	ts := n.st.trainables
	for len(ts) > 0 {
		// The longest prefix whose arena fits one binding (at least one trainable).
		k, sizes := 0, []uint64{}
		for k < len(ts) {
			sizes = append(sizes, ts[k].param.Bytes())
			if _, total := n.dev.PackLayout(sizes); total > limit && k > 0 {
				break
			}
			k++
		}
		group := ts[:k]
		ts = ts[k:]
		col := func(f func(*trainable) *gpu.Buffer) []*gpu.Buffer {
			out := make([]*gpu.Buffer, len(group))
			for i, t := range group {
				out[i] = f(t)
			}
			return out
		}
		rel := make([]bool, len(group))
		for i, t := range group {
			rel[i] = t.metric
		}
		a, err := gpu.NewAdamArena(n.dev, fmt.Sprintf("student.trainables%d", len(n.st.arenas)),
			col(func(t *trainable) *gpu.Buffer { return t.param }), col(func(t *trainable) *gpu.Buffer { return t.grad }),
			col(func(t *trainable) *gpu.Buffer { return t.m }), col(func(t *trainable) *gpu.Buffer { return t.v }),
			col(func(t *trainable) *gpu.Buffer { return t.live }), rel)
		if err != nil {
			return memRemedy(err)
		}
		n.st.arenas = append(n.st.arenas, a)
	}
	return nil
}

// gainGrad returns the gradient buffer of the gain whose weight buffer is w.
func (n *Net) gainGrad(w *gpu.Buffer) *gpu.Buffer { return n.st.byParam[w].grad }

// Trainables returns the names of a Student's trained vectors in a fixed order (load order:
// per layer the norm gains and the h, ℓ, g of each path of each BLR projection, then
// "model.norm.weight"): gains by their HF tensor name, metric scales as arch.MetricName
// ("<tensor>.p<i>.h|l|g"; arch.Config.TrainableNames lists the same set in checkpoint
// order). nil for a Teacher.
func (n *Net) Trainables() []string {
	if n == nil || n.st == nil {
		return nil
	}
	out := make([]string, len(n.st.trainables))
	for i, t := range n.st.trainables {
		out[i] = t.name
	}
	return out
}

// TrainableCount is the number of trained values of a Student (every element of every
// trainable vector, live or masked); 0 for a Teacher.
func (n *Net) TrainableCount() int {
	if n == nil || n.st == nil {
		return 0
	}
	c := 0
	for _, t := range n.st.trainables {
		c += t.param.Len()
	}
	return c
}

// StateBytes is the GPU bytes a Student holds besides its weights: per trained value one
// gradient, two Adam moments and the 4-byte tag of the packed arenas (gpu.AdamArena), 16
// bytes, plus a 4-byte reduction scratch; 0 for a Teacher. Not counted: the arenas' table
// (16 bytes per trained vector) and alignment gaps (under 4·StorageAlign bytes per vector).
// (The trained values themselves are in WeightBytes.)
func (n *Net) StateBytes() uint64 {
	if n == nil || n.st == nil {
		return 0
	}
	return 16*uint64(n.TrainableCount()) + 4
}

// requireStudent reports whether net is a usable Student.
func (n *Net) requireStudent(op string) error {
	if err := n.usable(op); err != nil {
		return err
	}
	if n.Kind != Student || n.st == nil {
		return fmt.Errorf("nvgkit.%s: the net is a %v; load it with LoadNet(dev, model, nvgkit.Student)", op, n.Kind)
	}
	return nil
}
