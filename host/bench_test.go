package host

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkForward512 runs the tiny teacher's full forward (layers, head, log-sum-exp and
// top-32) on one window of 512 tokens.
func BenchmarkForward512(b *testing.B) {
	n := tinyNet(b)
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]int, 512)
	for i := range ids {
		ids[i] = rng.IntN(n.Config.VocabSize)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := n.Forward([][]int{ids}, ForwardOptions{TopK: 32}); err != nil {
			b.Fatal(err)
		}
	}
}
