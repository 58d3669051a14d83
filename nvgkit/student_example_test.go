package nvgkit_test

import (
	"fmt"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
)

// Example_studentStep distils a BLR student against its teacher's top-k: the step API a
// training loop is built on (compiled documentation; it needs a GPU or lavapipe to run).
func Example_studentStep() {
	dev, _ := gpu.Open()
	teacherModel, _ := tinyteacher.Open()
	studentModel, _, _ := compress.Model(teacherModel, compress.Options{BitsPerWeight: 1}, nil)
	teacher, _ := nvgkit.LoadNet(dev, teacherModel, nvgkit.Teacher)
	student, _ := nvgkit.LoadNet(dev, studentModel, nvgkit.Student)
	tw, _ := nvgkit.NewWork(dev, teacher, 2, 256)
	sw, _ := nvgkit.NewWork(dev, student, 2, 256) // StudentWorkBytes(cfg, 2, 256) bytes
	var windows [][]int                           // 2 windows of 256 token ids
	top, _ := nvgkit.TeacherTopK(teacher, tw, windows, 32)
	opt := optim.Default() // nvg distill's optimizer; opt.LRAt(step, 100) would schedule it
	for step := 1; step <= 100; step++ {
		_ = nvgkit.ZeroGrads(student)
		st, _ := nvgkit.Step(student, sw, windows, top)
		if !st.Finite {
			continue // skip the update; the gradients are cleared next step
		}
		_, _ = nvgkit.ClipGrads(student, 1)
		_ = nvgkit.Adam(student, opt, opt.LR, step)
		fmt.Println(step, st.Loss)
	}
	_ = nvgkit.RoundMetricF16(student) // the values Export writes (f16 scales)
	trained, _ := nvgkit.Export(student, studentModel)
	_ = cmf.WriteCMF("student.cmf", trained)
}
