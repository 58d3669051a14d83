package mpi

import (
	"math"
	"testing"
)

// sumInOrder adds the parts in rank order from a zeroed sum: with f32 rounding the order is
// visible (1e8 + 1 − 1e8 is 0 in f32 left to right, 1 if the last two came first).
func TestSumInOrder(t *testing.T) {
	all := []float32{1e8, 2, 1, 3, -1e8, 4}
	out := []float32{9, 9}
	sumInOrder(out, all, 3)
	if out[0] != 0 || out[1] != 9 {
		t.Errorf("sum %v, want [0 9]", out)
	}
	neg := []float64{math.Copysign(0, -1)}
	sumInOrder(neg, []float64{math.Copysign(0, -1)}, 1)
	if math.Signbit(neg[0]) {
		t.Errorf("0 + (−0) = %v, want +0 (the sum starts from +0)", neg[0])
	}
}
