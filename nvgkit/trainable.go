package nvgkit

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/nvg-project/nvg/gpu"
)

// This file holds the exported accessors the training layer (package nvgkit/train: Trainer,
// checkpoints, the in-process Lab) needs on a Net's state, so that it lives outside nvgkit
// without reaching into unexported fields.

// Usable reports whether n can be used by the operation op (the error names it as
// "nvgkit.<op>"). Errors: a nil or released net.
func (n *Net) Usable(op string) error { return n.usable(op) }

// RequireStudent reports whether n is a usable Student net (the error names op as
// "nvgkit.<op>"). Errors: a nil, released or Teacher net.
func (n *Net) RequireStudent(op string) error { return n.requireStudent(op) }

// CheckK reports whether k is a valid top-k size for a vocabulary of vocab tokens: 1 ≤ k ≤
// min(gpu.MaxTopK, vocab). The error names op as "nvgkit.<op>".
func CheckK(op string, k, vocab int) error { return checkK(op, k, vocab) }

// trainableByName returns a Student's named trainable. Errors: a nil, released or Teacher
// net; an unknown name.
func (n *Net) trainableByName(op, name string) (*trainable, error) {
	if err := n.requireStudent(op); err != nil {
		return nil, err
	}
	t := n.st.byName[name]
	if t == nil {
		return nil, fmt.Errorf("nvgkit.%s: no trainable %q (Trainables lists them)", op, name)
	}
	return t, nil
}

// HasTrainable reports whether n is a usable Student with a trainable of that name (one of
// Trainables).
func (n *Net) HasTrainable(name string) bool {
	return n.requireStudent("HasTrainable") == nil && n.st.byName[name] != nil
}

// TrainableLen returns the number of f32 values of the named trainable of a Student.
// Errors: a nil, released or Teacher net; an unknown name.
func (n *Net) TrainableLen(name string) (int, error) {
	t, err := n.trainableByName("TrainableLen", name)
	if err != nil {
		return 0, err
	}
	return t.param.Len(), nil
}

// MaxMetricScale is the largest magnitude a BLR metric scale (h, ℓ, g) may hold: IEEE
// binary16's largest finite value. The scales are stored as f16 in a student's .cmf (Export,
// RoundMetricF16) and the tensor-core GEMMs round their A operands (x⊙g, t1⊙ℓ) to f16, so a
// larger scale, finite in f32, becomes ±Inf there.
const MaxMetricScale = 65504

// TrainableLimit returns the largest magnitude the named trainable of a Student may hold:
// MaxMetricScale for a BLR metric scale, math.MaxFloat32 for an RMSNorm gain (f32 on the GPU
// and in the .cmf). Errors: a nil, released or Teacher net; an unknown name.
func (n *Net) TrainableLimit(name string) (float64, error) {
	t, err := n.trainableByName("TrainableLimit", name)
	if err != nil {
		return 0, err
	}
	if t.metric {
		return MaxMetricScale, nil
	}
	return math.MaxFloat32, nil
}

// TrainableMask returns the rank mask of the named trainable of a Student (u32, one per
// value: 0 where the value is masked rank padding, which must stay 0), or nil when the
// trainable has none (every value is live). Waits for the GPU. Errors: a nil, released or
// Teacher net; an unknown name; a readback error.
func (n *Net) TrainableMask(name string) ([]uint32, error) {
	t, err := n.trainableByName("TrainableMask", name)
	if err != nil || t.live == nil {
		return nil, err
	}
	return n.dev.ReadUint32(t.live)
}

// ReadTrainable returns a copy of the named trainable's values (f32, TrainableLen of them),
// or of its gradient when grad. Waits for the GPU. Errors: a nil, released or Teacher net; an
// unknown name; a readback error (returned as the device gives it).
func (n *Net) ReadTrainable(name string, grad bool) ([]float32, error) {
	t, err := n.trainableByName("ReadTrainable", name)
	if err != nil {
		return nil, err
	}
	b := t.param
	if grad {
		b = t.grad
	}
	return n.dev.ReadFloat32(b)
}

// WriteTrainable writes v into the named trainable's values, or into its gradient when
// grad (then the cached gradient Σ g² is dropped, so GradNorm and ClipGrads recompute it).
// It does not check v's values: callers check them (finite, zeros in masked rank padding,
// TrainableMask). Errors: a nil, released or Teacher net; an unknown name; len(v) ≠
// TrainableLen; a write error (returned as the device gives it).
func (n *Net) WriteTrainable(name string, v []float32, grad bool) error {
	t, err := n.trainableByName("WriteTrainable", name)
	if err != nil {
		return err
	}
	if len(v) != t.param.Len() {
		return fmt.Errorf("nvgkit.WriteTrainable %s: %d values, want %d", name, len(v), t.param.Len())
	}
	b := t.param
	if grad {
		b = t.grad
		n.st.ssValid = false // the cached Σ g² is stale
	}
	return n.dev.WriteFloat32(b, v)
}

