package nvgkit

import (
	"context"
	"fmt"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
)

// Calibrate runs the Teacher net over windows — calibration windows of the training split
// (never held-out text), each of exactly work.T tokens, work.NB per pass (the last pass
// padded, its padding not counted) — and adds to cal, per decoder layer and pass, the
// statistics of every distinct input x [tokens, n] of the layer's projections, which
// host.Net.LinearInputs reports on the host: the input RMSNorm's output (q_proj, k_proj,
// v_proj or in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), the o_proj input (the gated
// attention output) or the out_proj input (the gated RMSNorm's output), the post-attention
// RMSNorm's output (gate_proj, up_proj) and the SwiGLU output (down_proj). Per input and
// pass it records, in the layer's own submit, the column sums of squares Σ_t x_tj²
// (gpu.ColumnSumSquares) and, for inputs of at most cal.GramMax() features, the Gram xᵀx
// (gpu.Gram), both summed in f32 over the pass's real tokens, and reads them back after the
// layer: cal.AddMoments accumulates them in float64 (the Gram averaged with its transpose,
// so exactly symmetric, and its diagonal set to the sums of squares, as
// compress.Calibration.Add keeps them). DESIGN.md §5 "Data-aware initialisation" says why
// these and what InitRefine does with them.
//
// A streamed teacher (StreamLayers) works as in TeacherTopK: the statistics are per layer,
// so at most two layers are on the GPU; the host keeps one set of sums per distinct input
// (8·n bytes, and 8·n² with a Gram). GPU scratch: per input 4·n bytes (and 4·n² with a
// Gram), and for a Gram a transposed copy of the input (4·n·rows bytes, borrowed in the
// layer's submit).
//
// progress, when not nil, is called after each pass with the windows done and the total;
// ctx stops it between passes with an error wrapping context.Cause(ctx). Errors (before
// anything is submitted): those of TeacherTopK's window checks (a Teacher net, windows of
// work.T tokens with ids in the vocabulary), a nil Calibration; then GPU errors and
// cal.AddMoments' errors (a zero Calibration, a non-finite activation, statistics of another
// grouping), naming the layer and the weights.
func Calibrate(ctx context.Context, net *Net, work *Work, windows [][]int, cal *compress.Calibration, progress func(done, total int)) (err error) {
	defer func() { err = memRemedy(err) }()
	const op = "Calibrate"
	if cal == nil {
		return fmt.Errorf("nvgkit.%s: nil Calibration (compress.NewCalibration)", op)
	}
	if len(windows) == 0 {
		if err := net.usable(op); err != nil {
			return err
		}
		return fmt.Errorf("nvgkit.%s: no windows", op)
	}
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if _, _, err := net.checkWindows(op, work, windows[g0:min(g0+work.NB, len(windows))], 0, g0); err != nil {
			return err
		}
	}
	c := &calibPass{net: net, cal: cal, gramMax: cal.GramMax(), bufs: map[[2]int]*calibBufs{}}
	defer c.release()
	work.acts.observe = c.observe
	defer func() { work.acts.observe = nil }()
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if ctx.Err() != nil {
			return fmt.Errorf("nvgkit.%s: stopped after %d of %d windows: %w", op, g0, len(windows), context.Cause(ctx))
		}
		flat, nb, _ := net.checkWindows(op, work, windows[g0:min(g0+work.NB, len(windows))], 0, g0)
		c.rows = nb * work.T
		err := net.pass(work, flat, func(l int) error {
			if l == 0 {
				return nil
			}
			if err := c.collect(); err != nil {
				return fmt.Errorf("layer %d: %w", l-1, err)
			}
			return nil
		})
		if err != nil {
			c.pending = c.pending[:0]
			return fmt.Errorf("nvgkit.%s: windows %d…: %w", op, g0, err)
		}
		if progress != nil {
			progress(g0+nb, len(windows))
		}
	}
	return nil
}

// calibPass is Calibrate's state: the GPU sums of each observation point of a layer, the
// points recorded in the layer being submitted, and the real rows of the pass.
type calibPass struct {
	net     *Net
	cal     *compress.Calibration
	gramMax int
	rows    int
	bufs    map[[2]int]*calibBufs // by (index of the input in its layer, features)
	pending []calibInput          // the inputs the current layer's recording observed
}

// calibBufs are one observation point's GPU sums: sumSq F32 [n] and, within the Gram limit,
// gram F32 [n, n].
type calibBufs struct {
	sumSq, gram *gpu.Buffer
}

// calibInput is one observed input of the layer being submitted.
type calibInput struct {
	names []string
	n     int
	b     *calibBufs
}

// observe records the sums of x [rows, n] into the buffers of the layer's next input point.
func (c *calibPass) observe(r *gpu.Recorder, names func() []string, x *gpu.Buffer, n int) error {
	key := [2]int{len(c.pending), n}
	b := c.bufs[key]
	if b == nil {
		b = &calibBufs{}
		c.bufs[key] = b
		var err error
		if b.sumSq, err = c.net.dev.NewBuffer("calibration sums of squares", gpu.F32, n); err != nil {
			return err
		}
		if n <= c.gramMax {
			if b.gram, err = c.net.dev.NewBuffer("calibration Gram", gpu.F32, n, n); err != nil {
				return err
			}
		}
	}
	if err := gpu.Zero(r, b.sumSq); err != nil {
		return err
	}
	if err := gpu.ColumnSumSquares(r, x, b.sumSq, c.rows, n); err != nil {
		return err
	}
	if b.gram != nil {
		if err := gpu.Gram(r, x, b.gram, c.rows, n); err != nil {
			return err
		}
	}
	c.pending = append(c.pending, calibInput{names: names(), n: n, b: b})
	return nil
}

// collect reads back the sums of the layer just submitted and adds them to the Calibration.
func (c *calibPass) collect() error {
	defer func() { c.pending = c.pending[:0] }()
	d := c.net.dev
	for _, in := range c.pending {
		s32, err := d.ReadFloat32(in.b.sumSq)
		if err != nil {
			return err
		}
		sumSq := make([]float64, in.n)
		for j, v := range s32 {
			sumSq[j] = float64(v)
		}
		var gram []float64
		if in.b.gram != nil {
			g32, err := d.ReadFloat32(in.b.gram)
			if err != nil {
				return err
			}
			n := in.n
			gram = make([]float64, n*n)
			for i := 0; i < n; i++ {
				gram[i*n+i] = sumSq[i]
				for j := 0; j < i; j++ {
					v := (float64(g32[i*n+j]) + float64(g32[j*n+i])) / 2
					gram[i*n+j], gram[j*n+i] = v, v
				}
			}
		}
		if err := c.cal.AddMoments(sumSq, gram, c.rows, in.names...); err != nil {
			return err
		}
	}
	return nil
}

func (c *calibPass) release() {
	for _, b := range c.bufs {
		b.sumSq.Release()
		b.gram.Release()
	}
}
