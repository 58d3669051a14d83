// coopmat_delta_chunk.comp: the chunk-parallel stages of the chunked gated delta rule's
// backward on cooperative matrices (tensor cores), swapped in by the Vulkan layer
// (gpu/vklayer) for the WGSL placeholder wgsl/coopmat.wgsl; the choice is gpu's
// (gpu/coopmat_delta.go, GatedDeltaRuleChunkedBackwardCoopmat). The math is
// gated_delta_rule_chunked_backward.wgsl's stages State, QK and F (fla's chunk_bwd_dqkwg and
// prepare_wy_repr_bwd; DESIGN.md §9): one workgroup per (window b, value head j, chunk ci of
// L ≤ 64 tokens), key head kh = j / (hv/hk), D_is = e^{γ_i − γ_s}, S = h[ci], dH = dh[ci]:
//   STATE  dqv = diag(e^{γ})·dO·Sᵀ,  dkv = diag(e^{γ_{L−1} − γ})·V'·dHᵀ,  dwt = −dV'·Sᵀ,
//          dgl[ci] = ⟨h[ci+1], dH⟩ (0 for the last chunk; f32 from the f32 states)
//   QK     dM = D ⊙ tril(dO·V'ᵀ);  dqv += dM·K,  dkv += dMᵀ·Q
//   FST    F = −D ⊙ tril(dR·[W U]ᵀ, −1);  G = F·K,  H = Fᵀ·diag(β)·K  (into wyb's G and H)
//
// Operands arrive packed to f16 by wgsl/coopmat_pack_heads.wgsl (per window and head, rows
// zero-padded to a multiple of 64 and columns to DKP or DVP, a power-of-two scale per 64
// rows whose inverse is in the s* binding): the chunk's rows of dO, V', dV', W, U, dR (its W
// and U columns packed apart), q and k, one scale each per chunk; the states h[ci], dh[ci]
// as windows of their own (rows d < dk padded to TPK, a scale per 64 rows of d). The f32
// tiles dM and F (masked, decayed) go to f16 with a power-of-two scale from their largest
// |value| (a workgroup maximum). Every product accumulates in f32; the scales multiply back in
// f32 (exact); outputs are written (QK: added) in f32 for rows < L and columns < dk. FST forms
// G from F's f16 tile, then overwrites the tile with diag(β)·F for H (one tile: the
// workgroup memory stays within 48 KiB).
//
// Products (staged as coopmat_gemm.comp stages its operands; the subgroups in a WR×WC grid,
// each a block of tiles in accumulators so that every fragment serves several products):
// PROD, a [64, 64] block of X·Yᵀ over a packed width (dO·V'ᵀ, dR·Wᵀ + dRu·Uᵀ, and the
// STATE products, whose Y are 64 rows of a state window), Y's 64 packed rows (read
// column-major) staged in slices of KS = 4·L columns (the next slice's 16-byte loads in
// flight during the products), X's row-major fragments read from global memory (staging
// both would not fit lavapipe's 32 KiB beside Ms and Mh); OBLK, a [64, KS] column block of M·Y (M the f16 tile Mh or its transpose, Y the
// chunk's 64 packed rows of k or q), Y's block staged whole. The epilogues' per-subgroup f32
// tiles reuse the staging tile.
//
// Specialisation (SpecId, patched by Go): SG, L (the square shape L×L×L), DKP, DVP (dk, dv
// padded to multiples of 4·L), NSG subgroups (4: a 2×2 grid); the workgroup size SG·NSG.
//
// Bindings (set 0, in order; uvec4 packed operands, f32 scales and buffers; the placeholder
// declares the same), each variant's uniform Params {nb, t, hk, hv, nck, tp, dk, dv, tpk}
// last:
//   STATE: 0 do16 1 sdo 2 vn16 3 svn 4 dv16 5 sdv 6 h16 7 sh 8 dh16 9 sdh 10 h 11 dh 12 gc
//          13 dqv 14 dkv 15 dwt 16 dgl (written)
//   QK:    0 do16 1 sdo 2 vn16 3 svn 4 q16 5 sq 6 k16 7 sk 8 gc 9 dqv 10 dkv (read, added to)
//   FST:   0 rw16 1 srw 2 ru16 3 sru 4 w16 5 sw 6 u16 7 su 8 k16 9 sk 10 gc 11 beta 12 wyb
//          (f32 [nb·hv·t, 3·dk + dv]: dR read from the packs, G and H written)
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

