// coopmat_gemm.comp: nvg's cooperative-matrix (tensor core) GEMM, swapped in by the Vulkan
// layer (gpu/vklayer) for a WGSL placeholder of the same bindings (wgsl/coopmat.wgsl); the
// choice is gpu's (gpu/coopmat.go). f16 operands, f32 accumulation:
//
//   C[M, N] (+)= diag(rs) · (A16[Mp, Kp] · B) (⊙ sc)     B = B16 [N, K] (TRANS_B) or [K, N]
//
// A16 is the f32 A (times the BLR column scales) packed to f16 by wgsl/coopmat_pack.wgsl, each
// row scaled by a power of two (its largest |value| lands in [2¹⁴, 2¹⁵)) that rs[i] undoes;
// it is zero-padded to Mp (a multiple of BM) rows and Kp (a multiple of BK) columns. B is
// either f16 (dense; SIGNS undefined) or a ±1 sign matrix as packed bits (SIGNS: element e of
// the row-major matrix is bit e & 31 of word e >> 5, 1 ↦ +1; DESIGN.md §4), expanded to exact
// f16 ±1 while staging. Rows of B past N or K read as 0.
//
// Variants (glslang -D, one .spv each; gpu/coopmat/generate.sh): SIGNS, SCALE (sc bound:
// C's column scales; with a dense B, the sign-gradient GEMM's column scales), RAW (raw bound:
// the sums before ⊙ sc, as blr_forward.wgsl's Raw).
// Specialisation (SpecId, patched by Go in the SPIR-V): the subgroup size, the cooperative
// matrix shape LM×LN×LK, the block BM×BN×BK, WM×WN subgroups per workgroup (each owns a
// (BM/WM)×(BN/WN) block of CM×CN accumulators), TRANS_B and ACCUM; and the workgroup size
// SG·WM·WN (OpExecutionMode LocalSize). Go checks BM % (WM·LM) = BN % (WN·LN) = BK % LK = 0,
// LM, LN, LK multiples of 8, and that NT divides the staging loads (BM·BK/8 and BN·BK/8
// 16-byte vectors).
//
// Staging: per BK slice every thread loads 16-byte vectors of A and B into registers (the
// next slice's loads are issued before the current slice is multiplied), stores them into
// workgroup memory (rows padded by 8 halves against bank conflicts), and each subgroup
// multiplies its CM×CN accumulators with coopMatMulAdd. Epilogue: each accumulator goes
// through a per-subgroup LM×LN f32 tile in workgroup memory, and the subgroup's lanes
// write it out with the row scale, column scale, raw and accumulate semantics.
//
// Bindings (set 0, in order; the WGSL placeholder declares the same):
//   0 a16 (read, f16 pairs)  1 rs (read, f32 [Mp])  2 b (read: f16 pairs, or sign bits)
//   [3 sc (read, f32 [N]) when SCALE]  c (read_write, f32 [M, N])  [raw (read_write) when RAW]
//   last: uniform Params {m, n, k, kp}.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

// Every loop whose trip count is a specialisation constant carries [[unroll]]: the driver
// unrolls it once the constants are known, so the accumulators and fragments stay in
// registers. Without the hint NVIDIA's compiler (driver 580) keeps the loops and the
// dynamically indexed coopmat arrays, and the kernel ran at 30 TFLOP/s instead of 180–240 on
// an H100 (DESIGN.md §7).
#define UNROLL [[unroll]]

layout(constant_id = 0) const uint SG = 32;
layout(constant_id = 1) const uint LM = 16;
layout(constant_id = 2) const uint LN = 16;
layout(constant_id = 3) const uint LK = 16;
layout(constant_id = 4) const uint BM = 128;
layout(constant_id = 5) const uint BN = 128;
layout(constant_id = 6) const uint BK = 32;
layout(constant_id = 7) const uint WM = 2;
layout(constant_id = 8) const uint WN = 4;
layout(constant_id = 9) const bool TRANS_B = true;
layout(constant_id = 10) const bool ACCUM = false;
// The workgroup size SG·WM·WN is written by Go into OpExecutionMode LocalSize (a literal:
// LocalSizeId would need the maintenance4 feature, which wgpu does not enable).
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

