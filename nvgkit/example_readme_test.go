package nvgkit_test

import (
	"fmt"
	"log"

	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

// Example_distillStep is the step-level loop of README.md's "The step-level API in a Go
// program" section, whose
// code block is this function's body (TestReadmeSnippetIsExample keeps them equal): the
// embedded tiny teacher compressed to 1 bit per weight, its top-k on two windows of the
// model card's text, and five student steps on them. It needs a WebGPU adapter (lavapipe
// will do), so it has no Output comment: TestExampleDistillStep runs it where the GPU tests
// run and checks that it prints
//
//	windows: 2 × 64 tokens
//	gradients after the first step, every tensor nonzero: true
//	loss after 5 steps lower than before: true
func Example_distillStep() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	dev, err := gpu.Open()
	check(err)
	defer dev.Close()
	teacher, err := tinyteacher.Open()
	check(err)
	student, _, err := compress.Model(teacher, compress.Options{BitsPerWeight: 1, Seed: 1}, nil)
	check(err)
	tnet, err := nvgkit.LoadNet(dev, teacher, nvgkit.Teacher)
	check(err)
	defer tnet.Release()
	snet, err := nvgkit.LoadNet(dev, student, nvgkit.Student)
	check(err)
	defer snet.Release()

	const nb, t = 2, 64 // windows per step, tokens per window
	tok, err := tokenizer.FromJSON(tinyteacher.TokenizerJSON())
	check(err)
	all, err := data.Windows(tok.Encode(tinyteacher.ModelCard()), t)
	check(err)
	ids := all[:nb]
	fmt.Printf("windows: %d × %d tokens\n", len(ids), len(ids[0]))

	tw, err := nvgkit.NewWork(dev, tnet, nb, t)
	check(err)
	defer tw.Release()
	sw, err := nvgkit.NewWork(dev, snet, nb, t)
	check(err)
	defer sw.Release()
	top, err := nvgkit.TeacherTopK(tnet, tw, ids, 32) // the teacher's 32 most probable next tokens
	check(err)

	var first float64
	opt := optim.Default() // nvg distill's optimizer (Adam, lr 0.05; opt.LRAt(step, 5) would schedule it)
	for step := 1; step <= 5; step++ {
		check(nvgkit.ZeroGrads(snet))
		stats, err := nvgkit.Step(snet, sw, ids, top) // forward, KL, backward: gradients accumulate
		check(err)
		if step == 1 {
			first = stats.Loss
			grads, err := nvgkit.Grads(snet) // name → gradient, for inspection (before the update)
			check(err)
			nonzero := 0
			for _, g := range grads {
				for _, v := range g {
					if v != 0 {
						nonzero++
						break
					}
				}
			}
			fmt.Printf("gradients after the first step, every tensor nonzero: %v\n", len(grads) > 0 && nonzero == len(grads))
		}
		_, err = nvgkit.ClipGrads(snet, 1)
		check(err)
		check(nvgkit.Adam(snet, opt, opt.LR, step))
	}
	after, _, err := nvgkit.LossOnly(snet, sw, ids, top)
	check(err)
	fmt.Printf("loss after 5 steps lower than before: %v\n", after < first)
}
