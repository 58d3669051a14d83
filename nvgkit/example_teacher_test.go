package nvgkit_test

import (
	"fmt"
	"log"

	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
)

// The teacher pass of the embedded tiny teacher on two windows of four tokens: per token the
// 8 most probable next tokens with their probabilities renormalised over the 8. (Compiled,
// not run: it needs a WebGPU adapter.)
func ExampleTeacherTopK() {
	dev, err := gpu.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	m, err := tinyteacher.Open()
	if err != nil {
		log.Fatal(err)
	}
	net, err := nvgkit.LoadNet(dev, m, nvgkit.Teacher) // add nvgkit.StreamLayers() for big teachers
	if err != nil {
		log.Fatal(err)
	}
	defer net.Release()
	work, err := nvgkit.NewWork(dev, net, 2, 4) // 2 windows of 4 tokens
	if err != nil {
		log.Fatal(err)
	}
	defer work.Release()
	top, err := nvgkit.TeacherTopK(net, work, [][]int{{10, 11, 12, 13}, {20, 21, 22, 23}}, 8)
	if err != nil {
		log.Fatal(err)
	}
	// Token τ of window b is row ρ = b·T + τ; its K entries start at ρ·K.
	rho := 1*top.T + 3
	fmt.Println(top.IDs[rho*top.K:][:top.K], top.Probs[rho*top.K:][:top.K], top.LSE[rho])
}