const uint NT = SG * WM * WN;       // threads per workgroup (= local_size_x, set by Go)
const uint SM = BM / WM;            // rows of a subgroup's block
const uint SN = BN / WN;            // columns of a subgroup's block
const uint CM = SM / LM;            // accumulators per subgroup along M
const uint CN = SN / LN;            // … along N
const uint AS = BK + 8;             // row stride of the A tile, halves
const uint BS = TRANS_B ? BK + 8 : BN + 8; // row stride of the B tile ([BN][BK] or [BK][BN])
const uint AV = BM * BK / 8;        // 16-byte vectors of one A slice
const uint BV = BN * BK / 8;        // … of one B slice
const uint AP = AV / NT;            // per thread
const uint BP = BV / NT;

layout(set = 0, binding = 0, std430) readonly buffer A16 { uvec4 a16[]; };
layout(set = 0, binding = 1, std430) readonly buffer RS { float rs[]; };
#ifdef SIGNS
layout(set = 0, binding = 2, std430) readonly buffer Bits { uint bits[]; };
#else
layout(set = 0, binding = 2, std430) readonly buffer B16 { uvec4 b16[]; };
#endif
#ifdef SCALE
layout(set = 0, binding = 3, std430) readonly buffer SC { float sc[]; };
#define CB 4
#else
#define CB 3
#endif
layout(set = 0, binding = CB, std430) buffer C { float c[]; };
#ifdef RAW
layout(set = 0, binding = CB + 1, std430) buffer Raw { float raw[]; };
#define PB CB + 2
#else
#define PB CB + 1
#endif
layout(set = 0, binding = PB, std140) uniform Params { uint m, n, k, kp; } p;

shared uvec4 As[BM * AS / 8];
shared uvec4 Bs[(BN * BK + 8 * (BN + BK)) / 8]; // either layout
shared float Cs[WM * WN * LM * LN];

coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> acc[CM * CN];

#ifdef SIGNS
// signs8 expands 8 sign bits (bit j ↦ element j; 1 ↦ +1.0, 0 ↦ −1.0) into 8 f16 halves.
uvec4 signs8(uint b) {
    uvec4 v;
    UNROLL for (uint j = 0; j < 4; j++) {
        uint lo = 0xBC00u ^ (((b >> (2 * j)) & 1u) << 15);
        uint hi = 0xBC00u ^ (((b >> (2 * j + 1)) & 1u) << 15);
        v[j] = lo | (hi << 16);
    }
    return v;
}

// byte8 returns the 8 sign bits of elements e … e+7 (e a multiple of 8).
uint byte8(uint e) { return (bits[e >> 5] >> (e & 31u)) & 0xFFu; }
#endif

// loadA returns the 16-byte vector v of the A slice at k0 (kv vectors per packed row).
uvec4 loadA(uint v, uint k0, uint m0, uint kv) {
    return a16[(m0 + v / (BK / 8)) * kv + k0 / 8 + v % (BK / 8)];
}

// loadB returns the 16-byte vector v of the B slice at k0: 8 halves along K of row n
// (TRANS_B: tile [BN][BK]) or along N of row k (tile [BK][BN]), zero outside B.
uvec4 loadB(uint v, uint k0, uint n0) {
    uint row, col;
    if (TRANS_B) {
        row = n0 + v / (BK / 8);
        col = k0 + (v % (BK / 8)) * 8;
        if (row >= p.n || col >= p.k) {
            return uvec4(0);
        }
#ifdef SIGNS
        return signs8(byte8(row * p.k + col));
#else
        return b16[(row * p.k + col) / 8];
#endif
    }
    row = k0 + v / (BN / 8);
    col = n0 + (v % (BN / 8)) * 8;
    if (row >= p.k || col >= p.n) {
        return uvec4(0);
    }
#ifdef SIGNS
    return signs8(byte8(row * p.n + col));
#else
    return b16[(row * p.n + col) / 8];
#endif
}

