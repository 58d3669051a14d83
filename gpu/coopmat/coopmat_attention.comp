// coopmat_attention.comp: causal grouped-query softmax attention and its backward on
// cooperative matrices (tensor cores), swapped in by the Vulkan layer (gpu/vklayer) for the
// WGSL placeholder wgsl/coopmat.wgsl; the choice is gpu's (gpu/coopmat_attention.go,
// AttentionAuto / AttentionBackwardAuto). The math is Attention's and AttentionBackward's
// (gpu/attention.go, gpu/attention_backward.go, host.Attention): with scale = head_dim^−½,
//   s_ij = scale·q_i·k_j for j ≤ i in the same window,  lse_i = log Σ_j e^{s_ij},
//   p_ij = e^{s_ij − lse_i},  out_i = Σ_j p_ij·v_j,
//   D_i = dout_i·out_i,  ds_ij = p_ij·(dout_i·v_j − D_i),
//   dq_i = scale·Σ_j ds_ij·k_j,  dk_j = scale·Σ_i ds_ij·q_i,  dv_j = Σ_i p_ij·dout_i,
// query head h reading KV head h / (nh/nkv).
//
// Operands. q, k, v and dout arrive packed to f16 by wgsl/coopmat_pack_heads.wgsl: per window
// b and head, tp ≥ t rows (zero past t) of HP ≥ head_dim halves (zero past head_dim), each
// block of 64 rows scaled by a power of two whose inverse is in the s* binding
// ([nb, heads, tp/64]). Every product below multiplies f16 fragments read from workgroup
// memory, accumulating in f32, and every block's scales are multiplied back in f32 (exact:
// powers of two). The packed operands are staged as coopmat_gemm.comp stages its A and B:
// slices of KS = 4·L packed columns, every thread loading 16-byte vectors (the next slice's
// issued before the current slice is multiplied) and storing them into the tile St (rows
// padded by 8 halves); no bounds checks, since packed rows and columns are zero-padded. A tile of rows or keys never straddles a 64-row block (BR and BC divide
// 64), so each product's scale is one number. The f32 parts stay f32: scores, the softmax
// statistics, D, ds. f16 tiles: P as f16(2¹⁴·p) (p ≤ 1; the 2¹⁴ keeps small p out of f16's
// subnormals) and dS as f16(2^e·ds) with 2^e putting the tile's largest |ds| in [2¹⁴, 2¹⁵)
// (a workgroup maximum), undone by the accumulation's factor.
//
// Variants (glslang -D, one .spv each; gpu/coopmat/generate.sh):
//   FWD  one workgroup per (window b, query head h, tile of BR query rows), two passes over
//        the key blocks of BC keys up to the tile's last row: pass 1 forms S = Q·Kᵀ tiles in
//        workgroup memory and each thread keeps an online (max, sum) over its share of a row
//        (TPR threads per row), merged once into lse_i; pass 2 forms S again (the same bits),
//        P = f16(2¹⁴·e^{s − lse}) and accumulates O += P·V in cooperative-matrix
//        accumulators (normalised already: no rescaling of O). Writes out and lse.
//   DQ   one workgroup per (b, h, tile of BR query rows): D_i from dout and out (f32), then
//        per key block S = Q·Kᵀ and dP = dO·Vᵀ, ds = p·(dp − D_i), dS scaled to f16, and
//        dq += dS·K. Writes dq and delta (D, for DKV).
//   DKV  one workgroup per (b, KV head kh, tile of BR key rows), looping over the query heads
//        of kh and their query blocks of BC rows at or after the keys: Sᵀ = K·Qᵀ and
//        dPᵀ = V·dOᵀ, pᵀ and dsᵀ, dv += Pᵀ·dO and dk += dSᵀ·Q. Writes dk and dv (summed over
//        the group's heads in order: no sum pass, no atomics).
// Every sum is in a fixed order (deterministic).
//
// Products (register blocking, as coopmat_gemm.comp's subgroups): S-shaped [BR, BC] =
// X·Yᵀ over HP (S_PROD: X's BR and Y's BC packed rows staged slice by slice), each subgroup
// STW accumulators of one tile row, so one A fragment serves STW products; outputs [BR, HP]
// += A·Y (O_PROD: A an f16 tile [BR, BC] in workgroup memory, Y's BC packed rows staged a
// column slice at a time), each subgroup OTW accumulators of one tile row per slice, its A
// fragments loaded once per block. The epilogue's per-subgroup f32 tiles reuse St.
//
// Specialisation (SpecId, patched by Go): the subgroup size SG, the square cooperative-matrix
// shape L (L×L×L, a multiple of 8), the padded head dim HP (a multiple of 4·L), BR rows per
// workgroup, BC rows per inner block (BR, BC multiples of L dividing 64), NSG subgroups; the
// workgroup size SG·NSG (OpExecutionMode LocalSize). Go (coopAttnTile.check) checks that
// SG·NSG is a multiple of BR, and that NSG subgroups split the (BR/L)·(BC/L) score tiles and
// the (BR/L)·4 output tiles of a slice into runs of equal length within one tile row.
//
// Bindings (set 0, in order; the placeholder declares the same):
//   0 q16  1 sq  2 k16  3 sk  4 v16  5 sv  (the packed operands, uvec4 words, and scales)
//   FWD: 6 out (f32 [nb·t, nh, hd], written)  7 lse (f32 [nb·t, nh], written)
//   DQ:  6 do16  7 sdo  8 out  9 dout (f32)  10 lse  11 dq (written)  12 delta (written)
//   DKV: 6 do16  7 sdo  8 lse  9 delta  10 dk (f32 [nb·t, nkv, hd], written)  11 dv
//   last: uniform Params {nb, t, nh, nkv, hd, tp, nblk, scale}.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

