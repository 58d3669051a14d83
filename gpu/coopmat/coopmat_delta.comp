// coopmat_delta.comp: the chunked gated delta rule's sequential stages on cooperative
// matrices (tensor cores), swapped in by the Vulkan layer (gpu/vklayer) for the WGSL
// placeholder wgsl/coopmat.wgsl; the choice is gpu's (gpu/coopmat_delta.go,
// GatedDeltaRuleAuto, GatedDeltaRuleBackwardAuto). Per window b, value head j (key head
// kh = j / (hv/hk)) and slice of CS value columns, chunk by chunk (L ≤ 64 tokens, γ the
// chunk-local cumulative log-decay, W, U, Aqk from the intra-chunk kernel; DESIGN.md §9 "The
// gated delta rule, chunked"):
//   INTER (the default variant; gated_delta_rule_chunked.wgsl's inter-chunk part,
//   fla/ops/common/chunk_delta_h.py and chunk_o.py in one pass), from S = 0 forward:
//     V' = U − W·S;  O = diag(e^{γ})·Q·S + Aqk·V';  S ← e^{γ_{L−1}}·S + Kᵀ·diag(e^{γ_{L−1} − γ})·V'
//   DHU (-DDHU; gated_delta_rule_chunked_backward.wgsl's stage Dhu, chunk_bwd_dhu), the
//   state's gradient dS from 0 after the last chunk, backward (dO the output's gradient):
//     dh[ci] = dS;  dV' = diag(e^{γ_{L−1} − γ})·K·dS + Aqkᵀ·dO;
//     dS ← e^{γ_{L−1}}·dS + Qᵀ·diag(e^{γ})·dO − Wᵀ·dV'
//
// Operands. Q, K (token-major [nb·t, hk, dk]), W and Aqk (the scratch rows (b·hv + j)·t + τ)
// arrive packed to f16 by wgsl/coopmat_pack_heads.wgsl: per window and head, tp ≥ t rows
// (zero past t) of DKP ≥ dk halves (64 for Aqk; zero past dk), each chunk of 64 rows scaled
// by a power of two whose inverse is in the s* binding ([nb, heads, nck]). S lives in f32
// accumulators (each subgroup its L×L tiles of the DKP×CS slice); each chunk it goes to
// workgroup memory as f32 and to f16 with a power-of-two scale putting its largest |value|
// in [2¹⁴, 2¹⁵) (a workgroup maximum: S is not bounded); V' (f32, from the f32 U) goes to f16
// the same way, and diag(e^{γ_{L−1} − γ})·V' (decays ≤ 1) with V''s scale. Every product
// multiplies f16 fragments and accumulates in f32; the scales are multiplied back in f32
// (exact: powers of two). U, γ, the gates, the output and the saved states stay f32.
//
// INTER's steps per chunk (barriers between): gates e^{γ_i}, e^{γ_{L−1} − γ_i} (i < L, else 0);
// A: S to f32 (saved as h[ci] when SAVE_H), its f16 copy; B: W·S and Q·S (f32 tiles); C: V' =
// U − W·S and e^{γ}·Q·S (f32; V' saved when SAVE_H), V' and the decayed V' to f16; D: O =
// e^{γ}·Q·S + Aqk·V', written for rows < L and columns < dv; E: S ← e^{γ_{L−1}}·S + Kᵀ·(decayed
// V'). After the last chunk S is written to state when WANT_STATE.
// DHU's, in reverse: gates; A: dS to f32 (saved as dh[ci]), its f16 copy; B: K·dS and Aqkᵀ·dO
// (Aqkᵀ's fragments are Aqk's rows read column-major; dO packed like q); C: dV' (f32, saved to
// dvp) to f16, and diag(e^{γ})·dO (from the f32 dout, with dO's pack scale: ≤ its f16 range)
// to f16; E: dS ← e^{γ_{L−1}}·dS + Qᵀ·(decayed dO) − Wᵀ·dV'.
//
// Specialisation (SpecId, patched by Go): SG the subgroup size, L the square shape (L×L×L),
// DKP (dk padded, a multiple of 4·L), CS value columns per workgroup (a multiple of L), NSG
// subgroups; INTER: WANT_STATE, SAVE_H; DHU: DVP (dv padded: dO's packed row); the workgroup
// size SG·NSG (OpExecutionMode LocalSize). Go checks that NSG divides (DKP/L)·(CS/L) and
// is a multiple of CS/L: a subgroup's tiles x = sg + NSG·i of every [·, CS] product then lie
// in one tile column tc = sg % (CS/L), so one B fragment per step serves all of them.
//
// Bindings (set 0, in order; the placeholder declares the same):
//   0 q16  1 sq  2 k16  3 sk  4 w16  5 sw  6 a16  7 sa  (packed, uvec4 words, and scales)
//   INTER: 8 u (f32 [nb·hv·t, dv])  9 gc (f32 γ [nb·hv·t])  10 o (f32 [nb·t, hv, dv], written)
//   11 state (f32 [nb, hv, dk, dv], written when WANT_STATE)  12 h (f32 [nb·hv, nck, dk, dv],
//   the state before each chunk, written when SAVE_H)  13 vnew (f32 V' [nb·hv·t, dv], SAVE_H)
//   14 uniform Params {nb, t, hk, hv, nck, tp, dk, dv}.
//   DHU: 8 do16  9 sdo  10 dout (f32 [nb·t, hv, dv])  11 gc  12 dh (f32 [nb·hv, nck, dk, dv],
//   written)  13 dvp (f32 dV' [nb·hv·t, dv], written)  14 uniform Params (as INTER's).
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