// Every loop whose trip count is a specialisation constant carries [[unroll]] (as in
// coopmat_gemm.comp): the driver unrolls it once the constants are known, so the arrays of
// accumulators and fragments stay in registers (DESIGN.md §7, "Tuning on Hopper"); loops
// over runtime sizes do not.
#define UNROLL [[unroll]]

layout(constant_id = 0) const uint SG = 32;
layout(constant_id = 1) const uint L = 16;
layout(constant_id = 2) const uint DKP = 128;
layout(constant_id = 3) const uint DVP = 128;
layout(constant_id = 4) const uint NSG = 4;
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

const uint C = 64;                 // chunk length
const uint NT = SG * NSG;
const uint K8 = DKP / 8, V8 = DVP / 8;
const uint MS = C + 4;             // f32 row stride of the [64, 64] tile
const uint HS = C + 8;             // f16 row stride
const uint KS = 4 * L;             // packed columns (halves) of a staged slice; OBLK's width
const uint S8 = KS / 8;            // … in 16-byte vectors
const uint T8 = S8 + 1;            // row stride of a staged tile, 16-byte vectors
const uint SV = C * S8;            // 16-byte vectors of a staged [64, KS] slice
const uint SP = (SV + NT - 1) / NT; // … per thread
const uint CT = L * L / 4;         // a subgroup's f32 epilogue tile, 16-byte vectors
const uint STN = C * T8 > NSG * CT ? C * T8 : NSG * CT;
const uint WR = 2, WC = NSG / WR;  // the subgroups' grid (Go: NSG = 4)
const uint PR = (C / L) / WR, PC = (C / L) / WC;  // a subgroup's tiles of a [64, 64] block
const uint OR = (C / L) / WR, OC = (KS / L) / WC; // … of a [64, KS] block
const float FMAX = 3.4028234e38;