// Every loop whose trip count is a specialisation constant carries [[unroll]] (as in
// coopmat_gemm.comp): the driver unrolls it once the constants are known, so the arrays of
// accumulators stay in registers instead of being indexed dynamically (DESIGN.md §7, "Tuning
// on Hopper"). Loops over runtime sizes (key blocks, query heads, head_dim) do not.
#define UNROLL [[unroll]]

layout(constant_id = 0) const uint SG = 32;
layout(constant_id = 1) const uint L = 16;
layout(constant_id = 2) const uint HP = 256;
layout(constant_id = 3) const uint BR = 64;
layout(constant_id = 4) const uint BC = 64;
layout(constant_id = 5) const uint NSG = 8;
// The workgroup size SG·NSG is written by Go into OpExecutionMode LocalSize.
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

const uint NT = SG * NSG;              // threads per workgroup
const uint TPR = NT / BR;              // threads per row of an S tile
const uint H8 = HP / 8;                // 16-byte vectors per packed row
const uint SS = BC + 4;                // f32 row stride of the S-shaped tiles
const uint PS = BC + 8;                // f16 row stride of the P-shaped tiles
const uint KS = 4 * L;                 // packed columns (halves) per staged slice
const uint K8 = KS / 8;                // … in 16-byte vectors
const uint T8 = K8 + 1;                // row stride of a staged tile, 16-byte vectors
const uint NSL = HP / KS;              // slices of a packed row
const uint NST = (BR / L) * (BC / L);  // L×L tiles of an S tile [BR, BC]
const uint STW = NST / NSG;            // … per subgroup, consecutive in one tile row
const uint OTW = (BR / L) * (KS / L) / NSG; // output tiles per subgroup and slice, one row
const uint OPS = OTW * NSL;            // accumulators per subgroup of an output [BR, HP]
const uint XV = BR * K8, YV = BC * K8; // 16-byte vectors of a staged slice of X, of Y
const uint XP = (XV + NT - 1) / NT;    // … per thread
const uint YP = (YV + NT - 1) / NT;
const uint YOFF = BR * T8;             // Y's staged tile, after X's
const uint CT = L * L / 4;             // a subgroup's f32 epilogue tile, 16-byte vectors
const uint STN = (BR + BC) * T8 > NSG * CT ? (BR + BC) * T8 : NSG * CT;
const float FMAX = 3.4028234e38;
const float P_SCALE = 16384.0;         // 2¹⁴: P travels as f16(2¹⁴·p)

