// Package nvgkit is nvg's user-facing, step-level API on the GPU: load a teacher (and later a
// student) net onto a gpu.Device, size the activation buffers once (Work), and run the
// teacher pass (TeacherTopK), a forward that returns every layer's hidden state (Forward),
// and the held-out negative log-likelihood (NLL) for perplexity.
//
// A typical teacher pass:
//
//	dev, _ := gpu.Open()
//	m, _ := tinyteacher.Open()
//	net, _ := nvgkit.LoadNet(dev, m, nvgkit.Teacher)            // or nvgkit.StreamLayers()
//	work, _ := nvgkit.NewWork(dev, net, 4, 512)                  // 4 windows of 512 tokens
//	top, _ := nvgkit.TeacherTopK(net, work, windows, 32)         // top-32 per token, on the host
//
// Every function validates its arguments in Go before anything is submitted to the GPU (a
// validation error inside the driver aborts the process, DESIGN.md §7). A Net, and a Work,
// are driven by one goroutine at a time.
package nvgkit