#if defined(STATE)
layout(set = 0, binding = 0, std430) readonly buffer DO16 { uvec4 do16[]; };
layout(set = 0, binding = 1, std430) readonly buffer SDO { float sdo[]; };
layout(set = 0, binding = 2, std430) readonly buffer VN16 { uvec4 vn16[]; };
layout(set = 0, binding = 3, std430) readonly buffer SVN { float svn[]; };
layout(set = 0, binding = 4, std430) readonly buffer DV16 { uvec4 dv16[]; };
layout(set = 0, binding = 5, std430) readonly buffer SDV { float sdv[]; };
layout(set = 0, binding = 6, std430) readonly buffer H16 { uvec4 h16[]; };
layout(set = 0, binding = 7, std430) readonly buffer SH { float sh[]; };
layout(set = 0, binding = 8, std430) readonly buffer DH16 { uvec4 dh16[]; };
layout(set = 0, binding = 9, std430) readonly buffer SDH { float sdh[]; };
layout(set = 0, binding = 10, std430) readonly buffer Hf { float h[]; };
layout(set = 0, binding = 11, std430) readonly buffer DHf { float dh[]; };
layout(set = 0, binding = 12, std430) readonly buffer GC { float gc[]; };
layout(set = 0, binding = 13, std430) writeonly buffer DQV { float dqv[]; };
layout(set = 0, binding = 14, std430) writeonly buffer DKV { float dkv[]; };
layout(set = 0, binding = 15, std430) writeonly buffer DWT { float dwt[]; };
layout(set = 0, binding = 16, std430) writeonly buffer DGL { float dgl[]; };
#define PB 17
#elif defined(QK)
layout(set = 0, binding = 0, std430) readonly buffer DO16 { uvec4 do16[]; };
layout(set = 0, binding = 1, std430) readonly buffer SDO { float sdo[]; };
layout(set = 0, binding = 2, std430) readonly buffer VN16 { uvec4 vn16[]; };
layout(set = 0, binding = 3, std430) readonly buffer SVN { float svn[]; };
layout(set = 0, binding = 4, std430) readonly buffer Q16 { uvec4 q16[]; };
layout(set = 0, binding = 5, std430) readonly buffer SQ { float sq[]; };
layout(set = 0, binding = 6, std430) readonly buffer K16 { uvec4 k16[]; };
layout(set = 0, binding = 7, std430) readonly buffer SK { float sk[]; };
layout(set = 0, binding = 8, std430) readonly buffer GC { float gc[]; };
layout(set = 0, binding = 9, std430) buffer DQV { float dqv[]; };
layout(set = 0, binding = 10, std430) buffer DKV { float dkv[]; };
#define PB 11
#else
layout(set = 0, binding = 0, std430) readonly buffer RW16 { uvec4 rw16[]; };
layout(set = 0, binding = 1, std430) readonly buffer SRW { float srw[]; };
layout(set = 0, binding = 2, std430) readonly buffer RU16 { uvec4 ru16[]; };
layout(set = 0, binding = 3, std430) readonly buffer SRU { float sru[]; };
layout(set = 0, binding = 4, std430) readonly buffer W16 { uvec4 w16[]; };
layout(set = 0, binding = 5, std430) readonly buffer SW { float sw[]; };
layout(set = 0, binding = 6, std430) readonly buffer U16 { uvec4 u16[]; };
layout(set = 0, binding = 7, std430) readonly buffer SU { float su[]; };
layout(set = 0, binding = 8, std430) readonly buffer K16 { uvec4 k16[]; };
layout(set = 0, binding = 9, std430) readonly buffer SK { float sk[]; };
layout(set = 0, binding = 10, std430) readonly buffer GC { float gc[]; };
layout(set = 0, binding = 11, std430) readonly buffer Beta { float beta[]; };
layout(set = 0, binding = 12, std430) buffer WYB { float wyb[]; };
#define PB 13
#endif
layout(set = 0, binding = PB, std140) uniform Params { uint nb, t, hk, hv, nck, tp, dk, dv, tpk; } p;

#define ACC coopmat<float, gl_ScopeSubgroup, L, L, gl_MatrixUseAccumulator>
#define FRA coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseA>
#define FRB coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

shared uvec4 St[STN];              // staged slices (f16); the epilogues' f32 tiles
shared float gam[C];               // γ of the chunk's rows (0 past L)
shared float Red[NT];              // reductions
#if !defined(STATE)
shared float Ms[C * MS];           // the [64, 64] product (f32)
shared float16_t Mh[C * HS];       // dM, or F then diag(β)·F, f16
#endif

// pow2Scale returns 2^e with mx·2^e in [2¹⁴, 2¹⁵) (1 for 0 or non-finite) and inv = 2^−e.
float pow2Scale(float mx, out float inv) {
    int e = 0;
    if (mx > 0.0 && mx <= FMAX) {
        int x;
        frexp(mx, x);
        e = clamp(15 - x, -126, 126);
    }
    inv = ldexp(1.0, -e);
    return ldexp(1.0, e);
}

// tileMax is the maximum of mx over the workgroup.
float tileMax(float mx, uint sg, uint lane) {
    mx = subgroupMax(mx);
    if (lane == 0) {
        Red[sg] = mx;
    }
    barrier();
    float m = 0.0;
    UNROLL for (uint x = 0; x < NSG; x++) {
        m = max(m, Red[x]);
    }
    return m;
}

// STAGE_LOAD(R, SRC, r0, N8, c0): this thread's vectors of a staged [64, KS] slice into R:
// vector v < SV is column vector c0 + v % S8 of packed row r0 + v / S8 (rows of N8 vectors).
#define STAGE_LOAD(R, SRC, r0, N8, c0) \
    UNROLL for (uint jv = 0; jv < SP; jv++) { \
        const uint v = tid + jv * NT; \
        if (v < SV) { \
            R[jv] = SRC[((r0) + v / S8) * (N8) + (c0) + v % S8]; \
        } \
    }

