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
// workgroup memory stays within 32 KiB).
//
// Specialisation (SpecId, patched by Go): SG, L (the square shape L×L×L), DKP, DVP (dk, dv
// padded to multiples of 4·L), NSG subgroups; the workgroup size SG·NSG.
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
// coopmat_gemm.comp), so that the driver unrolls it once the constants are known (DESIGN.md
// §7, "Tuning on Hopper"); loops over runtime sizes do not.
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
const uint NKT = (C / L) * (DKP / L); // L×L tiles of a [64, DKP] output
const uint NKTS = (NKT + NSG - 1) / NSG; // … per subgroup (at most)
const uint NMT = (C / L) * (C / L);   // L×L tiles of the [64, 64] product
const uint NMTS = (NMT + NSG - 1) / NSG;
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

shared float Cs[NSG * L * L];      // one L×L f32 tile per subgroup (epilogues)
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

// PROD64: Ms[64, 64] = X[xr0 + i, :]·Y[yr0 + s, :] over N8 16-byte vectors of packed columns
// (fragments read from global memory; Y's rows read column-major), unscaled, this
// subgroup's L×L tiles; ACCUMULATE adds FAC·(the product) to Ms instead (FAC0 scales the
// first).
#define PROD64(X, xr0, Y, yr0, N8, FAC, ADD) \
    UNROLL for (uint xs = 0; xs < NMTS; xs++) { \
        const uint x = sg + xs * NSG; \
        if (x >= NMT) { \
            break; \
        } \
        const uint tr = x / (C / L), tc = x % (C / L); \
        ACC a = ACC(0.0); \
        UNROLL for (uint kk = 0; kk < 8 * (N8); kk += L) { \
            FRA fa; \
            FRB fb; \
            coopMatLoad(fa, X, ((xr0) + tr * L) * (N8) + kk / 8, N8, ROW); \
            coopMatLoad(fb, Y, ((yr0) + tc * L) * (N8) + kk / 8, N8, COL); \
            a = coopMatMulAdd(fa, fb, a); \
        } \
        a = a * (FAC); \
        if (ADD) { \
            ACC m; \
            coopMatLoad(m, Ms, tr * L * MS + tc * L, MS, ROW); \
            a = a + m; \
        } \
        coopMatStore(a, Ms, tr * L * MS + tc * L, MS, ROW); \
    }

// KTILE(A-load, B-load, tr, tc): acc = the [64, DKP] output tile (tr, tc) over kk < KLEN.
// EPI(acc, tr, tc, body): the tile through this subgroup's f32 tile, body run per element
// (i, d, v) with i < L, d < dk.
#define EPI(A, tr, tc, BODY) \
    coopMatStore(A, Cs, sg * L * L, L, ROW); \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier(); \
    UNROLL for (uint e = lane; e < L * L; e += SG) { \
        const uint i = (tr) * L + e / L, d = (tc) * L + e % L; \
        if (i < L0 && d < p.dk) { \
            const float v = Cs[sg * L * L + e]; \
            BODY \
        } \
    } \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
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
    // The states of this chunk as packed windows: rows (bj·nck + ci)·TPK + d.
    const uint sw0 = cs * p.tpk, nsb = p.tpk / 64;
    UNROLL for (uint xs = 0; xs < 3 * NKTS; xs++) {
        const uint x = sg + xs * NSG;
        if (x >= 3 * NKT) {
            break;
        }
        const uint which = x / NKT, tr = (x % NKT) / (DKP / L), tc = x % (DKP / L);
        ACC a = ACC(0.0);
        UNROLL for (uint kk = 0; kk < DVP; kk += L) {
            FRA fa;
            FRB fb;
            if (which == 0) {
                coopMatLoad(fa, do16, (pw + tr * L) * V8 + kk / 8, V8, ROW);
                coopMatLoad(fb, h16, (sw0 + tc * L) * V8 + kk / 8, V8, COL);
            } else if (which == 1) {
                coopMatLoad(fa, vn16, (pw + tr * L) * V8 + kk / 8, V8, ROW);
                coopMatLoad(fb, dh16, (sw0 + tc * L) * V8 + kk / 8, V8, COL);
            } else {
                coopMatLoad(fa, dv16, (pw + tr * L) * V8 + kk / 8, V8, ROW);
                coopMatLoad(fb, h16, (sw0 + tc * L) * V8 + kk / 8, V8, COL);
            }
            a = coopMatMulAdd(fa, fb, a);
        }
        const uint sb = cs * nsb + tc * L / 64; // the states' scale block of these columns
        if (which == 0) {
            const float f = sdo[cs] * sh[sb];
            EPI(a, tr, tc, dqv[((row0 + i) * p.hv + j) * p.dk + d] = exp(gam[i]) * (v * f);)
        } else if (which == 1) {
            const float f = svn[cs] * sdh[sb];
            EPI(a, tr, tc, dkv[((row0 + i) * p.hv + j) * p.dk + d] = exp(gl - gam[i]) * (v * f);)
        } else {
            const float f = sdv[cs] * sh[sb];
            EPI(a, tr, tc, dwt[(sr0 + i) * p.dk + d] = -(v * f);)
        }
    }
    // dgl = ⟨h[ci+1], dh[ci]⟩ in f32, partial sums in a fixed order.
    float part = 0.0;
    if (ci + 1 < p.nck) {
        const uint hb = cs * p.dk * p.dv;
        for (uint e = tid; e < p.dk * p.dv; e += NT) {
            part += h[hb + p.dk * p.dv + e] * dh[hb + e];
        }
    }
    barrier(); // Red is free (tileMax is not used here)
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
    // The [64, 64] product: QK dO·V'ᵀ; FST dR·[W U]ᵀ (W's and U's columns apart: their scales).
