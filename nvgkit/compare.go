package nvgkit

import (
	"context"
	"fmt"
	"math"

	"github.com/nvg-project/nvg/gpu"
)

// Distribution is what TeacherDistribution keeps of a teacher's next-token distributions over
// nb windows (inputs w[:T], targets w[1:]): enough to compare two teachers on the GPU
// (CompareDistributions) without reading back any logits. Row ρ = b·T + τ is token τ of
// window b.
type Distribution struct {
	NB, T, K int
	// IDs and LogProbs [NB·T·K]: the K most probable next-token ids, most probable first, and
	// their log-probabilities under the full-vocabulary softmax (TopK's).
	IDs      []int32
	LogProbs []float32
	// Target [NB·T]: the log-probability of the next token (w[τ+1]).
	Target []float32
	// At [NB·T·Ref.K], when TeacherDistribution was given a reference: the log-probabilities
	// of the reference's top-k ids, in its order; else nil.
	At []float32
}

// TeacherDistribution runs net over windows of work.T+1 tokens each (inputs w[:T], targets
// w[1:], as NLL; work.NB windows per pass, the last group padded) and returns, per token, its
// top-k (1 ≤ k ≤ min(64, vocab)), the log-probability of the target and, when ref is not nil
// (another teacher's Distribution over the same windows), the log-probabilities of ref's
// top-k ids: gpu.LogitsTopK, and one gpu.TargetLogits per target and reference rank, each
// less the row's log-sum-exp. progress, when not nil, is called after each group with the
// windows done and the total.
//
// Errors (before anything is submitted): NLL's (no windows, a window whose length is not
// work.T+1, an id outside [0, vocab), a nil, released or mismatched net or work, a net that
// is not a Teacher), k out of range, a ref of other windows (NB, T) or of more than 64 ranks;
// then any GPU error. ctx stops it between groups (the error wraps context.Cause(ctx)).
func TeacherDistribution(ctx context.Context, net *Net, work *Work, windows [][]int, k int, ref *Distribution, progress func(done, total int)) (_ *Distribution, err error) {
	defer func() { err = memRemedy(err) }()
	const op = "TeacherDistribution"
	if err := work.check(op, net); err != nil {
		return nil, err
	}
	if err := checkK(op, k, net.Config.VocabSize); err != nil {
		return nil, err
	}
	for g0 := 0; g0 < len(windows) || g0 == 0; g0 += work.NB {
		if _, _, err := net.checkWindows(op, work, windows[g0:min(g0+work.NB, len(windows))], 1, g0); err != nil {
			return nil, err
		}
	}
	T := work.T
	if ref != nil && (ref.NB != len(windows) || ref.T != T || ref.K < 1 || ref.K > gpu.MaxTopK || len(ref.IDs) != ref.NB*T*ref.K) {
		return nil, fmt.Errorf("nvgkit.%s: the reference covers %d windows of %d tokens with top-%d (%d ids), want %d windows of %d and 1 ≤ k ≤ %d",
			op, ref.NB, ref.T, ref.K, len(ref.IDs), len(windows), T, gpu.MaxTopK)
	}
	d := &Distribution{NB: len(windows), T: T, K: k}
	rows := work.NB * T
	// One logit buffer per target column: the target (the work's tgt), then each reference rank.
	cols := 1
	if ref != nil {
		cols += ref.K
		d.At = make([]float32, 0, d.NB*T*ref.K)
	}
	outs := []*gpu.Buffer{work.tgt}
	defer func() {
		for _, b := range outs[1:] {
			b.Release()
		}
	}()
	for len(outs) < cols {
		b, err := net.dev.NewBuffer("TeacherDistribution logits", gpu.F32, rows)
		if err != nil {
			return nil, err
		}
		outs = append(outs, b)
	}
	for g0 := 0; g0 < len(windows); g0 += work.NB {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nvgkit.%s: stopped after %d of %d windows: %w", op, g0, len(windows), context.Cause(ctx))
		}
		group := windows[g0:min(g0+work.NB, len(windows))]
		flat, nb, _ := net.checkWindows(op, work, group, 1, g0)
		targets := make([][]int, cols)
		for b := 0; b < work.NB; b++ {
			w := group[min(b, nb-1)]
			targets[0] = append(targets[0], w[1:]...)
			for τ := 0; τ < T; τ++ {
				ρ := (g0+min(b, nb-1))*T + τ
				for j := 1; j < cols; j++ {
					targets[j] = append(targets[j], int(ref.IDs[ρ*ref.K+j-1]))
				}
			}
		}
		if err := net.pass(work, flat, nil); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: windows %d…: %w", op, g0, err)
		}
		idsB, logpB, err := work.topBuffers(k)
		if err != nil {
			return nil, err
		}
		// The target columns' logits: after the head in its (last) submit, or, for a streamed
		// net, one submit per column (each uploads its [rows, H] head rows: one at a time).
		releases := []func(){}
		column := func(r *gpu.Recorder, j int) error {
			release, err := net.targetLogits(r, work.xn, targets[j], outs[j])
			releases = append(releases, release) // after r's submit
			return err
		}
		if !net.streamed {
			err = net.runHead(work, k, idsB, logpB, func(r *gpu.Recorder) error {
				for j := range targets {
					if err := column(r, j); err != nil {
						return err
					}
				}
				return nil
			})
		} else {
			err = net.runHead(work, k, idsB, logpB, nil)
			for j := 0; err == nil && j < len(targets); j++ {
				err = net.dev.Run(func(r *gpu.Recorder) error { return column(r, j) })
				for _, f := range releases {
					f()
				}
				releases = releases[:0]
			}
		}
		for _, f := range releases {
			f()
		}
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: head: %w", op, err)
		}
		real := nb * T
		lse, ids, logp, err := net.readHead(work, idsB, logpB)
		if err != nil {
			return nil, err
		}
		for _, id := range ids[:real*k] {
			d.IDs = append(d.IDs, int32(id))
		}
		d.LogProbs = append(d.LogProbs, logp[:real*k]...)
		logits := make([][]float32, cols)
		for j, b := range outs {
			if logits[j], err = net.dev.ReadFloat32(b); err != nil {
				return nil, err
			}
		}
		for ρ := 0; ρ < real; ρ++ {
			d.Target = append(d.Target, logits[0][ρ]-lse[ρ])
			for j := 1; j < cols; j++ {
				d.At = append(d.At, logits[j][ρ]-lse[ρ])
			}
		}
		if progress != nil {
			progress(g0+nb, len(windows))
		}
	}
	return d, nil
}