// STAGE_STORE(R, off): R into the staged tile at St[off] (rows of T8 vectors).
#define STAGE_STORE(R, off) \
    UNROLL for (uint jv = 0; jv < SP; jv++) { \
        const uint v = tid + jv * NT; \
        if (v < SV) { \
            St[(off) + (v / S8) * T8 + v % S8] = R[jv]; \
        } \
    }

// PROD(A, X, xr0, Y, yr0, N8): A[PR·PC] = this subgroup's tiles (rows wr·PR + i, columns
// wc·PC + j) of the [64, 64] block X[xr0 + i, :]·Y[yr0 + s, :]ᵀ over N8 packed 16-byte
// vectors (a multiple of S8), unscaled; Y's rows staged slice by slice, X's fragments read
// from global memory. Starts with a barrier (St's previous readers are done).
#define PROD(A, X, xr0, Y, yr0, N8) { \
    UNROLL for (uint w = 0; w < PR * PC; w++) { \
        A[w] = ACC(0.0); \
    } \
    uvec4 ry[SP]; \
    STAGE_LOAD(ry, Y, yr0, N8, 0) \
    UNROLL for (uint k0 = 0; k0 < (N8); k0 += S8) { \
        barrier(); \
        STAGE_STORE(ry, 0) \
        barrier(); \
        if (k0 + S8 < (N8)) { \
            STAGE_LOAD(ry, Y, yr0, N8, k0 + S8) \
        } \
        UNROLL for (uint kk = 0; kk < KS; kk += L) { \
            FRA fa[PR]; \
            UNROLL for (uint pi = 0; pi < PR; pi++) { \
                coopMatLoad(fa[pi], X, ((xr0) + (wr * PR + pi) * L) * (N8) + k0 + kk / 8, N8, ROW); \
            } \
            UNROLL for (uint pj = 0; pj < PC; pj++) { \
                FRB fb; \
                coopMatLoad(fb, St, (wc * PC + pj) * L * T8 + kk / 8, T8, COL); \
                UNROLL for (uint pi = 0; pi < PR; pi++) { \
                    A[pi * PC + pj] = coopMatMulAdd(fa[pi], fb, A[pi * PC + pj]); \
                } \
            } \
        } \
    } \
}

// OBLK(A, TRANS, Y, yr0, cb): A[OR·OC] = this subgroup's tiles (rows wr·OR + i, columns
// wc·OC + j of the block) of column block cb (KS columns) of M·Y[yr0 + kk, :] over the 64
// rows kk, M = Mh (or Mhᵀ when TRANS), unscaled; Y's block (rows of K8 vectors) staged
// whole. Mh must be published by the caller's barrier. Starts with a barrier.
#define OBLK(A, TRANS, Y, yr0, cb) { \
    UNROLL for (uint w = 0; w < OR * OC; w++) { \
        A[w] = ACC(0.0); \
    } \
    uvec4 ry[SP]; \
    STAGE_LOAD(ry, Y, yr0, K8, (cb) * S8) \
    barrier(); \
    STAGE_STORE(ry, 0) \
    barrier(); \
    UNROLL for (uint kk = 0; kk < C; kk += L) { \
        FRA fa[OR]; \
        UNROLL for (uint pi = 0; pi < OR; pi++) { \
            if (TRANS) { \
                coopMatLoad(fa[pi], Mh, kk * HS + (wr * OR + pi) * L, HS, COL); \
            } else { \
                coopMatLoad(fa[pi], Mh, (wr * OR + pi) * L * HS + kk, HS, ROW); \
            } \
        } \
        UNROLL for (uint pj = 0; pj < OC; pj++) { \
            FRB fb; \
            coopMatLoad(fb, St, kk * T8 + (wc * OC + pj) * (L / 8), T8, ROW); \
            UNROLL for (uint pi = 0; pi < OR; pi++) { \
                A[pi * OC + pj] = coopMatMulAdd(fa[pi], fb, A[pi * OC + pj]); \
            } \
        } \
    } \
}