layout(set = 0, binding = 0, std430) readonly buffer Q16 { uvec4 q16[]; };
layout(set = 0, binding = 1, std430) readonly buffer SQ { float sq[]; };
layout(set = 0, binding = 2, std430) readonly buffer K16 { uvec4 k16[]; };
layout(set = 0, binding = 3, std430) readonly buffer SK { float sk[]; };
layout(set = 0, binding = 4, std430) readonly buffer V16 { uvec4 v16[]; };
layout(set = 0, binding = 5, std430) readonly buffer SV { float sv[]; };
#if defined(FWD)
layout(set = 0, binding = 6, std430) writeonly buffer Out { float outp[]; };
layout(set = 0, binding = 7, std430) writeonly buffer LSE { float lse[]; };
#define PB 8
#else
layout(set = 0, binding = 6, std430) readonly buffer DO16 { uvec4 do16[]; };
layout(set = 0, binding = 7, std430) readonly buffer SDO { float sdo[]; };
#if defined(DQ)
layout(set = 0, binding = 8, std430) readonly buffer Out { float outp[]; };
layout(set = 0, binding = 9, std430) readonly buffer DOut { float dout[]; };
layout(set = 0, binding = 10, std430) readonly buffer LSE { float lse[]; };
layout(set = 0, binding = 11, std430) writeonly buffer DQb { float dq[]; };
layout(set = 0, binding = 12, std430) writeonly buffer Delta { float delta[]; };
#define PB 13
#else
layout(set = 0, binding = 8, std430) readonly buffer LSE { float lse[]; };
layout(set = 0, binding = 9, std430) readonly buffer Delta { float delta[]; };
layout(set = 0, binding = 10, std430) writeonly buffer DKb { float dk[]; };
layout(set = 0, binding = 11, std430) writeonly buffer DVb { float dv[]; };
#define PB 12
#endif
#endif
layout(set = 0, binding = PB, std140) uniform Params { uint nb, t, nh, nkv, hd, tp, nblk; float scale; } p;

#define ACC coopmat<float, gl_ScopeSubgroup, L, L, gl_MatrixUseAccumulator>
#define FRA coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseA>
#define FRB coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

shared float Ss[BR * SS];          // scores (FWD, DQ: [query, key]; DKV: [key, query])
shared float16_t Ps[BR * PS];      // P (FWD, DKV) or dS (DQ), f16
shared uvec4 St[STN];               // staged slices (f16); the epilogue's f32 tiles
#if defined(FWD)
shared float Ms[NT];               // per-thread running max and sum, merged per row
shared float Ls[NT];
#else
shared float Ds[BR * SS];          // dP, then ds (f32)
shared float Red[NT];              // D's partial sums; the subgroups' max |ds|
#endif
#if defined(DKV)
shared float16_t DSs[BR * PS];     // dSᵀ, f16
shared float Lq[BC];               // lse and D of the block's query rows
shared float Dq[BC];
#endif

// STAGE_LOAD(R, NP, NV, SRC, r0, c0): this thread's vectors of a staged slice into R:
// vector v < NV is column vector c0 + v % K8 of packed row r0 + v / K8 of SRC.
#define STAGE_LOAD(R, NP, NV, SRC, r0, c0) \
    UNROLL for (uint j = 0; j < NP; j++) { \
        const uint v = tid + j * NT; \
        if (v < NV) { \
            R[j] = SRC[((r0) + v / K8) * H8 + (c0) + v % K8]; \
        } \
    }

// STAGE_STORE(R, NP, NV, off): R into the staged tile at St[off] (rows of T8 vectors).
#define STAGE_STORE(R, NP, NV, off) \
    UNROLL for (uint j = 0; j < NP; j++) { \
        const uint v = tid + j * NT; \
        if (v < NV) { \
            St[(off) + (v / K8) * T8 + v % K8] = R[j]; \
        } \
    }

