package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// compareRun is nvg eval --compare's work: the reference model (MODEL) and the other
// teacher (OTHER) over the same held-out windows of t+1 tokens, k the reference's top-k.
type compareRun struct {
	ref, other         *cmf.Model
	refPath, otherPath string
	windows            [][]int
	t, k, batch        int
	onHost, stream     bool
}

// compareGap is what both paths measure (the host's adds the full-vocabulary KL).
type compareGap struct {
	Tokens         int     `json:"tokens"`
	K              int     `json:"k"`
	TopKKL         float64 `json:"topk_kl_nats"`
	KL             float64 `json:"kl_nats,omitempty"`
	Top1           float64 `json:"top1_agreement"`
	RefNLL, NLL    float64 `json:"-"`
	RefPPL, OthPPL float64 `json:"-"`
}

// runCompare measures how far OTHER's next-token distributions are from MODEL's (nvg eval
// --compare): the mean top-k KL (both renormalised over MODEL's top-k), the top-1
// agreement, both perplexities and, on the host, the full KL; e.g. what an 8-bit teacher
// costs against its bf16 checkpoint. The GPU path loads one teacher at a time.
func runCompare(c compareRun, asJSON bool) error {
	for _, x := range []struct {
		m    *cmf.Model
		path string
	}{{c.ref, c.refPath}, {c.other, c.otherPath}} {
		if isStudent(x.m) {
			return usagef("--compare compares teachers; %s is a BLR student", train.ModelName(x.path))
		}
	}
	if !reflect.DeepEqual(c.ref.Config, c.other.Config) {
		return fmt.Errorf("--compare %s: its architecture differs from %s's (both must be the same model, e.g. a bf16 checkpoint and its 8-bit form)", c.otherPath, train.ModelName(c.refPath))
	}
	if c.k < 1 || c.k > c.ref.Config.VocabSize || !c.onHost && c.k > gpu.MaxTopK {
		return usagef("--k must be in [1, %d], got %d", min(c.ref.Config.VocabSize, gpu.MaxTopK), c.k)
	}
	fmt.Fprintf(os.Stderr, "comparing %s with %s on %d windows × %d tokens\n", train.ModelName(c.otherPath), train.ModelName(c.refPath), len(c.windows), c.t)
	start := time.Now()
	var g compareGap
	var err error
	path := "gpu-f16"
	if c.onHost {
		g, err = c.host()
		path = "host-f64"
	} else {
		g, err = c.gpu()
	}
	if err != nil {
		return err
	}
	g.RefPPL, g.OthPPL = math.Exp(g.RefNLL), math.Exp(g.NLL)
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"model": train.ModelName(c.refPath), "compare": train.ModelName(c.otherPath),
			"windows": len(c.windows), "t": c.t, "path": path, "gap": g, "perplexity": g.RefPPL, "compare_perplexity": g.OthPPL,
			"seconds": time.Since(start).Seconds()})
	}
	fmt.Printf("%s against %s, %d tokens (%s):\n", train.ModelName(c.otherPath), train.ModelName(c.refPath), g.Tokens, path)
	fmt.Printf("  top-%d KL      %.4g nats (both renormalised over the reference's top-%d)\n", g.K, g.TopKKL, g.K)
	if c.onHost {
		fmt.Printf("  full KL        %.4g nats\n", g.KL)
	}
	fmt.Printf("  top-1 agrees   %.2f %%\n", 100*g.Top1)
	fmt.Printf("  perplexity     %.4f (reference %.4f)\n", g.OthPPL, g.RefPPL)
	return nil
}

// host is the float64 path: host.Compare.
func (c compareRun) host() (compareGap, error) {
	ref, err := host.Load(c.ref)
	if err != nil {
		return compareGap{}, err
	}
	other, err := host.Load(c.other)
	if err != nil {
		return compareGap{}, err
	}
	h, err := host.Compare(ref, other, c.windows, c.k)
	return compareGap{Tokens: h.Tokens, K: h.K, TopKKL: h.TopKKL, KL: h.KL, Top1: h.Top1, RefNLL: h.RefNLL, NLL: h.NLL}, err
}

// gpu is the GPU path: the reference's distribution (nvgkit.TeacherDistribution), then the
// other teacher's at the reference's top-k, one teacher on the device at a time.
func (c compareRun) gpu() (compareGap, error) {
	nb := c.batch
	if nb == 0 {
		nb = max(1, 4096/c.t)
	}
	nb = min(nb, len(c.windows))
	dev, err := openDevice()
	if err != nil {
		return compareGap{}, err
	}
	defer dev.Close()
	// dist loads m, takes its distribution over the windows (top-k, at ref's top-k when ref is
	// not nil) and releases it.
	dist := func(m *cmf.Model, path string, k int, ref *nvgkit.Distribution) (*nvgkit.Distribution, error) {
		net, work, err := loadGPU(dev, m, nb, c.t, c.stream, false)
		if err != nil {
			return nil, err
		}
		defer func() { work.Release(); net.Release() }()
		bar := train.NewProgress(os.Stderr, train.ModelName(path))
		d, err := nvgkit.TeacherDistribution(context.Background(), net, work, c.windows, k, ref, func(done, total int) { bar.Update(done, total, "") })
		bar.Finish("")
		return d, err
	}
	rd, err := dist(c.ref, c.refPath, c.k, nil)
	if err != nil {
		return compareGap{}, err
	}
	od, err := dist(c.other, c.otherPath, 1, rd) // the other teacher's top-1 is enough
	if err != nil {
		return compareGap{}, err
	}
	g, err := nvgkit.CompareDistributions(rd, od)
	return compareGap{Tokens: g.Tokens, K: g.K, TopKKL: g.TopKKL, Top1: g.Top1, RefNLL: g.RefNLL, NLL: g.NLL}, err
}
