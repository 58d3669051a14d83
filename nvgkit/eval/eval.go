// Package eval measures model files, on the GPU or on the float64 host path that is its
// reference twin: the held-out negative log-likelihood of a teacher or a BLR student
// (Evaluator, `nvg eval`) on the windows HeldOut draws, the gap between two teachers' next-token
// distributions (Compare, `nvg eval --compare`), and a teacher's forward trace in the
// reference-fixture schema of testdata/fixtures, with a student's loss and gradients against
// its top-k (Trace, StudentTrace, TraceTensors, StudentTensors: `nvg trace`).
//
// A nil *gpu.Device selects the host path (package host, float64, slow); any other device
// the GPU path (f16 weights, f32 arithmetic: package nvgkit). It is the one production
// package besides nvgkit/gradcheck that imports host (testkit.TestLayering): it owns the
// `--host` reference paths of the command line, so that a notebook can run them too.
package eval

import (
	"errors"
	"fmt"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// The names of the paths, as `nvg eval --json` and `nvg trace`'s metadata record them.
const (
	PathHost       = "host-f64" // the float64 host path
	PathGPU        = "gpu-f16"  // a teacher on the GPU: f16 weights (or 8-bit ones), f32 arithmetic
	PathGPUStudent = "gpu-blr"  // a BLR student on the GPU
)

// HeldOut says which held-out text an evaluation reads and how its windows are drawn.
type HeldOut struct {
	// Files are held-out text files (already expanded: data.ExpandSources); nil is the Go
	// standard library's held-out split (data.StdlibCorpus).
	Files []string
	// Tokenizer is a tokenizer.json file or a directory holding one; "" finds it beside the
	// model, else uses the default model's (train.OpenTokenizer).
	Tokenizer string
	// N is the number of non-overlapping windows drawn with Seed (data.EvalWindows); 0 is
	// every window of the text.
	N int
	// T is the tokens of context per window: each window holds T+1 ids (inputs and targets).
	T    int
	Seed uint64
}

// Windows tokenizes h's held-out text with the tokenizer of the model at modelPath
// (architecture cfg; note reports a fallback to the default model's tokenizer) through the
// token cache (train.TokenCacheDir) and draws the windows of T+1 ids. It returns them and what
// the text was: "Go standard library held-out split", "1 file" or "N files". Fewer windows than
// N come back when the text holds fewer (the caller says so). Errors: the tokenizer's
// (train.OpenTokenizer), the corpus's, N < 0, T < 1, a text shorter than one window.
func (h HeldOut) Windows(modelPath string, cfg arch.Config, note func(format string, a ...any)) ([][]int, string, error) {
	if h.N < 0 || h.T < 1 {
		return nil, "", fmt.Errorf("eval.HeldOut: N = %d, T = %d: want N ≥ 0 (0: all) and T ≥ 1", h.N, h.T)
	}
	tok, err := train.OpenTokenizer(h.Tokenizer, modelPath, cfg, note)
	if err != nil {
		return nil, "", err
	}
	what := "Go standard library held-out split"
	if h.Files != nil {
		what = fmt.Sprintf("%d files", len(h.Files))
		if len(h.Files) == 1 {
			what = "1 file"
		}
	}
	corpus, err := data.OpenCorpus(nil, h.Files)
	if err != nil {
		return nil, "", err
	}
	stream, err := corpus.Tokens(tok, data.HeldOut, train.TokenCacheDir())
	if err != nil {
		return nil, "", err
	}
	w, err := data.EvalWindows(stream, h.N, h.T, h.Seed)
	return w, what, err
}

// Options say how the GPU path runs a model. The host path ignores them.
type Options struct {
	// Batch is the windows per GPU pass; 0 is as many as fit 4096 tokens. It is capped at the
	// number of windows, and for a student lowered until it divides them (a student pass
	// takes exactly Batch windows).
	Batch int
	// Stream streams a dense teacher's layers and head (at most two layers or two head
	// blocks on the GPU at once: nvgkit.StreamLayers). A BLR student is not streamed.
	Stream bool
}

// batch is o.Batch resolved for n windows of t tokens.
func (o Options) batch(n, t int) int {
	nb := o.Batch
	if nb == 0 {
		nb = max(1, 4096/t)
	}
	return max(1, min(nb, n))
}

// IsStudent reports whether m holds BLR tensors (a compressed student).
func IsStudent(m *cmf.Model) bool {
	for _, t := range m.Tensors {
		if t.DType == cmf.BLR {
			return true
		}
	}
	return false
}

// load loads m on dev as a Teacher net (layers streamed when stream) or, when student, as a
// Student net, and sizes a work for nb windows of t tokens.
func load(dev *gpu.Device, m *cmf.Model, nb, t int, stream, student bool) (*nvgkit.Net, *nvgkit.Work, error) {
	var opts []nvgkit.LoadOption
	if stream {
		opts = append(opts, nvgkit.StreamLayers())
	}
	kind := nvgkit.Teacher
	if student {
		kind = nvgkit.Student
	}
	net, err := nvgkit.LoadNet(dev, m, kind, opts...)
	if err != nil {
		return nil, nil, err
	}
	work, err := nvgkit.NewWork(dev, net, nb, t)
	if err != nil {
		net.Release()
		return nil, nil, err
	}
	return net, work, nil
}

// Evaluator is one model loaded for its held-out NLL over fixed windows (NewEvaluator).
type Evaluator struct {
	// Path is PathHost, PathGPU (a teacher) or PathGPUStudent.
	Path string
	// Label says how it runs, for a log line: "float64 host path", "GPU, f16 weights, 8
	// windows per pass", "GPU, BLR student, 4 windows per pass", with ", layers streamed"
	// when streamed.
	Label   string
	windows [][]int
	host    *host.Net
	net     *nvgkit.Net
	work    *nvgkit.Work
}

// NewEvaluator loads model m for the windows (each of the same length t+1: inputs and
// targets): on the host in float64 when dev is nil (host.Load), else on dev as a Teacher net
// or, when m holds BLR tensors, a Student net, o.Batch windows per pass. Errors: o.Stream for
// a student, no windows, host.Load's, nvgkit.LoadNet's and NewWork's (the GPU's memory).
func NewEvaluator(dev *gpu.Device, m *cmf.Model, windows [][]int, o Options) (*Evaluator, error) {
	if len(windows) == 0 || len(windows[0]) < 2 {
		return nil, errors.New("eval.NewEvaluator: no windows of at least 2 tokens")
	}
	if dev == nil {
		net, err := host.Load(m)
		if err != nil {
			return nil, err
		}
		return &Evaluator{Path: PathHost, Label: "float64 host path", windows: windows, host: net}, nil
	}
	t := len(windows[0]) - 1
	nb := o.batch(len(windows), t)
	ev := &Evaluator{Path: PathGPU, windows: windows}
	if IsStudent(m) {
		if o.Stream {
			return nil, errors.New("eval.NewEvaluator: Options.Stream is for dense teachers; the model is a BLR student")
		}
		for len(windows)%nb != 0 { // a student pass takes exactly nb windows
			nb--
		}
		ev.Path, ev.Label = PathGPUStudent, fmt.Sprintf("GPU, BLR student, %d windows per pass", nb)
	} else {
		ev.Label = fmt.Sprintf("GPU, f16 weights, %d windows per pass", nb)
	}
	if o.Stream {
		ev.Label += ", layers streamed"
	}
	var err error
	if ev.net, ev.work, err = load(dev, m, nb, t, o.Stream, ev.Path == PathGPUStudent); err != nil {
		return nil, err
	}
	return ev, nil
}

// NLL returns the summed next-token negative log-likelihood (natural log) over the windows
// and the number of predicted tokens (perplexity = exp(sum/count)): host.Net.NLL,
// nvgkit.NLL or nvgkit.StudentNLL. progress, when not nil, gets the windows done and the
// total. A non-finite hidden state gives a non-finite sum, not an error (FirstNonFinite).
func (e *Evaluator) NLL(progress func(done, total int)) (sum float64, count int, err error) {
	switch {
	case e.host != nil:
		return e.host.NLL(e.windows, progress)
	case e.Path == PathGPUStudent:
		return nvgkit.StudentNLL(e.net, e.work, e.windows, progress)
	}
	return nvgkit.NLL(e.net, e.work, e.windows, progress)
}

// FirstNonFinite re-runs the windows on the GPU layer by layer (nvgkit.FirstNonFinite) and
// returns the first hidden state that is not finite, or nil when all are. The host path has
// no diagnosis (an error): its float64 arithmetic on weights host.Load checks finite does
// not overflow in practice.
func (e *Evaluator) FirstNonFinite() (*nvgkit.NonFinite, error) {
	if e.host != nil {
		return nil, errors.New("eval.Evaluator.FirstNonFinite: the host path has no diagnosis")
	}
	return nvgkit.FirstNonFinite(e.net, e.work, e.windows)
}

// Close releases the GPU net and work (the device stays open: it is the caller's).
func (e *Evaluator) Close() {
	if e.work != nil {
		e.work.Release()
		e.net.Release()
	}
}
