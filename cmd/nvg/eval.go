package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "held-out perplexity of a model on the Go standard library split (or your files)",
		usage:   "[--windows 8|N|all] [--t 128] [--seed 1] [--files a.go,DIR,*.txt,c.jsonl] [--tokenizer F] [--batch N] [--stream] [--host] [--json] [--compare OTHER [--k 32]] [MODEL]",
		run:     runEval,
	})
}

// evalFlags are the flags that select the evaluation windows, shared with other commands.
type evalFlags struct {
	windows, files, tokenizer *string
	t                         *int
	seed                      *uint64
}

func addEvalFlags(fs interface {
	String(string, string, string) *string
	Int(string, int, string) *int
	Uint64(string, uint64, string) *uint64
}, defWindows string, defT int) evalFlags {
	return evalFlags{
		windows:   fs.String("windows", defWindows, "number of non-overlapping held-out windows drawn with --seed, or 'all'"),
		t:         fs.Int("t", defT, "tokens of context per window"),
		seed:      fs.Uint64("seed", 1, "seed choosing the held-out windows"),
		files:     fs.String("files", "", "comma-separated held-out sources instead of the Go standard library split: files, directories (every text file under them), globs, .jsonl corpora ({\"text\": …} per line)"),
		tokenizer: fs.String("tokenizer", "", "tokenizer.json (default: beside MODEL, or the embedded one)"),
	}
}

// heldOutWindows tokenizes the held-out text and draws the evaluation windows.
func (f evalFlags) heldOutWindows(modelPath string, cfg arch.Config) ([][]int, string, error) {
	n := 0
	if *f.windows != "all" {
		v, err := strconv.Atoi(*f.windows)
		if err != nil || v <= 0 {
			return nil, "", usagef("--windows wants a positive number or 'all', got %q", *f.windows)
		}
		n = v
	}
	if *f.t < 1 {
		return nil, "", usagef("--t must be ≥ 1, got %d", *f.t)
	}
	tok, err := train.OpenTokenizer(*f.tokenizer, modelPath, cfg, logf)
	if err != nil {
		return nil, "", err
	}
	var corpus *data.Corpus
	what := "Go standard library held-out split"
	if *f.files != "" {
		var files []string
		if files, err = corpusFiles("files", *f.files); err != nil {
			return nil, "", err
		}
		corpus, err = data.FilesCorpus(nil, files)
		what = fmt.Sprintf("%d files", len(files))
		if len(files) == 1 {
			what = "1 file"
		}
	} else {
		corpus, err = data.StdlibCorpus()
	}
	if err != nil {
		return nil, "", err
	}
	stream, err := corpus.Tokens(tok, data.HeldOut, train.TokenCacheDir())
	if err != nil {
		return nil, "", err
	}
	w, err := data.EvalWindows(stream, n, *f.t, *f.seed)
	if err != nil {
		return nil, "", err
	}
	if n > len(w) {
		fmt.Fprintf(os.Stderr, "warning: --windows %d asked, but the held-out text (%s) has only %d windows of %d+1 tokens: evaluating all %d\n",
			n, what, len(w), *f.t, len(w))
	}
	return w, what, nil
}

func runEval(args []string) error {
	c := commands["eval"]
	fs := newFlags(c)
	// The defaults (8 windows of 128 tokens) finish in about half a minute on 2 CPU cores
	// through lavapipe; the model card's figure is --windows 64 --t 512.
	ef := addEvalFlags(fs, "8", 128)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	onHost := fs.Bool("host", false, "compute on the host in float64 (slow reference path) instead of the GPU")
	batch := fs.Int("batch", 0, "windows per GPU pass (0: as many as fit 4096 tokens)")
	stream := fs.Bool("stream", false, "GPU: stream the layers' weights (at most two layers on the GPU at once)")
	other := fs.String("compare", "", "compare teacher OTHER with MODEL on the windows: top-k KL, top-1 agreement, both perplexities (e.g. an 8-bit teacher against its bf16 checkpoint)")
	k := fs.Int("k", 32, "with --compare: the reference's top-k")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("want at most one MODEL, got %d arguments", fs.NArg())
	}
	if *batch < 0 {
		return usagef("--batch must be ≥ 0, got %d", *batch)
	}
	if *onHost && *stream {
		return usagef("--stream is for the GPU path; --host computes on the host")
	}
	if *other == "" && *k != 32 {
		return usagef("--k goes with --compare")
	}
	path := fs.Arg(0)
	m, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer m.Close()
	windows, what, err := ef.heldOutWindows(path, m.Config)
	if err != nil {
		return err
	}
	if *other != "" {
		om, err := train.OpenModel(*other)
		if err != nil {
			return err
		}
		defer om.Close()
		return runCompare(compareRun{ref: m, other: om, refPath: path, otherPath: *other, windows: windows, t: *ef.t, k: *k,
			batch: *batch, onHost: *onHost, stream: *stream}, *asJSON)
	}
	ev, err := newEvaluator(m, path, windows, *onHost, *batch, *ef.t, *stream)
	if err != nil {
		return err
	}
	defer ev.close()
	fmt.Fprintf(os.Stderr, "evaluating %s on %d windows × %d tokens of the %s (%s)\n", train.ModelName(path), len(windows), *ef.t, what, ev.label)
	bar := train.NewProgress(os.Stderr, "eval")
	start := time.Now()
	sum, count, err := ev.nll(func(done, total int) {
		bar.Update(done, total, fmt.Sprintf("%.0f tok/s", float64(done**ef.t)/time.Since(start).Seconds()))
	})
	bar.Finish("")
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	loss := sum / float64(count)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return nonFiniteLoss(loss, ev.diagnose)
	}
	res := map[string]any{"model": train.ModelName(path), "windows": len(windows), "t": *ef.t, "tokens": count,
		"loss_nats": loss, "perplexity": math.Exp(loss), "seconds": secs, "tokens_per_second": float64(count) / secs, "path": ev.path}
	extra := ""
	if ev.peak != nil {
		res["peak_gpu_bytes"] = ev.peak()
		extra = ", peak GPU " + humanBytes(int64(ev.peak()))
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("held-out loss %.4f nats/token, perplexity %.3f (%d tokens, %.1fs, %.0f tokens/s, %s%s)\n",
		loss, math.Exp(loss), count, secs, float64(count)/secs, ev.path, extra)
	return nil
}

