// Package host is the float64 host reference of the Qwen3.5 text model (DESIGN.md §3): the
// oracle that every GPU kernel and every GPU backward kernel is parity-tested against.
//
// It has three levels:
//
//   - one exported function per op (Embedding, LinearOp, RMSNorm, QKNormRoPE, Attention,
//     AttentionGate, CausalConv1dSiLU, GatedDeltaGates, L2Norm, GatedDeltaRule,
//     GatedRMSNorm, SwiGLU, ResidualAdd, LogSumExp, LogSoftmax, TopK), each on flat
//     row-major float64 slices with explicit sizes, returning fresh slices and an error
//     that names the bad argument when sizes disagree;
//   - a whole model (Load, Net.Forward, Net.NLL, Net.Layer) built from those ops, with every
//     projection behind the Linear interface (Dense, later BLR);
//   - the backward of every op, named <Op>Backward (backward.go; LinearBackward and
//     BLRLinearBackward for projections, with the BLR metric gradients), the distillation
//     loss KLLoss, and the whole student step Net.StudentLossGrad (loss, d loss/d embeddings,
//     gradients of every RMSNorm gain and BLR metric scale by name, see StudentGrads), built
//     layer by layer in reverse from checkpointed layer inputs (Net.LayerBackward) as the GPU
//     does it.
//
// Layout conventions used throughout: a sequence batch is nb windows of t tokens, and
// per-token tensors are [nb·t, …] row-major with the token index r = window·t + position.
// Per-head tensors are [rows, heads, headDim] (a token's heads contiguous, each head's
// values contiguous). Positions restart at 0 in every window and no state crosses windows.
//
// Everything is computed in float64, including the parts HF computes in float32, so the
// HF fixtures agree to about 1e-5 relative (see testdata/fixtures/README.md).
package host
