// Command quantgap measures what 8-bit weights cost the embedded tiny teacher: it quantizes
// it to FP8 (128×128 blocks, transformers' rule) and to q8 (cmf.QuantizeModel) and compares
// each with the bf16 teacher on held-out windows of the Go standard library (the split
// `nvg eval` uses), on the host in float64 (host.Compare): the mean KL over the teacher's
// top-k, the full-vocabulary KL, top-1 agreement and perplexity.
//
//	go run ./host/quantgap -windows 16 -t 512
//
// The figures are in DESIGN.md §4, "Quantized weights". A run of 16 × 512 tokens takes a few
// minutes on 2 CPU cores.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

func main() {
	windows := flag.Int("windows", 16, "held-out windows")
	t := flag.Int("t", 512, "tokens per window")
	k := flag.Int("k", 32, "the top-k of the top-k KL")
	seed := flag.Uint64("seed", 1, "the windows' seed (data.EvalWindows)")
	flag.Parse()
	if err := run(*windows, *t, *k, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "quantgap:", err)
		os.Exit(1)
	}
}

func run(windows, t, k int, seed uint64) error {
	tok, err := tokenizer.FromJSON(tinyteacher.TokenizerJSON())
	if err != nil {
		return err
	}
	corpus, err := data.StdlibCorpus()
	if err != nil {
		return err
	}
	stream, err := corpus.Tokens(tok, data.HeldOut, "")
	if err != nil {
		return err
	}
	w, err := data.EvalWindows(stream, windows, t, seed)
	if err != nil {
		return err
	}
	m, err := tinyteacher.Open()
	if err != nil {
		return err
	}
	ref, err := host.Load(m)
	if err != nil {
		return err
	}
	fmt.Printf("tiny teacher, %d held-out windows × %d tokens (seed %d), top-%d\n", len(w), t, seed, k)
	fmt.Println("| teacher | top-k KL (nats) | full KL (nats) | top-1 agreement | perplexity (bf16) |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, s := range []cmf.QuantScheme{cmf.QuantFP8, cmf.QuantQ8} {
		start := time.Now()
		q, err := cmf.QuantizeModel(m, s)
		if err != nil {
			return err
		}
		n, err := host.Load(q)
		if err != nil {
			return err
		}
		g, err := host.Compare(ref, n, w, k)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %.3g | %.3g | %.4f | %.4f (%.4f) |\n", s, g.TopKKL, g.KL, g.Top1, math.Exp(g.NLL), math.Exp(g.RefNLL))
		fmt.Fprintf(os.Stderr, "%s: %d tokens in %s\n", s, g.Tokens, time.Since(start).Round(time.Second))
	}
	return nil
}