// S_PROD: DST[BR, BC] = X[xr0 + r, :]·Y[yr0 + c, :]ᵀ over the HP packed columns, unscaled
// (f32, row stride SS): slice by slice through St, this subgroup's STW tiles (tile row str,
// columns stc …) in accumulators. Starts with a barrier (St's previous readers are done)
// and ends with the stores into DST (the caller's barrier publishes them).
#define S_PROD(X, xr0, Y, yr0, DST) { \
    ACC sa[STW]; \
    UNROLL for (uint w = 0; w < STW; w++) { \
        sa[w] = ACC(0.0); \
    } \
    uvec4 rx[XP], ry[YP]; \
    STAGE_LOAD(rx, XP, XV, X, xr0, 0) \
    STAGE_LOAD(ry, YP, YV, Y, yr0, 0) \
    UNROLL for (uint sl = 0; sl < NSL; sl++) { \
        barrier(); \
        STAGE_STORE(rx, XP, XV, 0) \
        STAGE_STORE(ry, YP, YV, YOFF) \
        barrier(); \
        if (sl + 1 < NSL) { \
            STAGE_LOAD(rx, XP, XV, X, xr0, (sl + 1) * K8) \
            STAGE_LOAD(ry, YP, YV, Y, yr0, (sl + 1) * K8) \
        } \
        UNROLL for (uint kk = 0; kk < KS; kk += L) { \
            FRA fa; \
            coopMatLoad(fa, St, str * L * T8 + kk / 8, T8, ROW); \
            UNROLL for (uint w = 0; w < STW; w++) { \
                FRB fb; \
                coopMatLoad(fb, St, YOFF + (stc + w) * L * T8 + kk / 8, T8, COL); \
                sa[w] = coopMatMulAdd(fa, fb, sa[w]); \
            } \
        } \
    } \
    UNROLL for (uint w = 0; w < STW; w++) { \
        coopMatStore(sa[w], DST, str * L * SS + (stc + w) * L, SS, ROW); \
    } \
}

// O_PROD: ACCS[o] += FAC·(A[BR, BC]·Y[yr0 + kk, :]) for this subgroup's tiles of the
// [BR, HP] output (A an f16 tile in workgroup memory, row stride PS, published by the
// caller's barrier; Y's BC packed rows staged a column slice at a time): per slice the OTW
// tiles of tile row otr from column otc, accumulator o = slice·OTW + w. Each tile's block
// products go into a fresh accumulator, scaled once. Starts with a barrier.
#define O_PROD(ACCS, FAC, A, Y, yr0) { \
    FRA pa[BC / L]; \
    UNROLL for (uint kk = 0; kk < BC; kk += L) { \
        coopMatLoad(pa[kk / L], A, otr * L * PS + kk, PS, ROW); \
    } \
    uvec4 ry[YP]; \
    STAGE_LOAD(ry, YP, YV, Y, yr0, 0) \
    UNROLL for (uint sl = 0; sl < NSL; sl++) { \
        barrier(); \
        STAGE_STORE(ry, YP, YV, 0) \
        barrier(); \
        if (sl + 1 < NSL) { \
            STAGE_LOAD(ry, YP, YV, Y, yr0, (sl + 1) * K8) \
        } \
        UNROLL for (uint w = 0; w < OTW; w++) { \
            ACC tmp = ACC(0.0); \
            UNROLL for (uint kk = 0; kk < BC; kk += L) { \
                FRB fb; \
                coopMatLoad(fb, St, kk * T8 + (otc + w) * (L / 8), T8, ROW); \
                tmp = coopMatMulAdd(pa[kk / L], fb, tmp); \
            } \
            ACCS[sl * OTW + w] = ACCS[sl * OTW + w] + tmp * (FAC); \
        } \
    } \
}

// STORE_O: DST[((b·t + r0 + r)·HEADS + hd0)·hd + c] = ACCS for rows r0 + r < t and columns
// c < hd, through this subgroup's f32 tile in St (the caller's barrier frees St).
#define STORE_O(ACCS, DST, r0, HEADS, h0) \
    UNROLL for (uint o = 0; o < OPS; o++) { \
        const uint tc = (o / OTW) * (KS / L) + otc + o % OTW; \
        coopMatStore(ACCS[o], St, sg * CT, L / 4, ROW); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        UNROLL for (uint e = lane; e < L * L; e += SG) { \
            const uint i = (r0) + otr * L + e / L, c = tc * L + e % L; \
            if (i < p.t && c < p.hd) { \
                DST[((b * p.t + i) * (HEADS) + (h0)) * p.hd + c] = uintBitsToFloat(St[sg * CT + e / 4][e % 4]); \
            } \
        } \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
    }

// pow2Scale returns 2^e with the largest |value| mx·2^e in [2¹⁴, 2¹⁵) (1 for 0 or non-finite).
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