// aSlot and bSlot are A's and B's vector v in the workgroup tiles (16-byte slots).
uint aSlot(uint v) { return (v / (BK / 8)) * (AS / 8) + v % (BK / 8); }

uint bSlot(uint v) {
    return TRANS_B ? (v / (BK / 8)) * (BS / 8) + v % (BK / 8) : (v / (BN / 8)) * (BS / 8) + v % (BN / 8);
}

// mmaSlice multiplies the staged slice into this subgroup's accumulators.
void mmaSlice(uint sgm, uint sgn) {
    UNROLL for (uint kk = 0; kk < BK; kk += LK) {
        coopmat<float16_t, gl_ScopeSubgroup, LM, LK, gl_MatrixUseA> fa[CM];
        UNROLL for (uint i = 0; i < CM; i++) {
            coopMatLoad(fa[i], As, ((sgm * SM + i * LM) * AS + kk) / 8, AS / 8, gl_CooperativeMatrixLayoutRowMajor);
        }
        UNROLL for (uint j = 0; j < CN; j++) {
            coopmat<float16_t, gl_ScopeSubgroup, LK, LN, gl_MatrixUseB> fb;
            uint col = sgn * SN + j * LN;
            if (TRANS_B) {
                coopMatLoad(fb, Bs, (col * BS + kk) / 8, BS / 8, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                coopMatLoad(fb, Bs, (kk * BS + col) / 8, BS / 8, gl_CooperativeMatrixLayoutRowMajor);
            }
            UNROLL for (uint i = 0; i < CM; i++) {
                acc[i * CN + j] = coopMatMulAdd(fa[i], fb, acc[i * CN + j]);
            }
        }
    }
}

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SG, lane = tid % SG;
    const uint sgm = sg / WN, sgn = sg % WN;
    const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
    const uint kv = p.kp / 8; // vectors per packed A row

    UNROLL for (uint i = 0; i < CM * CN; i++) {
        acc[i] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
    }

    uvec4 ra[AP], rb[BP];
    UNROLL for (uint j = 0; j < AP; j++) {
        ra[j] = loadA(tid + j * NT, 0, m0, kv);
    }
    UNROLL for (uint j = 0; j < BP; j++) {
        rb[j] = loadB(tid + j * NT, 0, n0);
    }

    for (uint k0 = 0; k0 < p.kp; k0 += BK) {
        barrier(); // the previous slice's products are done with the tiles
        UNROLL for (uint j = 0; j < AP; j++) {
            As[aSlot(tid + j * NT)] = ra[j];
        }
        UNROLL for (uint j = 0; j < BP; j++) {
            Bs[bSlot(tid + j * NT)] = rb[j];
        }
        barrier();
        if (k0 + BK < p.kp) { // the next slice's loads, in flight during the products
            UNROLL for (uint j = 0; j < AP; j++) {
                ra[j] = loadA(tid + j * NT, k0 + BK, m0, kv);
            }
            UNROLL for (uint j = 0; j < BP; j++) {
                rb[j] = loadB(tid + j * NT, k0 + BK, n0);
            }
        }
        mmaSlice(sgm, sgn);
    }

    // Epilogue: one accumulator at a time through this subgroup's f32 tile.
    const uint base = sg * LM * LN;
    UNROLL for (uint i = 0; i < CM; i++) {
        UNROLL for (uint j = 0; j < CN; j++) {
            coopMatStore(acc[i * CN + j], Cs, base, LN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            UNROLL for (uint e = lane; e < LM * LN; e += SG) {
                uint gi = m0 + sgm * SM + i * LM + e / LN;
                uint gj = n0 + sgn * SN + j * LN + e % LN;
                if (gi < p.m && gj < p.n) {
                    float v = Cs[base + e] * rs[gi];
                    uint o = gi * p.n + gj;
#ifdef RAW
                    raw[o] = v;
#endif
#ifdef SCALE
                    v *= sc[gj];
#endif
                    if (ACCUM) {
                        c[o] += v;
                    } else {
                        c[o] = v;
                    }
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