#if defined(QK)
    PROD64(do16, pw, vn16, pw, V8, sdo[cs] * svn[cs], false)
#else
    PROD64(rw16, pw, w16, pw, K8, srw[cs] * sw[cs], false)
    barrier();
    PROD64(ru16, pw, u16, pw, V8, sru[cs] * su[cs], true)
#endif
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
    UNROLL for (uint which = 0; which < 2; which++) {
#if defined(FST)
      if (which == 1) {
        barrier(); // G's products are done with Mh
        for (uint e = tid; e < C * C; e += NT) {
            const uint i = e / C, s = e % C;
            Mh[i * HS + s] = float16_t(i < L0 ? beta[(row0 + i) * p.hv + j] * (Ms[i * MS + s] * sc) : 0.0);
        }
        barrier();
      }
#endif
      UNROLL for (uint xs = 0; xs < NKTS; xs++) {
        const uint x = sg + xs * NSG;
        if (x >= NKT) {
            break;
        }
        const uint tr = x / (DKP / L), tc = x % (DKP / L);
        ACC a = ACC(0.0);
        UNROLL for (uint kk = 0; kk < C; kk += L) {
            FRA fa;
            FRB fb;
#if defined(QK)
            if (which == 0) {
                coopMatLoad(fa, Mh, tr * L * HS + kk, HS, ROW);
                coopMatLoad(fb, k16, (pq + kk) * K8 + tc * (L / 8), K8, ROW);
            } else {
                coopMatLoad(fa, Mh, kk * HS + tr * L, HS, COL);
                coopMatLoad(fb, q16, (pq + kk) * K8 + tc * (L / 8), K8, ROW);
            }
#else
            if (which == 0) {
                coopMatLoad(fa, Mh, tr * L * HS + kk, HS, ROW);
            } else {
                coopMatLoad(fa, Mh, kk * HS + tr * L, HS, COL);
            }
            coopMatLoad(fb, k16, (pq + kk) * K8 + tc * (L / 8), K8, ROW);
#endif
            a = coopMatMulAdd(fa, fb, a);
        }
#if defined(QK)
        if (which == 0) {
            const float f = inv * sk[ks];
            EPI(a, tr, tc, dqv[((row0 + i) * p.hv + j) * p.dk + d] += v * f;)
        } else {
            const float f = inv * sq[ks];
            EPI(a, tr, tc, dkv[((row0 + i) * p.hv + j) * p.dk + d] += v * f;)
        }
#else
        const float f = inv * sk[ks];
        const uint ws = 3 * p.dk + p.dv, off = (which + 1) * p.dk + p.dv;
        EPI(a, tr, tc, wyb[(sr0 + i) * ws + off + d] = v * f;)
#endif
      }
    }
#endif
}
