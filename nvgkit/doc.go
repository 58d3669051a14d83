// Package nvgkit owns the nets on the GPU (DESIGN.md §2, §3, §6): a Qwen3.5 teacher or
// compressed student in one layer layout (Net; LoadNet from a cmf.Model, BuildNet from any
// Source), the one layer recipe of the teacher pass, the student's forward and the
// backward's recompute, the activation buffers (Work), the teacher pass (TeacherTopK,
// Forward, NLL), the student step (Step: forward, KL against the teacher's top-k, backward;
// LossOnly, StudentNLL; with a hidden-state loss StepHidden, LossOnlyHidden and the
// teacher's states from TeacherTopKHidden, settings HiddenLoss), the trained values and their gradients (Grads, GradNorm,
// ClipGrads, ZeroGrads, Params, SetGrads, Snapshot, Restore), the Adam update (Adam, with an
// optim.Settings), sign learning (EnableSigns, SignStep and the sign matrices' reads and
// writes), export (Export) and the diagnosis of a non-finite result (FirstNonFinite). Its
// parts share the Net's private layout (layers, trainable arenas, sign state), so they are
// one package in files by concern.
//
// Around it: nvgkit/optim holds the optimizer's settings, nvgkit/train the run (its assembly,
// the Trainer, checkpoints, the in-process Lab), nvgkit/session the light Lab API for
// notebooks, nvgkit/ui the charts; bench (nvg bench) builds synthetic nets through Source.
// nvgkit never imports nvgkit/train.
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
