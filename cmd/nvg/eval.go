package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit/eval"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "held-out perplexity of a model on the Go standard library split (or your files)",
		usage:   "[--windows 8|N|all] [--t 128] [--seed 1] [--files a.go,DIR,*.txt,c.jsonl] [--tokenizer F] [--batch N] [--stream] [--host] [--json] [--windows-out F.json] [--compare OTHER [--k 32]] [MODEL]",
		run:     runEval,
	})
}

// evalFlags are nvg eval's flags.
type evalFlags struct {
	windows, files, tokenizer, other, windowsOut string
	t, batch, k                                  int
	seed                                         uint64
	asJSON, onHost, stream                       bool
}

func (f *evalFlags) bind(c *command) *flag.FlagSet {
	fs := newFlags(c)
	// The defaults (8 windows of 128 tokens) finish in about half a minute on 2 CPU cores
	// through lavapipe; the model card's figure is --windows 64 --t 512.
	fs.StringVar(&f.windows, "windows", "8", "number of non-overlapping held-out windows drawn with --seed, or 'all'")
	fs.IntVar(&f.t, "t", 128, "tokens of context per window")
	fs.Uint64Var(&f.seed, "seed", 1, "seed choosing the held-out windows")
	fs.StringVar(&f.files, "files", "", "comma-separated held-out sources instead of the Go standard library split: files, directories (every text file under them), globs, .jsonl corpora ({\"text\": …} per line)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json (default: beside MODEL, or the embedded one)")
	fs.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&f.onHost, "host", false, "compute on the host in float64 (slow reference path) instead of the GPU")
	fs.IntVar(&f.batch, "batch", 0, "windows per GPU pass (0: as many as fit 4096 tokens)")
	fs.BoolVar(&f.stream, "stream", false, "GPU: stream the layers' and the head's weights (at most two layers or two head blocks on the GPU at once)")
	fs.StringVar(&f.other, "compare", "", "compare teacher OTHER with MODEL on the windows: top-k KL, top-1 agreement, both perplexities (e.g. an 8-bit teacher against its bf16 checkpoint)")
	fs.IntVar(&f.k, "k", 32, "with --compare: the reference's top-k")
	fs.StringVar(&f.windowsOut, "windows-out", "", "also write the evaluated windows' token ids to this JSON file ({\"t\": T, \"windows\": [[T+1 ids], …]}, written atomically), so that another framework can score the same tokens (bench/hf_perplexity.py)")
	return fs
}

// check validates the flags that need no model.
func (f *evalFlags) check(nargs int) error {
	switch {
	case nargs > 1:
		return usagef("want at most one MODEL, got %d arguments", nargs)
	case f.batch < 0:
		return usagef("--batch must be ≥ 0, got %d", f.batch)
	case f.onHost && f.stream:
		return usagef("--stream is for the GPU path; --host computes on the host")
	case f.other == "" && f.k != 32:
		return usagef("--k goes with --compare")
	}
	return nil
}

// heldOutWindows checks the window flags and draws the evaluation windows (eval.HeldOut) of
// the model at modelPath, saying on stderr when the text holds fewer than --windows.
func (f *evalFlags) heldOutWindows(modelPath string, cfg arch.Config) ([][]int, string, error) {
	h := eval.HeldOut{Tokenizer: f.tokenizer, T: f.t, Seed: f.seed}
	if f.windows != "all" {
		v, err := strconv.Atoi(f.windows)
		if err != nil || v <= 0 {
			return nil, "", usagef("--windows wants a positive number or 'all', got %q", f.windows)
		}
		h.N = v
	}
	if f.t < 1 {
		return nil, "", usagef("--t must be ≥ 1, got %d", f.t)
	}
	var err error
	if h.Files, err = corpusFiles("files", f.files); err != nil {
		return nil, "", err
	}
	w, what, err := h.Windows(modelPath, cfg, logf)
	if err == nil && h.N > len(w) {
		fmt.Fprintf(os.Stderr, "warning: --windows %d asked, but the held-out text (%s) has only %d windows of %d+1 tokens: evaluating all %d\n",
			h.N, what, len(w), f.t, len(w))
	}
	return w, what, err
}

