package data

import "testing"

func TestEvalWindows(t *testing.T) {
	stream := make([]int, 1000)
	for i := range stream {
		stream[i] = i
	}
	w, err := EvalWindows(stream, 5, 9, 7) // windows of 10 tokens: 100 available
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 5 {
		t.Fatalf("got %d windows, want 5", len(w))
	}
	for i, x := range w {
		if len(x) != 10 || x[0]%10 != 0 {
			t.Fatalf("window %d = %v: want 10 consecutive tokens starting at a multiple of 10", i, x)
		}
		if i > 0 && x[0] <= w[i-1][0] {
			t.Fatalf("windows not in stream order / overlapping: %d after %d", x[0], w[i-1][0])
		}
	}
	again, _ := EvalWindows(stream, 5, 9, 7)
	other, _ := EvalWindows(stream, 5, 9, 8)
	same := true
	for i := range w {
		if again[i][0] != w[i][0] {
			t.Fatalf("same seed gave different windows")
		}
		same = same && other[i][0] == w[i][0]
	}
	if same {
		t.Fatalf("seeds 7 and 8 chose the same windows")
	}
	all, _ := EvalWindows(stream, 0, 9, 7)
	if len(all) != 100 {
		t.Fatalf("n=0 gave %d windows, want all 100", len(all))
	}
	if _, err := EvalWindows(stream[:5], 1, 9, 7); err == nil {
		t.Fatal("stream shorter than a window: want an error")
	}
}
