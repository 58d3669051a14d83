package data

import (
	"fmt"
	"math/rand/v2"
)

// EvalWindows returns n non-overlapping windows of t+1 tokens (inputs w[:t], targets
// w[1:]) of stream for evaluation: the stream is cut into consecutive windows of t+1 tokens
// (Windows) and n of them are chosen by a seeded permutation (math/rand/v2 PCG with
// (seed, 1)), returned in stream order so the result is the same on every machine. n ≤ 0
// or n ≥ the number available returns them all. Errors: t ≤ 0, or a stream shorter than
// one window.
func EvalWindows(stream []int, n, t int, seed uint64) ([][]int, error) {
	all, err := Windows(stream, t+1)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("data: stream of %d tokens holds no window of %d+1 tokens", len(stream), t)
	}
	if n <= 0 || n >= len(all) {
		return all, nil
	}
	perm := rand.New(rand.NewPCG(seed, 1)).Perm(len(all))[:n]
	chosen := make([]bool, len(all))
	for _, i := range perm {
		chosen[i] = true
	}
	out := make([][]int, 0, n)
	for i, w := range all {
		if chosen[i] {
			out = append(out, w)
		}
	}
	return out, nil
}