func runEval(args []string) error {
	c := commands["eval"]
	var f evalFlags
	fs := f.bind(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if err := f.check(fs.NArg()); err != nil {
		return err
	}
	path := fs.Arg(0)
	m, err := train.OpenModel(path)
	if err != nil {
		return err
	}
	defer m.Close()
	windows, what, err := f.heldOutWindows(path, m.Config)
	if err != nil {
		return err
	}
	if f.windowsOut != "" {
		b, err := json.Marshal(map[string]any{"t": f.t, "windows": windows})
		if err != nil {
			return err
		}
		if err := atomicfile.WriteBytes(f.windowsOut, append(b, '\n')); err != nil {
			return fmt.Errorf("--windows-out: %w", err)
		}
		fmt.Fprintf(os.Stderr, "wrote the %d windows' token ids to %s\n", len(windows), f.windowsOut)
	}
	if f.other != "" {
		return f.compare(m, path, windows)
	}
	return f.evaluate(m, path, windows, what)
}

// evaluate prints the held-out loss and perplexity of model m (at path) on the windows of
// the held-out text what (eval.Evaluator).
func (f *evalFlags) evaluate(m *cmf.Model, path string, windows [][]int, what string) error {
	if f.stream && eval.IsStudent(m) {
		return usagef("--stream is for dense teachers; %s is a BLR student", train.ModelName(path))
	}
	dev, err := deviceUnless(f.onHost)
	if err != nil {
		return err
	}
	defer dev.Close()
	ev, err := eval.NewEvaluator(dev, m, windows, eval.Options{Batch: f.batch, Stream: f.stream})
	if err != nil {
		return err
	}
	defer ev.Close()
	fmt.Fprintf(os.Stderr, "evaluating %s on %d windows × %d tokens of the %s (%s)\n", train.ModelName(path), len(windows), f.t, what, ev.Label)
	bar := train.NewProgress(os.Stderr, "eval")
	start := time.Now()
	sum, count, err := ev.NLL(func(done, total int) {
		bar.Update(done, total, fmt.Sprintf("%.0f tok/s", float64(done*f.t)/time.Since(start).Seconds()))
	})
	bar.Finish("")
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	loss := sum / float64(count)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return nonFiniteLoss(loss, dev, ev)
	}
	res := map[string]any{"model": train.ModelName(path), "windows": len(windows), "t": f.t, "tokens": count,
		"loss_nats": loss, "perplexity": math.Exp(loss), "seconds": secs, "tokens_per_second": float64(count) / secs, "path": ev.Path}
	extra := ""
	if dev != nil {
		res["peak_gpu_bytes"] = dev.MemStats().PeakBytes
		extra = ", peak GPU " + humanBytes(int64(dev.MemStats().PeakBytes))
	}
	if f.asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("held-out loss %.4f nats/token, perplexity %.3f (%d tokens, %.1fs, %.0f tokens/s, %s%s)\n",
		loss, math.Exp(loss), count, secs, float64(count)/secs, ev.Path, extra)
	return nil
}

// nonFiniteLoss is eval's error for a NaN or infinite held-out loss: on the GPU path (dev not
// nil) it names the first layer whose output is not finite (ev.FirstNonFinite); the host
// path has no diagnosis.
func nonFiniteLoss(loss float64, dev *gpu.Device, ev *eval.Evaluator) error {
	if dev == nil {
		return fmt.Errorf("held-out loss is %v on the float64 host path (no perplexity printed)", loss)
	}
	nf, err := ev.FirstNonFinite()
	switch {
	case err != nil:
		return fmt.Errorf("held-out loss is %v (no perplexity printed); finding the first non-finite hidden state failed: %w", loss, err)
	case nf == nil:
		return fmt.Errorf("held-out loss is %v (no perplexity printed), but every hidden state is finite: the head (lm_head or the tied embedding) or the loss produced it", loss)
	}
	return fmt.Errorf("held-out loss is %v (no perplexity printed): the first non-finite hidden state is the output of %s", loss, nf)
}

// deviceUnless is the device of a command's GPU path (openDevice), or nil (nvgkit/eval's
// float64 host path) when onHost.
func deviceUnless(onHost bool) (*gpu.Device, error) {
	if onHost {
		return nil, nil
	}
	return openDevice()
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