// EPI(A, tr, tc, BODY): the accumulator A of output tile (tr, tc) through this subgroup's
// f32 tile in St, BODY run per element (i, d, v) with i < L0, d < dk. The caller's barrier
// frees St.
#define EPI(A, tr, tc, BODY) \
    coopMatStore(A, St, sg * CT, L / 4, ROW); \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier(); \
    UNROLL for (uint e = lane; e < L * L; e += SG) { \
        const uint i = (tr) * L + e / L, d = (tc) * L + e % L; \
        if (i < L0 && d < p.dk) { \
            const float v = uintBitsToFloat(St[sg * CT + e / 4][e % 4]); \
            BODY \
        } \
    } \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();

#if defined(STATE)
// STATE_PROD(X, Y, f, BODY): the [64, DKP] output X·Yᵀ (Y the state window's rows) in
// column blocks of 64, each through PROD, then v·f per element into BODY (EPI's i, d, v;
// fs is v·f).
#define STATE_PROD(X, Y, FAC, BODY) \
    UNROLL for (uint cb = 0; cb < (DKP + C - 1) / C; cb++) { \
        ACC a[PR * PC]; \
        PROD(a, X, pw, Y, sw0 + cb * C, V8) \
        const float f = (FAC); \
        barrier(); /* every subgroup's products are done with St */ \
        UNROLL for (uint ti = 0; ti < PR; ti++) { \
            UNROLL for (uint tj = 0; tj < PC; tj++) { \
                EPI(a[ti * PC + tj], wr * PR + ti, cb * (C / L) + wc * PC + tj, const float fs = v * f; BODY) \
            } \
        } \
    }
#else
// OUT_PROD(TRANS, Y, FAC, BODY): the [64, DKP] output M·Y (OBLK) block by block, v·FAC per
// element into BODY (EPI's i, d, v; fs is v·FAC).
#define OUT_PROD(TRANS, Y, FAC, BODY) \
    UNROLL for (uint cb = 0; cb < DKP / KS; cb++) { \
        ACC a[OR * OC]; \
        OBLK(a, TRANS, Y, pq, cb) \
        barrier(); /* every subgroup's products are done with St */ \
        UNROLL for (uint ti = 0; ti < OR; ti++) { \
            UNROLL for (uint tj = 0; tj < OC; tj++) { \
                EPI(a[ti * OC + tj], wr * OR + ti, cb * (KS / L) + wc * OC + tj, const float fs = v * (FAC); BODY) \
            } \
        } \
    }
#endif

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
    const uint wr = sg / WC, wc = sg % WC;  // this subgroup's place in the grid
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (wg >= p.nb * p.hv * p.nck) { // uniform per workgroup
        return;
    }
    const uint ci = wg % p.nck, bj = wg / p.nck, j = bj % p.hv, b = bj / p.hv;
    const uint kh = j / (p.hv / p.hk), bk = b * p.hk + kh;
    const uint t0 = ci * C, L0 = min(C, p.t - t0);
    const uint sr0 = bj * p.t + t0, row0 = b * p.t + t0;
    const uint pw = bj * p.tp + t0;   // packed row of the value-head operands
    const uint pq = bk * p.tp + t0;   // packed row of q, k
    const uint cs = bj * p.nck + ci;  // their scales
    const uint ks = bk * p.nck + ci;
    for (uint i = tid; i < C; i += NT) {
        gam[i] = i < L0 ? gc[sr0 + i] : 0.0;
    }
    barrier();
    const float gl = gam[L0 - 1];
#if defined(STATE)
    // The states of this chunk as packed windows: rows (bj·nck + ci)·TPK + d, a scale per
    // 64 of them (the column block cb's).
    const uint sw0 = cs * p.tpk, nsb = p.tpk / 64;
    STATE_PROD(do16, h16, sdo[cs] * sh[cs * nsb + cb], dqv[((row0 + i) * p.hv + j) * p.dk + d] = exp(gam[i]) * fs;)
    STATE_PROD(vn16, dh16, svn[cs] * sdh[cs * nsb + cb], dkv[((row0 + i) * p.hv + j) * p.dk + d] = exp(gl - gam[i]) * fs;)
    STATE_PROD(dv16, h16, sdv[cs] * sh[cs * nsb + cb], dwt[(sr0 + i) * p.dk + d] = -fs;)
    // dgl = ⟨h[ci+1], dh[ci]⟩ in f32, partial sums in a fixed order.
    float part = 0.0;
    if (ci + 1 < p.nck) {
        const uint hb = cs * p.dk * p.dv;
        for (uint e = tid; e < p.dk * p.dv; e += NT) {
            part += h[hb + p.dk * p.dv + e] * dh[hb + e];
        }
    }
    Red[tid] = part;
    barrier();
    if (tid == 0) {
        float s = 0.0;
        for (uint x = 0; x < NT; x++) {
            s += Red[x];
        }
        dgl[cs] = s;
    }
