package eval

import (
	"context"
	"errors"
	"reflect"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
)

// Gap is how far one teacher's next-token distributions are from a reference teacher's on
// the same tokens (Compare), in nats; its JSON is `nvg eval --compare --json`'s "gap".
type Gap struct {
	Tokens int `json:"tokens"` // predicted tokens compared
	K      int `json:"k"`      // the reference's top-k
	// TopKKL is the mean over tokens of KL(p_ref,k ‖ p_other,k), both renormalised over the
	// reference's top-k ids; KL the full-vocabulary KL (the host path only, else 0).
	TopKKL float64 `json:"topk_kl_nats"`
	KL     float64 `json:"kl_nats,omitempty"`
	// Top1 is the fraction of tokens whose most probable next token is the same.
	Top1 float64 `json:"top1_agreement"`
	// RefNLL and NLL are the mean next-token negative log-likelihoods of the reference and
	// the other teacher (perplexity = exp(NLL)).
	RefNLL, NLL float64 `json:"-"`
}

// Compare measures how far teacher other's next-token distributions are from teacher ref's
// over the windows (each t+1 ids), with the reference's top-k (1 ≤ k ≤ vocab; ≤ 64 on the
// GPU): e.g. what an 8-bit teacher costs against its bf16 checkpoint. With dev nil it runs
// host.Compare in float64 (which adds the full KL); else nvgkit.TeacherDistribution of ref,
// then of other at ref's top-k, one teacher on dev at a time (o.Batch windows per pass,
// layers streamed when o.Stream), and nvgkit.CompareDistributions. progress, when not nil,
// gets the model (0: ref, 1: other) and its windows done and the total (GPU path only).
// Errors: a BLR student, models of different architectures, k out of range, the paths'.
func Compare(dev *gpu.Device, ref, other *cmf.Model, windows [][]int, k int, o Options, progress func(model, done, total int)) (Gap, error) {
	if IsStudent(ref) || IsStudent(other) {
		return Gap{}, errors.New("eval.Compare compares teachers; a model is a BLR student")
	}
	if !reflect.DeepEqual(ref.Config, other.Config) {
		return Gap{}, errors.New("eval.Compare: the models' architectures differ")
	}
	if len(windows) == 0 || len(windows[0]) < 2 {
		return Gap{}, errors.New("eval.Compare: no windows of at least 2 tokens")
	}
	if dev == nil {
		return compareHost(ref, other, windows, k)
	}
	t := len(windows[0]) - 1
	nb := o.batch(len(windows), t)
	// dist loads model i, takes its distribution over the windows (at the reference's top-k
	// when rd is not nil) and releases it.
	dist := func(i int, m *cmf.Model, k int, rd *nvgkit.Distribution) (*nvgkit.Distribution, error) {
		net, work, err := load(dev, m, nb, t, o.Stream, false)
		if err != nil {
			return nil, err
		}
		defer func() { work.Release(); net.Release() }()
		p := func(done, total int) {
			if progress != nil {
				progress(i, done, total)
			}
		}
		return nvgkit.TeacherDistribution(context.Background(), net, work, windows, k, rd, p)
	}
	rd, err := dist(0, ref, k, nil)
	if err != nil {
		return Gap{}, err
	}
	od, err := dist(1, other, 1, rd) // the other teacher's top-1 is enough
	if err != nil {
		return Gap{}, err
	}
	g, err := nvgkit.CompareDistributions(rd, od)
	return Gap{Tokens: g.Tokens, K: g.K, TopKKL: g.TopKKL, Top1: g.Top1, RefNLL: g.RefNLL, NLL: g.NLL}, err
}

// compareHost is Compare's float64 path: host.Compare.
func compareHost(ref, other *cmf.Model, windows [][]int, k int) (Gap, error) {
	rn, err := host.Load(ref)
	if err != nil {
		return Gap{}, err
	}
	on, err := host.Load(other)
	if err != nil {
		return Gap{}, err
	}
	h, err := host.Compare(rn, on, windows, k)
	return Gap{Tokens: h.Tokens, K: h.K, TopKKL: h.TopKKL, KL: h.KL, Top1: h.Top1, RefNLL: h.RefNLL, NLL: h.NLL}, err
}
