package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit/eval"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// compare prints how far teacher --compare OTHER's next-token distributions are from ref's
// (MODEL, at refPath) on the windows (nvg eval --compare, eval.Compare): the mean top-k KL,
// the top-1 agreement, both perplexities and, on the host, the full KL.
func (f *evalFlags) compare(ref *cmf.Model, refPath string, windows [][]int) error {
	other, err := train.OpenModel(f.other)
	if err != nil {
		return err
	}
	defer other.Close()
	for _, x := range []struct {
		m    *cmf.Model
		path string
	}{{ref, refPath}, {other, f.other}} {
		if eval.IsStudent(x.m) {
			return usagef("--compare compares teachers; %s is a BLR student", train.ModelName(x.path))
		}
	}
	if !reflect.DeepEqual(ref.Config, other.Config) {
		return fmt.Errorf("--compare %s: its architecture differs from %s's (both must be the same model, e.g. a bf16 checkpoint and its 8-bit form)", f.other, train.ModelName(refPath))
	}
	if f.k < 1 || f.k > ref.Config.VocabSize || !f.onHost && f.k > gpu.MaxTopK {
		return usagef("--k must be in [1, %d], got %d", min(ref.Config.VocabSize, gpu.MaxTopK), f.k)
	}
	fmt.Fprintf(os.Stderr, "comparing %s with %s on %d windows × %d tokens\n", train.ModelName(f.other), train.ModelName(refPath), len(windows), f.t)
	start := time.Now()
	dev, err := deviceUnless(f.onHost)
	if err != nil {
		return err
	}
	defer dev.Close()
	bars := [2]train.Progress{train.NewProgress(os.Stderr, train.ModelName(refPath)), train.NewProgress(os.Stderr, train.ModelName(f.other))}
	g, err := eval.Compare(dev, ref, other, windows, f.k, eval.Options{Batch: f.batch, Stream: f.stream}, func(model, done, total int) {
		bars[model].Update(done, total, "")
		if done == total {
			bars[model].Finish("")
		}
	})
	if err != nil {
		return err
	}
	path := map[bool]string{false: eval.PathGPU, true: eval.PathHost}[f.onHost]
	refPPL, othPPL := math.Exp(g.RefNLL), math.Exp(g.NLL)
	if f.asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"model": train.ModelName(refPath), "compare": train.ModelName(f.other),
			"windows": len(windows), "t": f.t, "path": path, "gap": g, "perplexity": refPPL, "compare_perplexity": othPPL,
			"seconds": time.Since(start).Seconds()})
	}
	fmt.Printf("%s against %s, %d tokens (%s):\n", train.ModelName(f.other), train.ModelName(refPath), g.Tokens, path)
	fmt.Printf("  top-%d KL      %.4g nats (both renormalised over the reference's top-%d)\n", g.K, g.TopKKL, g.K)
	if f.onHost {
		fmt.Printf("  full KL        %.4g nats\n", g.KL)
	}
	fmt.Printf("  top-1 agrees   %.2f %%\n", 100*g.Top1)
	fmt.Printf("  perplexity     %.4f (reference %.4f)\n", othPPL, refPPL)
	return nil
}