#else
    // The [64, 64] product: QK dO·V'ᵀ; FST dR·[W U]ᵀ (W's and U's columns apart: their
    // scales), each subgroup's tiles into Ms (its own: no barrier between the two).
    {
        ACC a[PR * PC];
#if defined(QK)
        PROD(a, do16, pw, vn16, pw, V8)
        const float f = sdo[cs] * svn[cs];
#else
        PROD(a, rw16, pw, w16, pw, K8)
        float f = srw[cs] * sw[cs];
        UNROLL for (uint w = 0; w < PR * PC; w++) {
            const uint tr = wr * PR + w / PC, tc = wc * PC + w % PC;
            coopMatStore(a[w] * f, Ms, tr * L * MS + tc * L, MS, ROW);
        }
        PROD(a, ru16, pw, u16, pw, V8)
        f = sru[cs] * su[cs];
#endif
        UNROLL for (uint w = 0; w < PR * PC; w++) {
            const uint tr = wr * PR + w / PC, tc = wc * PC + w % PC;
            ACC m = a[w] * f;
#if defined(FST)
            ACC m0;
            coopMatLoad(m0, Ms, tr * L * MS + tc * L, MS, ROW);
            m = m + m0;
#endif
            coopMatStore(m, Ms, tr * L * MS + tc * L, MS, ROW);
        }
    }
    barrier();
    // Mask and decay in f32 (QK: s ≤ i; FST: s < i, negated), then to f16 with the tile's scale.
    float mx = 0.0;
    for (uint e = tid; e < C * C; e += NT) {
        const uint i = e / C, s = e % C;
        float v = 0.0;
#if defined(QK)
        if (i < L0 && s <= i) {
            v = exp(min(gam[i] - gam[s], 0.0)) * Ms[i * MS + s];
        }
#else
        if (i < L0 && s < i) {
            v = -exp(min(gam[i] - gam[s], 0.0)) * Ms[i * MS + s];
        }
#endif
        Ms[i * MS + s] = v;
        mx = max(mx, abs(v));
    }
    float inv;
    const float sc = pow2Scale(tileMax(mx, sg, lane), inv);
    for (uint e = tid; e < C * C; e += NT) {
        const uint i = e / C, s = e % C;
        Mh[i * HS + s] = float16_t(Ms[i * MS + s] * sc);
    }
    barrier();
    // The [64, DKP] outputs: QK dqv += dM·K, dkv += dMᵀ·Q; FST G = F·K, then (Mh rewritten)
    // H = (diag(β)·F)ᵀ·K.
#if defined(QK)
    OUT_PROD(false, k16, inv * sk[ks], dqv[((row0 + i) * p.hv + j) * p.dk + d] += fs;)
    OUT_PROD(true, q16, inv * sq[ks], dkv[((row0 + i) * p.hv + j) * p.dk + d] += fs;)
#else
    const uint ws = 3 * p.dk + p.dv;
    OUT_PROD(false, k16, inv * sk[ks], wyb[(sr0 + i) * ws + p.dk + p.dv + d] = fs;)
    barrier(); // G's products are done with Mh
    for (uint e = tid; e < C * C; e += NT) {
        const uint i = e / C, s = e % C;
        Mh[i * HS + s] = float16_t(i < L0 ? beta[(row0 + i) * p.hv + j] * (Ms[i * MS + s] * sc) : 0.0);
    }
    barrier();
    OUT_PROD(true, k16, inv * sk[ks], wyb[(sr0 + i) * ws + 2 * p.dk + p.dv + d] = fs;)
#endif
#endif
}
