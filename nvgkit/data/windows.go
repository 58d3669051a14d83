package data

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Windows cuts stream into consecutive non-overlapping windows of t tokens:
// window i is stream[i·t : (i+1)·t], for i < len(stream)/t; a trailing part shorter than t
// is dropped. The windows alias stream (no copy; each has capacity t, so appending to one
// never overwrites the next). It returns an error when t ≤ 0.
func Windows(stream []int, t int) ([][]int, error) {
	if t <= 0 {
		return nil, fmt.Errorf("data: window length %d, want > 0", t)
	}
	n := len(stream) / t
	out := make([][]int, n)
	for i := range out {
		out[i] = stream[i*t : (i+1)*t : (i+1)*t]
	}
	return out, nil
}

// Sampler draws windows of t+1 consecutive tokens from a stream at uniformly random start
// positions: window[:t] are a model's inputs and window[1:] their next-token targets. The
// draws depend only on the seed and the stream length, the same on every machine and Go
// version: the generator is math/rand/v2's PCG seeded with (seed, 0) and a start is drawn
// from its Uint64 outputs by Lemire's multiply-and-reject method. A Sampler is not safe for
// concurrent use.
type Sampler struct {
	stream []int
	t      int
	rng    *rand.PCG
}

// NewSampler returns a Sampler of windows of t+1 tokens from stream. It returns an error
// when t ≤ 0 or the stream has fewer than t+1 tokens.
func NewSampler(stream []int, t int, seed uint64) (*Sampler, error) {
	if t <= 0 {
		return nil, fmt.Errorf("data: window length %d, want > 0", t)
	}
	if len(stream) < t+1 {
		return nil, fmt.Errorf("data: stream of %d tokens is too short for windows of %d+1 tokens", len(stream), t)
	}
	return &Sampler{stream: stream, t: t, rng: rand.NewPCG(seed, 0)}, nil
}

// Sample draws nb windows, each of t+1 tokens ([nb][t+1], aliasing the stream: do not
// modify). Starts are independent and uniform over [0, len(stream)-t-1]. It returns an
// error when nb ≤ 0.
func (s *Sampler) Sample(nb int) ([][]int, error) {
	if nb <= 0 {
		return nil, fmt.Errorf("data: %d windows requested, want > 0", nb)
	}
	n := uint64(len(s.stream) - s.t) // number of possible starts
	out := make([][]int, nb)
	for i := range out {
		st := int(s.uniform(n))
		out[i] = s.stream[st : st+s.t+1 : st+s.t+1]
	}
	return out, nil
}

// SampleFlat is Sample with the windows split into flat, row-major inputs and targets
// ([nb·t] each, int32, freshly allocated): inputs[i·t+j] = window_i[j] and
// targets[i·t+j] = window_i[j+1]. It draws the same windows Sample would.
func (s *Sampler) SampleFlat(nb int) (inputs, targets []int32, err error) {
	ws, err := s.Sample(nb)
	if err != nil {
		return nil, nil, err
	}
	inputs = make([]int32, 0, nb*s.t)
	targets = make([]int32, 0, nb*s.t)
	for _, w := range ws {
		for j := 0; j < s.t; j++ {
			inputs = append(inputs, int32(w[j]))
			targets = append(targets, int32(w[j+1]))
		}
	}
	return inputs, targets, nil
}

// uniform returns a uniform integer in [0, n), n > 0 (Lemire 2019, with rejection).
func (s *Sampler) uniform(n uint64) uint64 {
	hi, lo := bits.Mul64(s.rng.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(s.rng.Uint64(), n)
		}
	}
	return hi
}
