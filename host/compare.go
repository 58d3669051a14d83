package host

import (
	"fmt"
	"math"
)

// DistributionGap says how far a model's next-token distributions are from a reference
// model's on the same tokens (Compare): what quantizing a teacher costs the distillation
// target. Natural logs throughout.
type DistributionGap struct {
	Tokens int // predicted tokens compared
	K      int // the top-k of TopKKL
	// TopKKL is the mean over tokens of KL(p_ref,k ‖ p_other,k), both distributions
	// renormalised over the reference's top-k ids — the part of the distribution a
	// distillation run trains on (DESIGN.md §6).
	TopKKL float64
	// KL is the mean over tokens of the full-vocabulary KL(p_ref ‖ p_other).
	KL float64
	// Top1 is the fraction of tokens whose most probable next token is the same.
	Top1 float64
	// RefNLL and NLL are the mean next-token negative log-likelihoods of the reference and
	// the other model (perplexity = exp(NLL)).
	RefNLL, NLL float64
}

// Compare runs ref and other (the same architecture) on windows of t+1 tokens each (inputs
// w[:t], targets w[1:], as NLL) and returns the gap between their next-token distributions,
// with the top-k of TopKKL taken from ref (1 ≤ k ≤ vocab). Errors: the nets' configs
// differ, k outside [1, vocab], the windows' errors (NLL's).
func Compare(ref, other *Net, windows [][]int, k int) (DistributionGap, error) {
	V := ref.Config.VocabSize
	if ref.Config.HiddenSize != other.Config.HiddenSize || other.Config.VocabSize != V || len(ref.Layers) != len(other.Layers) {
		return DistributionGap{}, fmt.Errorf("host.Compare: the nets differ in architecture")
	}
	if k < 1 || k > V {
		return DistributionGap{}, fmt.Errorf("host.Compare: k = %d is outside [1, vocab = %d]", k, V)
	}
	if len(windows) == 0 || len(windows[0]) < 2 {
		return DistributionGap{}, fmt.Errorf("host.Compare: need windows of at least 2 tokens (input and target)")
	}
	if _, _, err := ref.checkIDs(windows, "Compare"); err != nil {
		return DistributionGap{}, err
	}
	t := len(windows[0]) - 1
	g := DistributionGap{K: k}
	for _, w := range windows {
		hr, err := ref.hidden(w[:t], 1, t, nil)
		if err != nil {
			return DistributionGap{}, err
		}
		ho, err := other.hidden(w[:t], 1, t, nil)
		if err != nil {
			return DistributionGap{}, err
		}
		err = ref.headBlocks(hr, t, func(r0, nr int, lr []float64) error {
			H := ref.Config.HiddenSize
			lo := other.Head.Apply(ho[r0*H:(r0+nr)*H], nr)
			ids, _, err := TopK(lr, nr, V, k)
			if err != nil {
				return err
			}
			for i := range nr {
				a, b := lr[i*V:(i+1)*V], lo[i*V:(i+1)*V]
				g.add(a, b, ids[i*k:(i+1)*k], w[r0+i+1])
			}
			return nil
		})
		if err != nil {
			return DistributionGap{}, err
		}
	}
	n := float64(g.Tokens)
	g.TopKKL, g.KL, g.Top1, g.RefNLL, g.NLL = g.TopKKL/n, g.KL/n, g.Top1/n, g.RefNLL/n, g.NLL/n
	return g, nil
}

// add accumulates one token's sums: reference logits a, other logits b, the reference's
// top-k ids, the target id.
func (g *DistributionGap) add(a, b []float64, ids []int, target int) {
	la, lb := logSumExp(a), logSumExp(b)
	var kl float64
	for v := range a {
		pa := math.Exp(a[v] - la)
		kl += pa * ((a[v] - la) - (b[v] - lb))
	}
	top := make([]float64, 0, 2*len(ids))
	for _, id := range ids {
		top = append(top, a[id])
	}
	for _, id := range ids {
		top = append(top, b[id])
	}
	ka, kb := logSumExp(top[:len(ids)]), logSumExp(top[len(ids):])
	var klk float64
	for i := range ids {
		pa := math.Exp(top[i] - ka)
		klk += pa * ((top[i] - ka) - (top[len(ids)+i] - kb))
	}
	g.Tokens++
	g.KL += kl
	g.TopKKL += klk
	if argmax(a) == argmax(b) {
		g.Top1++
	}
	g.RefNLL += la - a[target]
	g.NLL += lb - b[target]
}

// argmax is the index of the largest value (the first of equals).
func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
