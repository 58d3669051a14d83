// Package nvgkit is nvg's user-facing, step-level API for notebooks and the command line
// (DESIGN.md §2): load a teacher or a compressed student net onto a gpu.Device, size the
// activation buffers once (Work), run the teacher pass (TeacherTopK), step the student
// (Step: forward, KL against the teacher's top-k, backward), inspect gradients (Grads,
// GradNorm), update it (ClipGrads, Adam), snapshot, export, evaluate (NLL, StudentNLL; for a
// non-finite result, FirstNonFinite names the layer). The training loop built on these
// (Trainer, its configuration, checkpoints, reports, the in-process Lab) is package
// nvgkit/train, which imports nvgkit; plots and notebook display are nvgkit/ui; resident
// sessions for notebooks are nvgkit/session. The compressor is package compress.
//
// A typical teacher pass:
//
//	dev, _ := gpu.Open()
//	m, _ := tinyteacher.Open()
//	net, _ := nvgkit.LoadNet(dev, m, nvgkit.Teacher)            // or nvgkit.StreamLayers()
//	work, _ := nvgkit.NewWork(dev, net, 4, 512)                  // 4 windows of 512 tokens
//	top, _ := nvgkit.TeacherTopK(net, work, windows, 32)         // top-32 per token, on the host
//
// and a student step (Example_studentStep has the whole loop):
//
//	st, _ := nvgkit.Step(student, sw, windows, top)              // gradients accumulate
//	nvgkit.ClipGrads(student, 1)
//	nvgkit.Adam(student, opt, opt.LRAt(step, steps), step)   // opt: an optim.Settings
//	nvgkit.ZeroGrads(student)
//
// Every function validates its arguments in Go before anything is submitted to the GPU (a
// validation error inside the driver aborts the process, DESIGN.md §7). A Net, and a Work,
// are driven by one goroutine at a time.
package nvgkit