// Every loop whose trip count is a specialisation constant carries [[unroll]] (as in
// coopmat_gemm.comp): the driver unrolls it once the constants are known, so the state's
// accumulators s[] stay in registers instead of being indexed dynamically (DESIGN.md §7,
// "Tuning on Hopper"). The loop over the chunks (a runtime count) does not.
#define UNROLL [[unroll]]

layout(constant_id = 0) const uint SG = 32;
layout(constant_id = 1) const uint L = 16;
layout(constant_id = 2) const uint DKP = 128;
layout(constant_id = 3) const uint CS = 32;
layout(constant_id = 4) const uint NSG = 4;
#if defined(DHU)
layout(constant_id = 5) const uint DVP = 128;
#else
layout(constant_id = 5) const bool WANT_STATE = false;
layout(constant_id = 6) const bool SAVE_H = false;
#endif
// The workgroup size SG·NSG is written by Go into OpExecutionMode LocalSize.
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

const uint C = 64;                     // chunk length
const uint NT = SG * NSG;              // threads per workgroup
const uint FS = CS + 4;                // f32 row stride of the slice tiles
const uint HS = CS + 8;                // f16 row stride
const uint K8 = DKP / 8;               // 16-byte vectors per packed row of q, k, W
const uint FR = DKP > 2 * C ? DKP : 2 * C; // rows of the f32 region: S, or W·S above Q·S
const uint NS = (DKP / L) * (CS / L);  // L×L tiles of S
const uint SPS = NS / NSG;             // per subgroup (Go: NSG divides NS)
const uint NO = (C / L) * (CS / L);    // L×L tiles of a [64, CS] product
const uint NOS = (NO + NSG - 1) / NSG; // … per subgroup (at most)
const float FMAX = 3.4028234e38;

layout(set = 0, binding = 0, std430) readonly buffer Q16 { uvec4 q16[]; };
layout(set = 0, binding = 1, std430) readonly buffer SQ { float sq[]; };
layout(set = 0, binding = 2, std430) readonly buffer K16 { uvec4 k16[]; };
layout(set = 0, binding = 3, std430) readonly buffer SK { float sk[]; };
layout(set = 0, binding = 4, std430) readonly buffer W16 { uvec4 w16[]; };
layout(set = 0, binding = 5, std430) readonly buffer SW { float sw[]; };
layout(set = 0, binding = 6, std430) readonly buffer A16 { uvec4 a16[]; };
layout(set = 0, binding = 7, std430) readonly buffer SA { float sa[]; };
#if defined(DHU)
layout(set = 0, binding = 8, std430) readonly buffer DO16 { uvec4 do16[]; };
layout(set = 0, binding = 9, std430) readonly buffer SDO { float sdo[]; };
layout(set = 0, binding = 10, std430) readonly buffer DOut { float dout[]; };
layout(set = 0, binding = 11, std430) readonly buffer GC { float gc[]; };
layout(set = 0, binding = 12, std430) writeonly buffer DH { float dh[]; };
layout(set = 0, binding = 13, std430) writeonly buffer DVP_ { float dvp[]; };
#else
layout(set = 0, binding = 8, std430) readonly buffer U { float u[]; };
layout(set = 0, binding = 9, std430) readonly buffer GC { float gc[]; };
layout(set = 0, binding = 10, std430) writeonly buffer O { float o[]; };
layout(set = 0, binding = 11, std430) writeonly buffer State { float state[]; };
layout(set = 0, binding = 12, std430) writeonly buffer H { float h[]; };
layout(set = 0, binding = 13, std430) writeonly buffer VNew { float vnew[]; };
#endif
layout(set = 0, binding = 14, std140) uniform Params { uint nb, t, hk, hv, nck, tp, dk, dv; } p;