// tileMax is the maximum of mx over the workgroup (subgroups, then their maxima in Red).
#if !defined(FWD)
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
#endif

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    const uint nrb = (p.t + BR - 1) / BR;
    const uint r = tid / TPR, seg = tid % TPR; // this thread's row of the S tile and its share
    const uint str = sg * STW / (BC / L), stc = sg * STW % (BC / L); // its subgroup's S tiles
    const uint otr = sg * OTW / (KS / L), otc = sg * OTW % (KS / L); // … output tiles per slice
#if defined(DKV)
    if (wg >= p.nb * p.nkv * nrb) { // uniform per workgroup
        return;
    }
    const uint rb = wg % nrb, bk = wg / nrb, kh = bk % p.nkv, b = bk / p.nkv;
    const uint group = p.nh / p.nkv;
    const uint j0 = rb * BR, j = j0 + r;      // this thread's key
    const uint krow0 = bk * p.tp;            // packed row of the window's first key
    const float ks = sk[bk * p.nblk + j0 / 64];
    const float vs = sv[bk * p.nblk + j0 / 64];
    ACC accK[OPS], accV[OPS];
    UNROLL for (uint o = 0; o < OPS; o++) {
        accK[o] = ACC(0.0);
        accV[o] = ACC(0.0);
    }
    for (uint g = 0; g < group; g++) {
        const uint h = kh * group + g, bh = b * p.nh + h;
        for (uint i0 = (j0 / BC) * BC; i0 < p.t; i0 += BC) {
            const float qs = sq[bh * p.nblk + i0 / 64], dos = sdo[bh * p.nblk + i0 / 64];
            barrier(); // the previous block's products are done with the tiles
            for (uint c = tid; c < BC; c += NT) {
                const uint i = i0 + c;
                Lq[c] = i < p.t ? lse[(b * p.t + i) * p.nh + h] : 0.0;
                Dq[c] = i < p.t ? delta[(b * p.t + i) * p.nh + h] : 0.0;
            }
            S_PROD(k16, krow0 + j0, q16, bh * p.tp + i0, Ss)
            S_PROD(v16, krow0 + j0, do16, bh * p.tp + i0, Ds)
            barrier();
            const float fs = ks * qs * p.scale, fd = vs * dos;
            float mx = 0.0;
            for (uint c = seg; c < BC; c += TPR) {
                const uint i = i0 + c;
                float pv = 0.0, ds = 0.0;
                if (j < p.t && j <= i && i < p.t) {
                    pv = exp(Ss[r * SS + c] * fs - Lq[c]);
                    ds = pv * (Ds[r * SS + c] * fd - Dq[c]);
                }
                Ps[r * PS + c] = float16_t(pv * P_SCALE);
                Ds[r * SS + c] = ds;
                mx = max(mx, abs(ds));
            }
            float inv;
            const float dsc = pow2Scale(tileMax(mx, sg, lane), inv);
            for (uint c = seg; c < BC; c += TPR) {
                DSs[r * PS + c] = float16_t(Ds[r * SS + c] * dsc);
            }
            barrier();
            O_PROD(accV, dos / P_SCALE, Ps, do16, bh * p.tp + i0)
            O_PROD(accK, inv * qs * p.scale, DSs, q16, bh * p.tp + i0)
        }
    }
    barrier(); // every subgroup's products are done with St
    STORE_O(accK, dk, j0, p.nkv, kh)
    STORE_O(accV, dv, j0, p.nkv, kh)
#else
    if (wg >= p.nb * p.nh * nrb) { // uniform per workgroup
        return;
    }
    const uint rb = wg % nrb, bh = wg / nrb, h = bh % p.nh, b = bh / p.nh;
    const uint kh = h / (p.nh / p.nkv), bk = b * p.nkv + kh;
    const uint i0 = rb * BR, i = i0 + r;     // this thread's query row
    const bool live = i < p.t;
    const uint qrow0 = bh * p.tp + i0;       // packed row of the tile's first query
    const uint krow0 = bk * p.tp;            // packed row of the window's first key
    const float qs = sq[bh * p.nblk + i0 / 64];
    const uint nkb = (min(i0 + BR, p.t) + BC - 1) / BC; // key blocks up to the tile's last row
    ACC acc[OPS];
    UNROLL for (uint o = 0; o < OPS; o++) {
        acc[o] = ACC(0.0);
    }
