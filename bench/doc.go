// Package bench is nvg bench's side of the tree (DESIGN.md §2, §9): the synthetic Qwen3.5
// geometries of the PyTorch peer (Config, Geometries) and their nets with random weights made
// on the GPU (NewNet: an nvgkit.Source for nvgkit.BuildNet), their memory plans without a
// device (Memory, Plan), the measurement of a geometry's teacher pass and student step on a
// run that train.Assemble builds from them (Measure, Options; a whole run's geometries,
// teacher dtypes and GEMM paths: Suite), the report it writes and renders (Report,
// NewReport, RenderReport), and the session bench's cell latencies (Session). The shell
// scripts beside it run nvg bench on a GPU machine.
//
// Only cmd/nvg imports it.
package bench