// SetGrads writes every trainable's gradient of a Student from g (Grads' layout: name → f32
// values), the inverse of Grads. Every name and length is checked before anything is
// written. Errors: a nil, released or Teacher net; a missing or differently sized gradient
// (named); a write error (named).
func SetGrads(net *Net, g map[string][]float32) error {
	if err := net.requireStudent("SetGrads"); err != nil {
		return err
	}
	for _, t := range net.st.trainables {
		if len(g[t.name]) != t.grad.Len() {
			return fmt.Errorf("nvgkit.SetGrads: %s: %d values, want %d", t.name, len(g[t.name]), t.grad.Len())
		}
	}
	net.st.ssValid = false
	for _, t := range net.st.trainables {
		if err := net.dev.WriteFloat32(t.grad, g[t.name]); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}

// Logits returns h·headᵀ, f32 [rows, vocab] row-major, for hidden states h [rows, hidden]
// given on the host (after the final norm: Trace.Hidden's last entry, StudentHidden's), one
// vocabulary slice at a time on the GPU. Waits for the GPU. Errors: a nil or released net;
// rows < 1 or len(h) ≠ rows·hidden; a GPU error.
func (n *Net) Logits(h []float32, rows int) ([]float32, error) {
	if err := n.usable("Logits"); err != nil {
		return nil, err
	}
	if rows < 1 || len(h) != rows*n.Config.HiddenSize {
		return nil, fmt.Errorf("nvgkit.Logits: %d values for %d rows, want rows ≥ 1 and rows × hidden %d", len(h), rows, n.Config.HiddenSize)
	}
	return n.logits(h, rows)
}

// StudentHidden runs a Student's forward over one window ids (len(ids) = work.T tokens,
// work.NB ≥ 1) and reads back the hidden state after the embedding and every layer but the
// last, and after the final norm: the layout of Trace.Hidden (L+1 entries, each f32
// [len(ids)·hidden]). Waits for the GPU. Errors: a nil, released or mismatched net or work;
// a window of the wrong length or an id outside the vocabulary; a GPU error.
func StudentHidden(net *Net, work *Work, ids []int) ([][]float32, error) {
	const op = "StudentHidden"
	if err := net.requireStudent(op); err != nil {
		return nil, err
	}
	return net.studentHidden(op, work, ids)
}

// studentHidden is StudentHidden, its errors naming op.
func (n *Net) studentHidden(op string, work *Work, ids []int) ([][]float32, error) {
	if err := work.check(op, n); err != nil {
		return nil, err
	}
	flat, nb, err := n.windows(op, work, [][]int{ids}, 0, 0)
	if err != nil {
		return nil, err
	}
	c := n.Config
	s := work.st
	real := nb * work.T * c.HiddenSize
	if err := n.studentForward(work, flat); err != nil {
		return nil, err
	}
	L := len(n.layers)
	out := make([][]float32, 0, L+1)
	for l := range L {
		x, err := n.dev.ReadFloat32(s.ckpt[l])
		if err != nil {
			return nil, err
		}
		out = append(out, x[:real:real])
	}
	err = n.dev.Run(func(r *gpu.Recorder) error {
		return gpu.RMSNorm(r, s.ckpt[L], n.finalNorm, s.hN, work.NB*work.T, c.HiddenSize, c.RMSNormEps, true)
	})
	if err != nil {
		return nil, err
	}
	x, err := n.dev.ReadFloat32(s.hN)
	if err != nil {
		return nil, err
	}
	return append(out, x[:real:real]), nil
}

// NewTrainableSnapshot returns an empty snapshot to fill with Set (to rebuild one from a
// checkpoint's tensors; Restore checks it against the net).
func NewTrainableSnapshot() *TrainableSnapshot {
	return &TrainableSnapshot{param: map[string][]float32{}, m: map[string][]float32{}, v: map[string][]float32{}}
}

// Set stores the named trainable's values and Adam moments m and v (the snapshot keeps the
// slices, not copies), replacing what the snapshot held for that name. Errors: a nil slice.
func (s *TrainableSnapshot) Set(name string, param, m, v []float32) error {
	if param == nil || m == nil || v == nil {
		return errors.New("nvgkit.TrainableSnapshot.Set: " + name + ": nil values or moments")
	}
	if _, ok := s.param[name]; !ok {
		s.names = append(s.names, name)
		sort.Strings(s.names)
	}
	s.param[name], s.m[name], s.v[name] = param, m, v
	return nil
}

// M returns the snapshot's own copy of the named trainable's Adam first moment (nil when
// absent).
func (s *TrainableSnapshot) M(name string) []float32 { return s.m[name] }

// V returns the snapshot's own copy of the named trainable's Adam second moment (nil when
// absent).
func (s *TrainableSnapshot) V(name string) []float32 { return s.v[name] }
