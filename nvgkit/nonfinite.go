package nvgkit

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// errFound stops FirstNonFinite's pass at the first non-finite hidden state.
var errFound = errors.New("non-finite hidden state found")

// NonFinite is where a forward pass first produced a hidden state value that is not finite
// (NaN or ±Inf): FirstNonFinite's result.
type NonFinite struct {
	// Layer is the 0-based decoder layer whose output (the residual stream after it) is
	// the first hidden state holding a non-finite value; −1 when the embedding already
	// does; Config.NumHiddenLayers when every layer's output is finite but the final norm's
	// (the head's input) is not.
	Layer int
	// Kind is the layer's kind, Config.LayerTypes[Layer] (arch.LinearAttention or
	// arch.FullAttention), or "embedding" (Layer −1) or "final_norm".
	Kind string
	// Window (an index into the windows given) and Token (0-based position in it) locate
	// the first non-finite value of that hidden state in row-major order; Value is it.
	Window, Token int
	Value         float32
}

// String names the place and the value, e.g. "layer 3 (linear_attention): NaN at token 17
// of window 0".
func (nf *NonFinite) String() string {
	return fmt.Sprintf("%s: %v at token %d of window %d", nf.Where(), nf.Value, nf.Token, nf.Window)
}

// Where names the place alone: "layer 3 (linear_attention)", "the embedding" or "the final
// norm".
func (nf *NonFinite) Where() string {
	switch nf.Kind {
	case "embedding":
		return "the embedding"
	case "final_norm":
		return "the final norm"
	}
	return fmt.Sprintf("layer %d (%s)", nf.Layer, nf.Kind)
}

// FirstNonFinite re-runs net's forward over windows, work.NB at a time, reading back the
// hidden state after the embedding, after every decoder layer and after the final norm, and
// returns the first of them (in window-group order, then layer order) that holds a NaN or
// ±Inf, or nil when all are finite (then a non-finite loss comes from the head or the loss
// itself). It is the diagnosis for a NaN or infinite NLL, StudentNLL or LossOnly: one
// readback of [work.NB·work.T, H] f32 per layer, so call it only after such a result.
// windows are those NLL takes (work.T+1 tokens; the last, a target only, is ignored) or
// work.T tokens each; net is a Teacher (layers streamed or not) or a Student with its work.
// Errors: a nil or released net or work, a work of another net or architecture, no
// windows, a window of another length or with an id outside the vocabulary; then any GPU
// error.
func FirstNonFinite(net *Net, work *Work, windows [][]int) (_ *NonFinite, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "FirstNonFinite"
	if err := work.check(op, net); err != nil {
		return nil, err
	}
	if len(windows) == 0 {
		return nil, fmt.Errorf("nvgkit.%s: no windows", op)
	}
	extra := len(windows[0]) - work.T
	if extra != 0 && extra != 1 {
		extra = 0 // windows reports the length against work.T
	}
	c := net.Config
	H := c.HiddenSize
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		flat, nb, err := net.windows(op, work, windows[g0:min(g0+work.NB, len(windows))], extra, g0)
		if err != nil {
			return nil, err
		}
		var found *NonFinite
		L := len(net.layers)
		// scan checks hidden state l (0: the embedding, l: layer l−1's output, L + 1: the
		// final norm's) of the real windows; errFound when it holds a non-finite value.
		scan := func(l int, b *gpu.Buffer) error {
			x, err := net.dev.ReadFloat32(b)
			if err != nil {
				return err
			}
			for i, v := range x[:nb*work.T*H] {
				if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
					found = &NonFinite{Layer: l - 1, Window: g0 + i/(work.T*H), Token: i / H % work.T, Value: v}
					switch {
					case l == 0:
						found.Kind = "embedding"
					case l > L:
						found.Kind = "final_norm"
					case net.layers[l-1].attn != nil:
						found.Kind = arch.FullAttention
					default:
						found.Kind = arch.LinearAttention
					}
					return errFound
				}
			}
			return nil
		}
		if net.Kind == Student {
			s := work.st
			err = net.studentForward(work, flat)
			for l := 0; l <= L && err == nil; l++ {
				err = scan(l, s.ckpt[l])
			}
			if err == nil {
				err = net.dev.Run(func(r *gpu.Recorder) error {
					return gpu.RMSNorm(r, s.ckpt[L], net.finalNorm, s.hN, work.NB*work.T, H, c.RMSNormEps, true)
				})
			}
			if err == nil {
				err = scan(L+1, s.hN)
			}
		} else {
			err = net.pass(work, flat, func(l int) error { return scan(l, work.x) })
			if err == nil {
				err = net.dev.Run(func(r *gpu.Recorder) error { return net.recordFinalNorm(r, work) })
			}
			if err == nil {
				err = scan(L+1, work.xn)
			}
		}
		if errors.Is(err, errFound) {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: windows %d…: %w", op, g0, err)
		}
	}
	return nil, nil
}

// FirstNonFiniteTrainable returns the first trained value of a Student (its trainables in
// Trainables order, each from index 0) that is NaN or ±Inf: the trainable's name, the index
// and the value; name "" when every value is finite. It reads every trainable back (Waits
// for the GPU): call it after a non-finite loss, before FirstNonFinite. Errors: a nil,
// released or Teacher net; a readback error.
func FirstNonFiniteTrainable(net *Net) (name string, index int, value float32, err error) {
	if err := net.requireStudent("FirstNonFiniteTrainable"); err != nil {
		return "", 0, 0, err
	}
	for _, t := range net.st.trainables {
		v, err := net.dev.ReadFloat32(t.param)
		if err != nil {
			return "", 0, 0, fmt.Errorf("nvgkit.FirstNonFiniteTrainable: %s: %w", t.name, err)
		}
		for i, x := range v {
			if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
				return t.name, i, x, nil
			}
		}
	}
	return "", 0, 0, nil
}
