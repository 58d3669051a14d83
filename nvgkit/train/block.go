package train

import (
	"fmt"
	"slices"

	"github.com/nvg-project/nvg/nvgkit"
)

// blockTargets holds what the block-wise reconstruction phase (TrainConfig.BlockSteps) reads
// of the teacher: for each window a block step of this rank uses, the teacher's output of
// that step's decoder layer — only that layer, as binary16 (nvgkit.HiddenStates' planes),
// taken in the teacher pass beside the top-k (Trainer.teacherPass) and held in host memory.
// A run whose windows are all new (Windows ≥ B·NB for the phase's B steps) keeps one layer
// per window of the phase: B·NB·2·T·H bytes in all (the tiny teacher, NB 4, T 64, 8 layers ×
// 4 steps: 4 MiB; the 0.8B geometry, 16 × 512 tokens, 24 layers × 4 steps: 1.5 GiB), not
// all L layers of every window of the run.
type blockTargets struct {
	t, h int
	// need lists, per window, the decoder layers its block steps from the first kept on
	// train (ascending); planes holds those layers' states, [T·H] each, by window and layer.
	need   map[int][]int
	planes map[[2]int][]uint16
}

// newBlockTargets returns the targets the block steps from step from on need (nil when
// none is left: no block phase, or it is over), for this rank's windows.
func (tr *Trainer) newBlockTargets(from int) *blockTargets {
	c := tr.Config
	b := c.blockTotal()
	if from > b {
		return nil
	}
	bt := &blockTargets{t: c.T, h: tr.teacher.Config.HiddenSize, need: map[int][]int{}, planes: map[[2]int][]uint16{}}
	for s := max(from, 1); s <= b; s++ {
		l := (s - 1) / c.BlockSteps
		i0 := (s - 1) * c.NB % c.Windows
		for w := i0; w < i0+c.NB; w++ {
			if tr.ownsWindow(w) && !slices.Contains(bt.need[w], l) {
				bt.need[w] = append(bt.need[w], l) // ascending: steps go through the layers in order
			}
		}
	}
	return bt
}

// layersOf returns the layers windows first … first+n−1 need, ascending (nil for a nil b).
func (b *blockTargets) layersOf(first, n int) []int {
	if b == nil {
		return nil
	}
	var out []int
	for w := first; w < first+n; w++ {
		for _, l := range b.need[w] {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return out
}

// put keeps, of hs (the teacher's states of windows first … first+hs.NB−1, holding every
// layer layersOf names), each window's planes of the layers it needs.
func (b *blockTargets) put(first int, hs *nvgkit.HiddenStates) error {
	th := b.t * b.h
	for w := range hs.NB {
		for _, l := range b.need[first+w] {
			one, err := hs.Select([]int{l})
			if err != nil {
				return fmt.Errorf("train: block targets: %w", err)
			}
			b.planes[[2]int{first + w, l}] = slices.Clone(one.F16[0][w*th : (w+1)*th])
		}
	}
	return nil
}

// get returns the teacher's output of layer l for windows first … first+n−1 (one plane).
// Errors: a window whose state of l was not taken (not a block window of layer l from the
// first step the targets were made for).
func (b *blockTargets) get(first, n, l int) (*nvgkit.HiddenStates, error) {
	if b == nil {
		return nil, fmt.Errorf("train: the block-wise reconstruction's teacher states are not there (the teacher pass has not run, or the block phase is over)")
	}
	th := b.t * b.h
	plane := make([]uint16, 0, n*th)
	for w := first; w < first+n; w++ {
		p, ok := b.planes[[2]int{w, l}]
		if !ok {
			return nil, fmt.Errorf("train: no teacher state of layer %d for window %d (not a window of that layer's block steps)", l, w)
		}
		plane = append(plane, p...)
	}
	return &nvgkit.HiddenStates{NB: n, T: b.t, H: b.h, Layers: []int{l}, F16: [][]uint16{plane}}, nil
}

// bytes is the host memory of the planes held.
func (b *blockTargets) bytes() int64 { return int64(len(b.planes)) * 2 * int64(b.t) * int64(b.h) }

// union returns the ascending union of two ascending layer lists.
func union(a, b []int) []int {
	out := slices.Clone(a)
	for _, l := range b {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}
