// Package gpu is nvg's WebGPU engine: the device, buffers with a tracked allocator,
// cached compute pipelines, batched command recording, readback, a timestamp profiler, and
// one Go launcher per kernel.
//
// # Device and buffers
//
// Open picks an adapter (NVG_ADAPTER, else the first discrete GPU, else lavapipe) and
// requests shader-f16, subgroups and timestamp queries when present (Device.Info). Buffers
// carry a label, a DType (F32, F16 as packed binary16 bits, U32) and a row-major shape;
// create them with NewBuffer / UploadFloat32 / UploadF16 / UploadUint32, read them with
// ReadFloat32 / ReadF16 / ReadUint32, and Release them explicitly. Device.MemStats reports
// current and peak bytes.
//
// # The launcher pattern (follow it for every new kernel)
//
// An op has one name everywhere: wgsl/<op_name>.wgsl, the launcher gpu.<OpName> in
// gpu/<op_name>.go, and the f64 reference host.<OpName>, with a parity test in
// gpu/<op_name>_test.go. A launcher:
//
//  1. takes the Recorder first, then the buffers (outputs last or in place, as documented),
//     then sizes and scalars: func ResidualAdd(r *Recorder, x, y *Buffer) error. More than
//     four sizes go into a dims struct with one documented field per size, shared by an op's
//     forward, backward and variants (DeltaRuleDims, AttentionDims, LogitsDims,
//     QKNormRoPEDims); tuning knobs that are not sizes go into an options struct whose zero
//     value is the default (KLOptions), never into Device state;
//  2. validates everything in Go — first r.usable() (nil recorder), then dtypes, shapes and
//     lengths against each other (helpers need, positive, distinct; a dims struct has a
//     check method doing the recorder and size checks once for all its launchers), ids and
//     scalars — and returns an error naming the op and the bad argument; it never panics;
//  3. gets its pipeline with r.Device().Kernel(KernelSpec{...}): the WGSL file is a
//     text/template rendered with literal compile-time sizes (Params), and the pipeline is
//     cached by (File, Entry, Params), so keep Params small and made of values;
//  4. computes its grid with Grid1D (≤ 65535 workgroups per dimension; the shader takes
//     wid.x + wid.y·nwg.x as its linear workgroup index and bounds-checks), and passes
//     runtime sizes as u32 uniforms (the last binding of the shader);
//  5. calls r.Dispatch, which re-checks binding counts, ranges, alignment, the device's
//     maxStorageBufferBindingSize, read/read-write aliasing and grid limits. A launcher of
//     one dispatch does 3–5 with r.dispatch1D(spec, workgroups, uniforms, bindings...).
//
// Where an op has several implementations (a tuned kernel and its simple twin, a chunked
// and a token-by-token form), the choice between them is gpu's, made from the device's
// limits (GatedDeltaRuleAuto with GatedDeltaRuleChunkedFits, GatedDeltaRuleBackwardAuto),
// so callers never re-derive a launcher's scratch sizes.
//
// A launcher that needs scratch memory or uploaded host arguments (Embedding's ids,
// LogitsTopK's logits slice) takes it from r.Temp / r.TempUint32: the recorder hands it
// back after Submit, and a later Temp of the same size reuses it (cleared on the GPU). An
// intermediate that dies within the call and is written before it is read is borrowed
// instead (r.Borrow, BLRBackward's c, dt2, dxg): given back when the call returns, the next
// call of the same size in the recording takes it, so a submit of many calls holds one set.
// A launcher that records several dispatches truncates its own partial recording on error,
// so a failed call leaves the recorder as it was. A tensor larger than
// one storage binding (maxStorageBufferBindingSize) is bound in slices with Binding
// offsets that are multiples of StorageAlign (Embedding, LogitsTopK do this).
//
// Nothing runs until Recorder.Submit, which puts all recorded dispatches into one command
// buffer (record a whole layer, then submit). Readback waits for the GPU.
//
// Shader rules on this stack (DESIGN.md §7): workgroup memory is not zero-initialised;
// `enable subgroups;` is rejected (the builtins work when Info().Subgroups is true);
// f16 tensors are read as packed u32 words with unpack2x16float, so kernels run without
// shader-f16; a validation error inside Submit or buffer mapping aborts the process, which
// is why every check happens in Go first.
//
// # CPU adapters
//
// On Mesa lavapipe every storage or workgroup-memory access is a loop over the SIMD lanes and
// a barrier a coroutine switch (DESIGN.md §7, "CPU adapters"), so the hot ops have a
// lane-blocked form (wgsl/*_lanes.wgsl): one subgroup per workgroup, no workgroup memory, each
// operand element loaded once into one lane and shared by subgroupBroadcast. Open probes the
// subgroup size on CPU adapters (Info.SubgroupSize, 0 on GPUs); the choice is gpu's: the GEMM
// launchers take linear_lanes.wgsl / blr_forward_lanes.wgsl (bit-identical to the tiled
// kernels), GatedDeltaRuleAuto / …BackwardAuto, AttentionAuto / AttentionBackwardAuto and
// LogitsTopK's merge their lane forms. Each form is one more line of its op's parity suite.
//
// # Tensor cores
//
// Open puts nvg's Vulkan layer (vklayer/nvg_layer.c, built and cached on first use) in front
// of the driver; where the device has VK_KHR_cooperative_matrix the layer enables it and swaps
// the SPIR-V of nvg's placeholder kernels for cooperative-matrix kernels (coopmat/). The
// f16-weight GEMMs, the 8-bit ones and the BLR sign GEMMs then run on them: gemm, linearQuant
// and blrGEMM ask coopGEMM / coopQuantGEMM / coopBLRGEMM first (the one seam), which decline
// where tensor cores are off or a shape does not fit; attention and the chunked delta rule choose in their Auto functions
// (AttentionCoopmat, GatedDeltaRuleChunkedCoopmat and their backwards).
// Device.TensorCores says "on (…)" or "off: reason"; NVG_TENSOR_CORES=off opts out, =on forces
// them on CPU adapters; SetTensorCores forces either path (DESIGN.md §7, "Tensor cores through
// a Vulkan layer").
//
// # Profiling
//
// Device.SetProfiling(true) makes Submit run one compute pass per dispatch with timestamps
// between passes; Device.Profile returns per-kernel totals (Profile.String is a table).
// Warm up first: lavapipe compiles a pipeline's machine code at its first dispatch, and
// that time lands in the first timed pass.
//
// # Tests
//
// Tests open the device with gputest.Open, which skips only when no adapter exists and
// fails when NVG_REQUIRE_GPU=1. Every kernel is compared with its host reference on awkward
// sizes with a tolerance derived from its arithmetic; tuned kernels keep a simple twin as
// their reference. Twin implementations share one parity suite (gonum lapack/testlapack
// style): an implementation-independent testX(t, impl) runs every case against the
// float64 host reference, and each implementation is one line, a TestX calling it with its
// launcher, tolerance and options (testDeltaRule, testDeltaRuleBackward, testLinearFamily,
// testBLRForward).
//
// # Where things are
//
//	gpu/device.go, buffer.go       Open, Device.Info, limits, buffers, upload/readback, MemStats
//	gpu/pack.go, view.go           arenas of buffers (Pack) and second names for a buffer's bytes (View)
//	gpu/kernel.go, record.go       KernelSpec and the pipeline cache; Recorder, Temp, Borrow, Dispatch,
//	                               dispatch1D, Grid1D, Cost, Submit
//	gpu/check.go                   the launchers' shared argument checks (need, positive, distinct)
//	gpu/vocab.go                   a [vocab, hidden] table read in vocabulary slices (Embedding,
//	                               TargetLogits): checks, ids, slice rows, one dispatch a slice
//	gpu/profile.go                 the timestamp profiler (SetProfiling, Profile)
//	gpu/<op>.go, <op>_backward.go  one launcher per op (its dims struct beside it), named as the
//	                               WGSL file and the host reference
//	gpu/gated_delta_rule_auto.go   DeltaRuleDims and the coopmat/lanes/chunked/token choice
//	gpu/gemm_lanes.go              the lane-blocked GEMMs' choice and the subgroup probe
//	gpu/coopmat.go                 tensor cores: TensorCores, SetTensorCores, the seam of the
//	                               GEMMs (coopGEMM, coopBLRGEMM), tiles, the self-test at Open
//	gpu/linear_quant.go            LinearQuant (8-bit weights) and its tensor-core seam
//	                               coopQuantGEMM (coopmat_gemm.comp -DQUANT)
//	gpu/vklayer.go, vklayer/       the Vulkan layer (nvg_layer.c): build, cache, environment,
//	                               dlopen and its C API
//	gpu/spirv.go                   the SPIR-V patcher (entry point, SpecIds, LocalSize)
//	gpu/coopmat_attention.go       attention and its backward on tensor cores; CoopmatPackHeads
//	gpu/coopmat_delta.go           the chunked delta rule's inter-chunk stage and backward stages
//	                               on tensor cores
//	gpu/coopmat/                   the GLSL kernels (coopmat_gemm.comp, coopmat_attention.comp,
//	                               coopmat_delta.comp, coopmat_delta_chunk.comp), their committed
//	                               .spv variants, generate.sh (go generate ./gpu) and spv.sum
//	gpu/*_lanes.go                 the other lane-blocked launchers (delta rule, attention)
//	gpu/kl_loss_backward.go        LogitsDims (also LogitsTopK's) and KLOptions
//	gpu/<op>_test.go               parity tests and benchmarks; gputest/ opens the test device
//	wgsl/<op>.wgsl                 one shader per op family (text/template, wgsl.Render)
//	wgsl/reduce.wgsl               library: workgroup reductions (red_: row entry, tree sum and
//	                               max, sums of a norm row, streamed log-sum-exp step)
//	wgsl/elementwise.wgsl          library: 1-D entry point and index (either form), row and
//	                               column, the (window, head, block) grid, Params{n}, sigmoid (ew_)
//	wgsl/gemm_tile.wgsl            library: the tiled GEMM body, GEMM Params and B index, the
//	                               BLR bindings (gemm_)
//	wgsl/attention_lib.wgsl        library: the attention kernels' shared pieces (attn_)
//	wgsl/gated_delta_rule_lib.wgsl library: the delta rule's forward bindings and entry (gdr_)
//	wgsl/rope_lib.wgsl             library: QKNormRoPE's Params and rotation partner (rope_)
//	wgsl/gemm_lanes.wgsl           library: the lane-blocked GEMM body of CPU adapters (lanes_)
//	wgsl/coopmat.wgsl              the placeholder the layer swaps for a cooperative-matrix kernel
//	wgsl/coopmat_pack.wgsl         CoopmatPack: A to f16 with a power-of-two scale per row
//	wgsl/coopmat_pack_heads.wgsl   CoopmatPackHeads: heads' rows to f16, a scale per 64 rows
//	wgsl/coopmat_splitk.wgsl       CoopmatSplitK: the slabs of a split-K GEMM added into C
//	wgsl/gated_delta_rule_chunk_lib.wgsl  library: the chunked delta rule's sub-steps (gdrc_)
//	wgsl/causal_conv1d_lib.wgsl    library: the causal conv's Params and pre-activation (cc_)
package gpu