#if defined(FWD)
    // Pass 1: the row's max m and Σ e^{s − m}, online over this thread's share of each block.
    float m = -FMAX, l = 0.0;
    for (uint kb = 0; kb < nkb; kb++) {
        const uint j0 = kb * BC;
        S_PROD(q16, qrow0, k16, krow0 + j0, Ss) // (its barriers: the previous block's reads of Ss are done)
        barrier();
        const float f = qs * sk[bk * p.nblk + j0 / 64] * p.scale;
        for (uint c = seg; c < BC; c += TPR) {
            if (live && j0 + c <= i) {
                const float s = Ss[r * SS + c] * f;
                if (s > m) {
                    l = l * exp(m - s) + 1.0;
                    m = s;
                } else {
                    l += exp(s - m);
                }
            }
        }
    }
    Ms[tid] = m;
    Ls[tid] = l;
    barrier();
    float mr = -FMAX, lr = 0.0;
    for (uint x = 0; x < TPR; x++) {
        mr = max(mr, Ms[r * TPR + x]);
    }
    for (uint x = 0; x < TPR; x++) {
        lr += Ls[r * TPR + x] * exp(Ms[r * TPR + x] - mr);
    }
    const float li = mr + log(lr);
    if (live && seg == 0) {
        lse[(b * p.t + i) * p.nh + h] = li;
    }
    // Pass 2: P = e^{s − lse} (the same s), O += P·V.
    for (uint kb = 0; kb < nkb; kb++) {
        const uint j0 = kb * BC;
        S_PROD(q16, qrow0, k16, krow0 + j0, Ss) // (its barriers: the previous block is done with Ss, Ps)
        barrier();
        const float f = qs * sk[bk * p.nblk + j0 / 64] * p.scale;
        for (uint c = seg; c < BC; c += TPR) {
            float pv = 0.0;
            if (live && j0 + c <= i) {
                pv = exp(Ss[r * SS + c] * f - li);
            }
            Ps[r * PS + c] = float16_t(pv * P_SCALE);
        }
        barrier();
        O_PROD(acc, sv[bk * p.nblk + j0 / 64] / P_SCALE, Ps, v16, krow0 + j0)
    }
    barrier(); // every subgroup's products are done with St
    STORE_O(acc, outp, i0, p.nh, h)
#else
    // D_i = dout_i·out_i in f32, TPR partial sums per row.
    float dpart = 0.0;
    if (live) {
        const uint ob = ((b * p.t + i) * p.nh + h) * p.hd;
        for (uint c = seg; c < p.hd; c += TPR) {
            dpart += dout[ob + c] * outp[ob + c];
        }
    }
    Red[tid] = dpart;
    barrier();
    float di = 0.0;
    for (uint x = 0; x < TPR; x++) {
        di += Red[r * TPR + x];
    }
    float li = 0.0;
    if (live) {
        li = lse[(b * p.t + i) * p.nh + h];
        if (seg == 0) {
            delta[(b * p.t + i) * p.nh + h] = di;
        }
    }
    const float dos = sdo[bh * p.nblk + i0 / 64];
    for (uint kb = 0; kb < nkb; kb++) {
        const uint j0 = kb * BC;
        // (S_PROD's barriers: the previous block's products are done with the tiles, Red read)
        S_PROD(q16, qrow0, k16, krow0 + j0, Ss)
        S_PROD(do16, qrow0, v16, krow0 + j0, Ds)
        barrier();
        const float ks = sk[bk * p.nblk + j0 / 64];
        const float fs = qs * ks * p.scale, fd = dos * sv[bk * p.nblk + j0 / 64];
        float mx = 0.0;
        for (uint c = seg; c < BC; c += TPR) {
            float ds = 0.0;
            if (live && j0 + c <= i) {
                const float pv = exp(Ss[r * SS + c] * fs - li);
                ds = pv * (Ds[r * SS + c] * fd - di);
            }
            Ds[r * SS + c] = ds;
            mx = max(mx, abs(ds));
        }
        float inv;
        const float dsc = pow2Scale(tileMax(mx, sg, lane), inv);
        for (uint c = seg; c < BC; c += TPR) {
            Ps[r * PS + c] = float16_t(Ds[r * SS + c] * dsc);
        }
        barrier();
        O_PROD(acc, inv * ks * p.scale, Ps, k16, krow0 + j0)
    }
    barrier(); // every subgroup's products are done with St
    STORE_O(acc, dq, i0, p.nh, h)
#endif
#endif
}