// evaluator is one path of nvg eval: its summed NLL over the windows, its name and label,
// and on the GPU the diagnosis of a non-finite loss and the peak bytes of nvg's buffers.
type evaluator struct {
	nll         func(progress func(done, total int)) (float64, int, error)
	diagnose    func() (*nvgkit.NonFinite, error) // GPU path, after a non-finite loss: where it starts
	peak        func() uint64
	path, label string
	close       func()
}

// newEvaluator makes the host path (onHost) or the GPU path of model m (at path) over the
// windows of t+1 tokens: a teacher (layers streamed when stream) or a BLR student, batch
// windows per pass (0: as many as fit 4096 tokens; a student's divides the windows).
func newEvaluator(m *cmf.Model, path string, windows [][]int, onHost bool, batch, t int, stream bool) (*evaluator, error) {
	if onHost {
		net, err := host.Load(m)
		if err != nil {
			return nil, err
		}
		return &evaluator{nll: func(p func(done, total int)) (float64, int, error) { return net.NLL(windows, p) },
			path: "host-f64", label: "float64 host path", close: func() {}}, nil
	}
	nb := batch
	if nb == 0 {
		nb = max(1, 4096/t)
	}
	nb = min(nb, len(windows))
	student := isStudent(m)
	if student {
		if stream {
			return nil, usagef("--stream is for dense teachers; %s is a BLR student", train.ModelName(path))
		}
		for len(windows)%nb != 0 { // a student pass takes exactly nb windows
			nb--
		}
	}
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	net, work, err := loadGPU(dev, m, nb, t, stream, student)
	if err != nil {
		dev.Close()
		return nil, err
	}
	ev := &evaluator{nll: func(p func(done, total int)) (float64, int, error) { return nvgkit.NLL(net, work, windows, p) },
		path: "gpu-f16", label: fmt.Sprintf("GPU, f16 weights, %d windows per pass", nb),
		diagnose: func() (*nvgkit.NonFinite, error) { return nvgkit.FirstNonFinite(net, work, windows) },
		peak:     func() uint64 { return dev.MemStats().PeakBytes },
		close:    func() { work.Release(); net.Release(); dev.Close() }}
	if student {
		ev.nll = func(p func(done, total int)) (float64, int, error) { return nvgkit.StudentNLL(net, work, windows, p) }
		ev.path, ev.label = "gpu-blr", fmt.Sprintf("GPU, BLR student, %d windows per pass", nb)
	}
	if stream {
		ev.label += ", layers streamed"
	}
	return ev, nil
}

// nonFiniteLoss is eval's error for a NaN or infinite held-out loss: on the GPU path it
// re-runs the windows layer by layer (diagnose) and names the first layer whose output is
// not finite. The host path has no diagnosis (diagnose nil): its float64 arithmetic on the
// weights host.Load checks finite does not overflow in practice.
func nonFiniteLoss(loss float64, diagnose func() (*nvgkit.NonFinite, error)) error {
	if diagnose == nil {
		return fmt.Errorf("held-out loss is %v on the float64 host path (no perplexity printed)", loss)
	}
	nf, err := diagnose()
	switch {
	case err != nil:
		return fmt.Errorf("held-out loss is %v (no perplexity printed); finding the first non-finite hidden state failed: %w", loss, err)
	case nf == nil:
		return fmt.Errorf("held-out loss is %v (no perplexity printed), but every hidden state is finite: the head (lm_head or the tied embedding) or the loss produced it", loss)
	}
	return fmt.Errorf("held-out loss is %v (no perplexity printed): the first non-finite hidden state is the output of %s", loss, nf)
}

// openDevice opens the WebGPU device and prints which adapter nvg uses, and its tensor
// cores ("on (…)" or "off: reason"), on stderr.
func openDevice() (*gpu.Device, error) {
	dev, err := gpu.Open()
	if err != nil {
		if gpu.IsNoAdapter(err) {
			return nil, fmt.Errorf("%w (or pass --host for the float64 host path)", err)
		}
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "nvg: GPU %s; tensor cores %s\n", dev.Info(), dev.TensorCores())
	return dev, nil
}

// isStudent reports whether m holds BLR tensors (a compressed student).
func isStudent(m *cmf.Model) bool {
	for _, t := range m.Tensors {
		if t.DType == cmf.BLR {
			return true
		}
	}
	return false
}

// loadGPU loads m on dev as a teacher net (layers streamed when stream) or, when student,
// as a Student net, and sizes a work for nb windows of t tokens.
func loadGPU(dev *gpu.Device, m *cmf.Model, nb, t int, stream, student bool) (*nvgkit.Net, *nvgkit.Work, error) {
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