// DistributionGap says how far a teacher's next-token distributions are from a reference
// teacher's on the same tokens (CompareDistributions; host.Compare is its float64 twin, which
// also gives the full-vocabulary KL): what an 8-bit teacher costs the distillation target.
// Natural logs.
type DistributionGap struct {
	Tokens int // predicted tokens compared
	K      int // the reference's top-k
	// TopKKL is the mean over tokens of KL(p_ref,k ‖ p_other,k), both distributions
	// renormalised over the reference's top-k ids — what a distillation run trains on.
	TopKKL float64
	// Top1 is the fraction of tokens whose most probable next token is the same.
	Top1 float64
	// RefNLL and NLL are the mean next-token negative log-likelihoods of the reference and
	// the other teacher (perplexity = exp(NLL)).
	RefNLL, NLL float64
}

// CompareDistributions reduces two teachers' distributions over the same windows to their
// gap, in float64: other must come from TeacherDistribution with ref as its reference.
// Errors: distributions of other windows, other without the log-probabilities at ref's top-k.
func CompareDistributions(ref, other *Distribution) (DistributionGap, error) {
	if ref == nil || other == nil {
		return DistributionGap{}, fmt.Errorf("nvgkit.CompareDistributions: nil distribution")
	}
	rows := ref.NB * ref.T
	if other.NB != ref.NB || other.T != ref.T || len(other.At) != rows*ref.K || len(ref.Target) != rows || len(other.Target) != rows || len(other.IDs) != rows*other.K {
		return DistributionGap{}, fmt.Errorf("nvgkit.CompareDistributions: the other distribution (%d windows of %d, %d log-probabilities at the reference's top-%d) was not made with this reference (%d windows of %d)",
			other.NB, other.T, len(other.At), ref.K, ref.NB, ref.T)
	}
	g := DistributionGap{Tokens: rows, K: ref.K}
	K := ref.K
	for ρ := range rows {
		a, b := ref.LogProbs[ρ*K:(ρ+1)*K], other.At[ρ*K:(ρ+1)*K]
		la, lb := logSumExp32(a), logSumExp32(b)
		var kl float64
		for j := range K {
			pa := float64(a[j]) - la
			kl += math.Exp(pa) * (pa - (float64(b[j]) - lb))
		}
		g.TopKKL += kl
		if ref.IDs[ρ*K] == other.IDs[ρ*other.K] {
			g.Top1++
		}
		g.RefNLL -= float64(ref.Target[ρ])
		g.NLL -= float64(other.Target[ρ])
	}
	n := float64(rows)
	g.TopKKL, g.Top1, g.RefNLL, g.NLL = g.TopKKL/n, g.Top1/n, g.RefNLL/n, g.NLL/n
	return g, nil
}

// logSumExp32 is log Σ exp(v) in float64.
func logSumExp32(v []float32) float64 {
	m, s := maxSumExp(v)
	return m + math.Log(s)
}

// maxSumExp returns m = max v and s = Σ exp(v − m) in float64.
func maxSumExp(v []float32) (m, s float64) {
	m = math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, float64(x))
	}
	for _, x := range v {
		s += math.Exp(float64(x) - m)
	}
	return m, s
}
