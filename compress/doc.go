// Package compress turns a full-precision teacher into a binary-low-rank (BLR) student
// (DESIGN.md §5): the compressor (Model, Matrix, the rank budget BLRRank) with its initial
// factorisations — Dual-SVID (InitDualSVID) and the data-aware refinement of the signs and
// scales against the calibration statistics of each linear's input (InitRefine,
// Calibration) —, its randomised SVD (RandomizedSVD, gonum/LAPACK), the large products on
// the CPU (CPUProducts) or on a WebGPU device (GPUProducts, ModelOn), and its reports
// (TensorReport, SummarizeByKind, WriteTable, OverallBitsPerWeight).
//
// Which tensors are compressed is the architecture's to say (arch.Tensor.BLR); the BLR
// payload format and the containers the student is written to belong to cmf.
package compress