#define ACC coopmat<float, gl_ScopeSubgroup, L, L, gl_MatrixUseAccumulator>
#define FRA coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseA>
#define FRB coopmat<float16_t, gl_ScopeSubgroup, L, L, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

shared float F[FR * FS];        // S (f32, DKP rows); then W·S (rows 0..63) above Q·S (64..127),
                                // then V' and e^{γ}·Q·S, then Aqk·V' over V' (DHU: dS; then
                                // K·dS above Aqkᵀ·dO, then dV')
shared float16_t Sh[DKP * HS];  // S (dS), f16
shared float16_t Vt[C * HS];    // V' (dV'), f16
shared float16_t V2[C * HS];    // diag(e^{γ_{L−1} − γ})·V' (DHU: diag(e^{γ})·dO), f16
shared float gq[C];             // e^{γ_i}
shared float gk[C];             // e^{γ_{L−1} − γ_i}
shared float Red[NSG];

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

#if defined(DHU)
void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
    const uint tc = sg % (CS / L); // the tile column of this subgroup's tiles (Go: CS/L divides NSG)
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    const uint nsl = (p.dv + CS - 1) / CS;
    if (wg >= p.nb * p.hv * nsl) { // uniform per workgroup
        return;
    }
    const uint slice = wg % nsl, bj = wg / nsl, j = bj % p.hv, b = bj / p.hv;
    const uint kh = j / (p.hv / p.hk), bk = b * p.hk + kh;
    const uint D8 = DVP / 8;                      // 16-byte vectors per packed row of dO
    ACC s[SPS];
    UNROLL for (uint x = 0; x < SPS; x++) {
        s[x] = ACC(0.0);
    }
    for (uint cc = 0; cc < p.nck; cc++) {
        const uint ci = p.nck - 1 - cc;
        const uint t0 = ci * C, L0 = min(C, p.t - t0);
        const uint sr0 = bj * p.t + t0;           // scratch row of the chunk's first token
        const uint row0 = b * p.t + t0;           // token row
        const uint pw = bj * p.tp + t0;           // packed row of W, Aqk, dO
        const uint pq = bk * p.tp + t0;           // packed row of q, k
        barrier(); // the previous chunk is done with F, Vt, V2, gq, gk
        for (uint i = tid; i < C; i += NT) {
            float eq = 0.0, ek = 0.0;
            if (i < L0) {
                const float x = gc[sr0 + i];
                eq = exp(x);
                ek = exp(gc[sr0 + L0 - 1] - x);
            }
            gq[i] = eq;
            gk[i] = ek;
        }
        // A: dS to f32 (saved: the gradient of the state after this chunk), its f16 copy.
        UNROLL for (uint x = 0; x < SPS; x++) {
            const uint st = sg + NSG * x, tr = st / (CS / L), tc = st % (CS / L);
            coopMatStore(s[x], F, tr * L * FS + tc * L, FS, ROW);
        }
        barrier();
        float mx = 0.0;
        for (uint e = tid; e < DKP * CS; e += NT) {
            const uint d = e / CS, c = e % CS, col = slice * CS + c;
            const float v = F[d * FS + c];
            mx = max(mx, abs(v));
            if (d < p.dk && col < p.dv) {
                dh[((bj * p.nck + ci) * p.dk + d) * p.dv + col] = v;
            }
        }
        float invS;
        const float sS = pow2Scale(tileMax(mx, sg, lane), invS);
        for (uint e = tid; e < DKP * CS; e += NT) {
            const uint d = e / CS, c = e % CS;
            Sh[d * HS + c] = float16_t(F[d * FS + c] * sS);
        }
        barrier();
        // B: K·dS into F rows 0..63, Aqkᵀ·dO into rows 64..127 (unscaled); per kk one B
        // fragment (of dS, of dO) serves this subgroup's tiles of each (all in column tc).
        {
            ACC a[NOS], g[NOS];
            UNROLL for (uint xs = 0; xs < NOS; xs++) {
                a[xs] = ACC(0.0);
                g[xs] = ACC(0.0);
            }
            UNROLL for (uint kk = 0; kk < DKP; kk += L) {
                FRB fb;
                coopMatLoad(fb, Sh, kk * HS + tc * L, HS, ROW);
                UNROLL for (uint xs = 0; xs < NOS; xs++) {
                    const uint x = sg + xs * NSG;
                    if (x < NO) {
                        FRA fa;
                        coopMatLoad(fa, k16, (pq + (x / (CS / L)) * L) * K8 + kk / 8, K8, ROW);
                        a[xs] = coopMatMulAdd(fa, fb, a[xs]);
                    }
                }
            }
            UNROLL for (uint kk = 0; kk < C; kk += L) {
                FRB fb;
                coopMatLoad(fb, do16, (pw + kk) * D8 + (slice * CS + tc * L) / 8, D8, ROW);
                UNROLL for (uint xs = 0; xs < NOS; xs++) {
                    const uint x = sg + xs * NSG;
                    if (x < NO) {
                        FRA fa;
                        coopMatLoad(fa, a16, (pw + kk) * (C / 8) + (x / (CS / L)) * (L / 8), C / 8, COL);
                        g[xs] = coopMatMulAdd(fa, fb, g[xs]);
                    }
                }
            }
            UNROLL for (uint xs = 0; xs < NOS; xs++) {
                const uint x = sg + xs * NSG;
                if (x < NO) {
                    coopMatStore(a[xs], F, (x / (CS / L)) * L * FS + tc * L, FS, ROW);
                    coopMatStore(g[xs], F, (C + (x / (CS / L)) * L) * FS + tc * L, FS, ROW);
                }
            }
        }
        barrier();
        // C: dV' (f32, saved), then dV' and diag(e^{γ})·dO to f16.
        const float dos = sdo[bj * p.nck + ci];
        const float fk = sk[bk * p.nck + ci] * invS, fa = sa[bj * p.nck + ci] * dos;
        mx = 0.0;
        for (uint e = tid; e < C * CS; e += NT) {
            const uint i = e / CS, c = e % CS, col = slice * CS + c;
            float v = 0.0;
            if (i < L0 && col < p.dv) {
                v = gk[i] * (F[i * FS + c] * fk) + F[(C + i) * FS + c] * fa;
                dvp[(sr0 + i) * p.dv + col] = v;
            }
            F[i * FS + c] = v;
            mx = max(mx, abs(v));
        }
        float invV;
        const float sV = pow2Scale(tileMax(mx, sg, lane), invV);
        for (uint e = tid; e < C * CS; e += NT) {
            const uint i = e / CS, c = e % CS, col = slice * CS + c;
            float g = 0.0;
            if (i < L0 && col < p.dv) {
                g = gq[i] * (dout[((row0 + i) * p.hv + j) * p.dv + col] / dos);
            }
            Vt[i * HS + c] = float16_t(F[i * FS + c] * sV);
            V2[i * HS + c] = float16_t(g);
        }
        barrier();
        // E: dS ← e^{γ_{L−1}}·dS + Qᵀ·(decayed dO) − Wᵀ·dV' (Qᵀ, Wᵀ: rows read column-major).
        // Per kk one V2 and one Vt fragment serve this subgroup's tiles of dS (column tc).
        const float gl = gq[L0 - 1], fq = sq[bk * p.nck + ci] * dos, fw = sw[bj * p.nck + ci] * invV;
        ACC a[SPS], w[SPS];
        UNROLL for (uint x = 0; x < SPS; x++) {
            a[x] = ACC(0.0);
            w[x] = ACC(0.0);
        }
        UNROLL for (uint kk = 0; kk < C; kk += L) {
            FRB fq2, fv;
            coopMatLoad(fq2, V2, kk * HS + tc * L, HS, ROW);
            coopMatLoad(fv, Vt, kk * HS + tc * L, HS, ROW);
            UNROLL for (uint x = 0; x < SPS; x++) {
                const uint tr = (sg + NSG * x) / (CS / L);
                FRA fa;
                coopMatLoad(fa, q16, (pq + kk) * K8 + tr * (L / 8), K8, COL);
                a[x] = coopMatMulAdd(fa, fq2, a[x]);
                coopMatLoad(fa, w16, (pw + kk) * K8 + tr * (L / 8), K8, COL);
                w[x] = coopMatMulAdd(fa, fv, w[x]);
            }
        }
        UNROLL for (uint x = 0; x < SPS; x++) {
            s[x] = s[x] * gl + a[x] * fq - w[x] * fw;
        }
    }
}
#else
void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
    const uint tc = sg % (CS / L); // the tile column of this subgroup's tiles (Go: CS/L divides NSG)
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    const uint nsl = (p.dv + CS - 1) / CS;
    if (wg >= p.nb * p.hv * nsl) { // uniform per workgroup
        return;
    }
    const uint slice = wg % nsl, bj = wg / nsl, j = bj % p.hv, b = bj / p.hv;
    const uint kh = j / (p.hv / p.hk), bk = b * p.hk + kh;
    ACC s[SPS];
    UNROLL for (uint x = 0; x < SPS; x++) {
        s[x] = ACC(0.0);
    }
    for (uint ci = 0; ci < p.nck; ci++) {
        const uint t0 = ci * C, L0 = min(C, p.t - t0);
        const uint sr0 = bj * p.t + t0;           // scratch row of the chunk's first token
        const uint row0 = b * p.t + t0;           // token row
        const uint pw = bj * p.tp + t0;           // packed row of W, Aqk
        const uint pq = bk * p.tp + t0;           // packed row of q, k
        barrier(); // the previous chunk is done with F, Vt, V2, gq, gk
        for (uint i = tid; i < C; i += NT) {
            float eq = 0.0, ek = 0.0;
            if (i < L0) {
                const float x = gc[sr0 + i];
                eq = exp(x);
                ek = exp(gc[sr0 + L0 - 1] - x);
            }
            gq[i] = eq;
            gk[i] = ek;
        }
        // A: S to f32, then to f16 with its scale.
        UNROLL for (uint x = 0; x < SPS; x++) {
            const uint st = sg + NSG * x, tr = st / (CS / L), tc = st % (CS / L);
            coopMatStore(s[x], F, tr * L * FS + tc * L, FS, ROW);
        }
        barrier();
        float mx = 0.0;
        for (uint e = tid; e < DKP * CS; e += NT) {
            const uint d = e / CS, c = e % CS, col = slice * CS + c;
            const float v = F[d * FS + c];
            mx = max(mx, abs(v));
            if (SAVE_H && d < p.dk && col < p.dv) {
                h[((bj * p.nck + ci) * p.dk + d) * p.dv + col] = v;
            }
        }
        float invS;
        const float sS = pow2Scale(tileMax(mx, sg, lane), invS);
        for (uint e = tid; e < DKP * CS; e += NT) {
            const uint d = e / CS, c = e % CS;
            Sh[d * HS + c] = float16_t(F[d * FS + c] * sS);
        }
        barrier();
        // B: W·S into F rows 0..63, Q·S into rows 64..127 (unscaled): tiles x < 2·NO (W·S's,
        // then Q·S's), one Sh fragment per kk serving all of this subgroup's.
        {
            ACC a[2 * NOS];
            UNROLL for (uint xs = 0; xs < 2 * NOS; xs++) {
                a[xs] = ACC(0.0);
            }
            UNROLL for (uint kk = 0; kk < DKP; kk += L) {
                FRB fb;
                coopMatLoad(fb, Sh, kk * HS + tc * L, HS, ROW);
                UNROLL for (uint xs = 0; xs < 2 * NOS; xs++) {
                    const uint x = sg + xs * NSG, tr = (x % NO) / (CS / L);
                    if (x < 2 * NO) {
                        FRA fa;
                        if (x < NO) {
                            coopMatLoad(fa, w16, (pw + tr * L) * K8 + kk / 8, K8, ROW);
                        } else {
                            coopMatLoad(fa, q16, (pq + tr * L) * K8 + kk / 8, K8, ROW);
                        }
                        a[xs] = coopMatMulAdd(fa, fb, a[xs]);
                    }
                }
            }
            UNROLL for (uint xs = 0; xs < 2 * NOS; xs++) {
                const uint x = sg + xs * NSG;
                if (x < 2 * NO) {
                    coopMatStore(a[xs], F, ((x / NO) * C + ((x % NO) / (CS / L)) * L) * FS + tc * L, FS, ROW);
                }
            }
        }
        barrier();
        // C: V' = U − W·S and e^{γ}·Q·S in f32 (in place), then V' and its decayed copy to f16.
        const float fw = sw[bj * p.nck + ci] * invS, fq = sq[bk * p.nck + ci] * invS;
        mx = 0.0;
        for (uint e = tid; e < C * CS; e += NT) {
            const uint i = e / CS, c = e % CS, col = slice * CS + c;
            float v = 0.0;
            if (i < L0 && col < p.dv) {
                v = u[(sr0 + i) * p.dv + col] - F[i * FS + c] * fw;
                if (SAVE_H) {
                    vnew[(sr0 + i) * p.dv + col] = v;
                }
            }
            F[i * FS + c] = v;
            F[(C + i) * FS + c] = gq[i] * (F[(C + i) * FS + c] * fq);
            mx = max(mx, abs(v));
        }
        float invV;
        const float sV = pow2Scale(tileMax(mx, sg, lane), invV);
        for (uint e = tid; e < C * CS; e += NT) {
            const uint i = e / CS, c = e % CS;
            const float v = F[i * FS + c] * sV;
            Vt[i * HS + c] = float16_t(v);
            V2[i * HS + c] = float16_t(gk[i] * v);
        }
        barrier();
        // D: O = e^{γ}·Q·S + Aqk·V' (Aqk·V' into F rows 0..63, over V'), one Vt fragment per
        // kk serving this subgroup's tiles.
        {
            ACC a[NOS];
            UNROLL for (uint xs = 0; xs < NOS; xs++) {
                a[xs] = ACC(0.0);
            }
            UNROLL for (uint kk = 0; kk < C; kk += L) {
                FRB fb;
                coopMatLoad(fb, Vt, kk * HS + tc * L, HS, ROW);
                UNROLL for (uint xs = 0; xs < NOS; xs++) {
                    const uint x = sg + xs * NSG;
                    if (x < NO) {
                        FRA fa;
                        coopMatLoad(fa, a16, (pw + (x / (CS / L)) * L) * (C / 8) + kk / 8, C / 8, ROW);
                        a[xs] = coopMatMulAdd(fa, fb, a[xs]);
                    }
                }
            }
            UNROLL for (uint xs = 0; xs < NOS; xs++) {
                const uint x = sg + xs * NSG;
                if (x < NO) {
                    coopMatStore(a[xs], F, (x / (CS / L)) * L * FS + tc * L, FS, ROW);
                }
            }
        }
        barrier();
        const float fa = sa[bj * p.nck + ci] * invV;
        for (uint e = tid; e < C * CS; e += NT) {
            const uint i = e / CS, c = e % CS, col = slice * CS + c;
            if (i < L0 && col < p.dv) {
                o[((row0 + i) * p.hv + j) * p.dv + col] = F[(C + i) * FS + c] + F[i * FS + c] * fa;
            }
        }
        // E: S ← e^{γ_{L−1}}·S + Kᵀ·(decayed V'); Kᵀ's fragments are K's rows read column-major.
        // One V2 fragment per kk serves this subgroup's tiles of S (all in column tc).
        const float gl = gq[L0 - 1], fk = sk[bk * p.nck + ci] * invV;
        ACC a[SPS];
        UNROLL for (uint x = 0; x < SPS; x++) {
            a[x] = ACC(0.0);
        }
        UNROLL for (uint kk = 0; kk < C; kk += L) {
            FRB fb;
            coopMatLoad(fb, V2, kk * HS + tc * L, HS, ROW);
            UNROLL for (uint x = 0; x < SPS; x++) {
                FRA fa;
                coopMatLoad(fa, k16, (pq + kk) * K8 + ((sg + NSG * x) / (CS / L)) * (L / 8), K8, COL);
                a[x] = coopMatMulAdd(fa, fb, a[x]);
            }
        }
        UNROLL for (uint x = 0; x < SPS; x++) {
            s[x] = s[x] * gl + a[x] * fk;
        }
    }
    if (WANT_STATE) {
        barrier(); // the last chunk is done with F
        UNROLL for (uint x = 0; x < SPS; x++) {
            const uint st = sg + NSG * x, tr = st / (CS / L), tc = st % (CS / L);
            coopMatStore(s[x], F, tr * L * FS + tc * L, FS, ROW);
        }
        barrier();
        for (uint e = tid; e < DKP * CS; e += NT) {
            const uint d = e / CS, c = e % CS, col = slice * CS + c;
            if (d < p.dk && col < p.dv) {
                state[(bj * p.dk + d) * p.dv + col] = F[d * FS + c];
            }
        }
    }
}
#endif
