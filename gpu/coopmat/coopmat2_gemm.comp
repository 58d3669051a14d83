// coopmat2_gemm.comp: nvg's dense f16 GEMM on VK_NV_cooperative_matrix2 — workgroup-scope
// cooperative matrices whose operands the driver loads straight from the buffers by tensor
// addressing (GL_NV_cooperative_matrix2; Vulkan's VK_NV_cooperative_matrix2, which the
// Vulkan layer enables where the device lists it: gpu/vklayer/nvg_layer.c). The same
// operation and bindings as coopmat_gemm.spv, the KHR (subgroup-scope) kernel it stands in
// for and is parity-tested beside (gpu TestLinearFamily's coopmat2 lines):
//
//   C[M, N] = diag(rs) · (A16[Mp, Kp] · B)      B = B16 [N, K] (TRANS_B) or [K, N]
//
// A16 is CoopmatPack's (wgsl/coopmat_pack.wgsl): the f32 A with each row scaled by a power of
// two that rs[i] undoes, f16, zero-padded to Mp (a multiple of BM) rows and Kp (a multiple of
// BK) columns, so its loads never leave it. B's loads clamp: elements past N or K read 0
// (gl_CooperativeMatrixClampModeConstantNV), and stores past M or N are dropped, so no
// bounds are checked by hand (and the Vulkan layer creates the pipeline with robust buffer
// access off: gpu.coop2GEMM's NoRobust).
//
// Each workgroup computes one BM×BN block of C in one workgroup-scope accumulator: per BK
// slice it loads A's BM×BK and B's BK×BN (transposed by a tensor view where TRANS_B) and
// multiplies; how the loads are staged through shared memory and spread over the subgroups
// is the driver's. Epilogue: each element times rs of its row (coopMatPerElementNV), stored
// as one tensor store.
//
// Split-K: dispatched with S = gl_NumWorkGroups.z > 1 workgroups along z, workgroup z covers
// the z-th run of ⌈(Kp/BK)/S⌉ BK slices and writes slab z of C [S, M, N]; Go sums the slabs
// (wgsl/coopmat_splitk.wgsl), as for coopmat_gemm.spv.
//
// Specialisation (SpecId, patched by Go in the SPIR-V: gpu.coop2GEMM): the block BM×BN×BK,
// TRANS_B and FAST (below); the workgroup size NT is written into OpExecutionMode LocalSize.
// Go checks the block against the device's flexible-dimension shapes (granularities and the
// workgroup size each allows: VkCooperativeMatrixFlexibleDimensionsPropertiesNV).
//
// Bindings (set 0, in order; the WGSL placeholder declares the same): 0 a16 (read, f16
// [Mp, Kp])  1 rs (read, f32 [Mp])  2 b (read, f16)  3 c (read_write, f32 [S, M, N])
// 4 uniform Params {m, n, k, kp}.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require

layout(constant_id = 0) const uint BM = 128;
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 2) const uint BK = 64;
layout(constant_id = 3) const bool TRANS_B = true;
// FAST: a block whose B slices lie wholly inside B (n0 + BN ≤ N, and K = Kp) loads B through
// an unclamped layout, every row stride is given as a multiple of 8 (16-byte rows: Go
// guarantees K % 8 = 0 for TRANS_B, N % 8 = 0 otherwise, and Kp % BK = 0), and the K loop is
// unrolled by UK slices — the form of llama.cpp's coopmat2 GEMM (ggml-vulkan
// mul_mm_cm2.comp), which tells the driver that its loads need no per-element checks and
// may be 16 bytes wide. Off (NVG_COOPMAT2_FAST=off): every block takes the clamped loop.
layout(constant_id = 4) const bool FAST = true;
const uint UK = 4;

// The workgroup size is written by Go into OpExecutionMode LocalSize (a literal, as in
// coopmat_gemm.comp).
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer A16 { float16_t a16[]; };
layout(set = 0, binding = 1, std430) readonly buffer RS { float rs[]; };
layout(set = 0, binding = 2, std430) readonly buffer B16 { float16_t b16[]; };
layout(set = 0, binding = 3, std430) buffer C { float c[]; };
layout(set = 0, binding = 4, std140) uniform Params { uint m, n, k, kp; } p;

// rowScale is the epilogue's per-element operation: element (r, col) of the block whose
// first row is m0, times rs of its row.
float rowScale(const in uint32_t r, const in uint32_t col, const in float e, const in uint32_t m0) {
    return e * rs[m0 + r];
}

void main() {
    const uint n0 = gl_WorkGroupID.x * BN;
    const uint m0 = gl_WorkGroupID.y * BM;
    const uint ns = p.kp / BK;                        // BK slices of K
    const uint per = (ns + gl_NumWorkGroups.z - 1) / gl_NumWorkGroups.z;
    const uint s0 = gl_WorkGroupID.z * per;           // this workgroup's run of slices
    const uint s1 = min(ns, s0 + per);

    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    la = setTensorLayoutDimensionNV(la, gl_NumWorkGroups.y * BM, p.kp);
    if (FAST) {
        la = setTensorLayoutStrideNV(la, p.kp & ~7u, 1);
    }
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lb = TRANS_B ? setTensorLayoutDimensionNV(lb, p.n, p.k) : setTensorLayoutDimensionNV(lb, p.k, p.n);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lc = setTensorLayoutDimensionNV(lc, p.m, p.n);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    uint s = s0;
// SLICE multiplies BK slice S into acc, B loaded through layout LB.
#define SLICE(S, LB)                                                                           \
    {                                                                                          \
        const uint k0 = (S) * BK;                                                              \
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;                       \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;                       \
        coopMatLoadTensorNV(ma, a16, 0, sliceTensorLayoutNV(la, m0, BM, k0, BK));              \
        if (TRANS_B) {                                                                         \
            coopMatLoadTensorNV(mb, b16, 0, sliceTensorLayoutNV(LB, n0, BN, k0, BK), transposed); \
        } else {                                                                               \
            coopMatLoadTensorNV(mb, b16, 0, sliceTensorLayoutNV(LB, k0, BK, n0, BN));          \
        }                                                                                      \
        acc = coopMatMulAdd(ma, mb, acc);                                                      \
    }
    if (FAST && n0 + BN <= p.n && p.k == p.kp) {
        tensorLayoutNV<2> lbu = createTensorLayoutNV(2);
        lbu = TRANS_B ? setTensorLayoutDimensionNV(lbu, p.n, p.k) : setTensorLayoutDimensionNV(lbu, p.k, p.n);
        lbu = setTensorLayoutStrideNV(lbu, (TRANS_B ? p.k : p.n) & ~7u, 1);
        for (; s + UK <= s1; s += UK) {
            [[unroll]] for (uint j = 0; j < UK; j++) {
                SLICE(s + j, lbu)
            }
        }
        for (; s < s1; s++) {
            SLICE(s, lbu)
        }
    } else {
        for (; s < s1; s++) {
            SLICE(s, lb)
        }
    }
    coopMatPerElementNV(acc, acc, rowScale, m0);
    coopMatStoreTensorNV(acc, c, gl_WorkGroupID.z * p.m * p.n, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
}
