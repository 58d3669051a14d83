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
// f16 ±1 while staging (loaded before the current slice's products, decoded after them).
// Rows of a dense B past N or K read as 0; a sign B's read as −1, which changes no result
// (sload).
//
// Variants (glslang -D, one .spv each; gpu/coopmat/generate.sh): SIGNS, SCALE (sc bound:
// C's column scales; with a dense B, the sign-gradient GEMM's column scales), RAW (raw bound:
// the sums before ⊙ sc, as blr_forward.wgsl's Raw), QUANT (B an 8-bit quantized weight,
// below), PAIR (with SIGNS alone: both paths of a BLR layer in one dispatch, below), DUAL
// (with SIGNS and SCALE, perhaps RAW: both paths' y GEMMs of a BLR layer, one after the other
// in each workgroup, below).
//
// Split-K: dispatched with S = gl_NumWorkGroups.z > 1 workgroups along z (gpu/coopmat.go
// coopSplitK), workgroup z covers the z-th run of ⌈(Kp/BK)/S⌉ BK slices and writes slab z of
// C [S, M, N] (RAW's raw likewise); Go sums the slabs (wgsl/coopmat_splitk.wgsl). S = 1 is
// the plain GEMM.
//
// PAIR (coopmat_blr_pair.spv, gpu.coopBLRGEMMPair; with SIGNS, without SCALE, RAW, QUANT):
// the two paths' GEMMs of a BLR layer that share an A — t1_p = (x⊙g_p)·V_pᵀ, dt2_p =
// (dy⊙h_p)·U_p — as one dispatch whose workgroup z is the path p (0 or 1; no split-K).
// a16 and rs hold both paths' packs (gpu.coopPackPaths): path p's rows start at vector
// p·astr of a16 and at element p·rstr of rs (astr, rstr in Params: the aligned offset of
// path 1's part); B and C are path p's own bindings (bits0/bits1, cpath0/cpath1), chosen
// by a branch on the workgroup-uniform p in the helpers that touch them (byte8, the
// epilogue's PUTC4 and PUTC), never by a select that would load both. Everything else — staging, mmaSlice, the
// epilogue's arithmetic — is the single GEMM's code, so each path's C has the bits of a
// coopmat_blr.spv dispatch on that path's pack (gpu TestBLRPathPairsBitIdentical).
//
// DUAL (coopmat_blr_dual.spv, coopmat_blr_dual_raw.spv with RAW, gpu.coopBLRGEMMDual; with
// SIGNS and SCALE, without QUANT or PAIR; no split-K): the two y GEMMs of a BLR layer's
// forward, y = h_0 ⊙ c_0 + h_1 ⊙ c_1 with c_p = (t1_p ⊙ ℓ_p)·U_pᵀ (U_p [N, K] sign bits,
// TRANS_B), as one dispatch on the single GEMM's grid [nx, ny, 1]: each workgroup runs the
// main loop over path 0's A and B, writes its block as the SCALE(+RAW) GEMM does (raw0 =
// acc·rs, c = raw0·sc0), zeroes the accumulators, runs the main loop over path 1's, and adds
// its block as the ACCUM GEMM does (raw1 = acc·rs, c += raw1·sc1). The path is the variable
// `path` (0, then 1; uniform), which selects, like PAIR's z, path p's part of a16 and rs
// (vector p·astr, element p·rstr), its bits (bits0/bits1), column scales (sc0/sc1) and raw
// sums (raw0/raw1) by a branch in the helpers that touch them (the PATH macro). Path 1's
// epilogue reads back only the C elements its own lane wrote in path 0's: both epilogues
// walk the same accumulators with the same lane mapping and the same form (16 or 4 bytes a
// lane: n % 4, uniform), so program order within the invocation suffices, and path 1's first
// slice is staged into As (where path 0's f32 tiles were) only after the main loop's
// barrier. So y and the raw sums get the bits of the two single GEMMs (path 0's
// non-accumulating, path 1's ACCUM) on the same packs (gpu TestBLRPathPairsBitIdentical); the
// gain is C written once instead of twice and never read back from memory (bit-identical on
// an H100 too, since the epilogue is precise; no step-level speedup measurable there beside
// the pair dispatch and the activation budget: docs/bench/targets.md, twelfth session).
//
// QUANT (coopmat_quant.spv, gpu.LinearQuant on tensor cores; TRANS_B only): B is W [N, K]
// held as one byte code per weight, row-major, four per u32 word (little-endian), and its
// scales qs [ceil(N/QBR), ceil(K/QBC)] row-major, f32 (FP8's weight_scale_inv) or f16 packed
// two per word (QF16: q8's), W[n, k] = value(code) · qs[n/QBR, k/QBC], value the e4m3 code's
// (QFP8) or the int8 code's. Go guarantees K % 8 = 0 and QBC % 8 = 0, so the 8 codes of a
// 16-byte B vector are one uvec2 and share one scale. Each workgroup first gives each of its
// BN rows of W a power of two 2^E (Qm; qexp: from the exponent of the row's largest scale,
// so that every weight of the row times 2^E is below 2¹⁵), stages f16(value · f16(scale · 2^E))
// in f16 arithmetic (dequant8: the scale's rounding is exact for q8's f16 scales) and the
// epilogue multiplies column n of C by 2^−E (Qd; exact). So no weight overflows f16 whatever the scales, and a
// weight is an f16 subnormal only if it is below 2⁻²⁷ of the largest its row can hold
// (gpu/linear_quant.go coopQuantGEMM; the error bound: gpu/linear_quant_test.go
// quantCoopBound). The next slice's codes and scale words are loaded before the current
// slice's products (qload) and decoded after them (qstage), so the decoding neither waits
// for its loads nor sits between the barriers. QUANT's A16 comes packed with each group of 4
// columns in the order 0, 2, 1, 3 (CoopmatPack's Pairs), and the codes are staged in that
// order too (dequant8: fewer operations a code).
// Specialisation (SpecId, patched by Go in the SPIR-V): the subgroup size, the cooperative
// matrix shape LM×LN×LK, the block BM×BN×BK, WM×WN subgroups per workgroup (each owns a
// (BM/WM)×(BN/WN) block of CM×CN accumulators), TRANS_B and ACCUM; QUANT adds QFP8, QF16,
// QBR and QBC (SpecIds 11–14); and the workgroup size
// SG·WM·WN (OpExecutionMode LocalSize). Go checks BM % (WM·LM) = BN % (WN·LN) = BK % LK = 0,
// LM, LN, LK multiples of 8, and that NT divides the staging loads (BM·BK/8 and BN·BK/8
// 16-byte vectors).
//
// Staging: per BK slice every thread loads 16-byte vectors of A and B into registers (the
// next slice's loads are issued before the current slice is multiplied), stores them into
// workgroup memory (rows padded by 8 halves against bank conflicts), and each subgroup
// multiplies its CM×CN accumulators with coopMatMulAdd. Epilogue: each accumulator goes
// through a per-subgroup LM×LN f32 tile in workgroup memory, and the subgroup's lanes
// write it out with the row scale, column scale, raw and accumulate semantics — 16 bytes a
// lane where C's rows are whole 16-byte vectors (n % 4 = 0), else 4. The tiles reuse the A
// tile's workgroup memory (after a barrier), so a block needs BM·(BK+8)·2 + (BN·BK +
// 8·(BN+BK))·2 bytes (at least WM·WN·LM·LN·4 for the first term): 37 KiB at 128×128×64.
//
// Bindings (set 0, in order; the WGSL placeholder declares the same):
//   0 a16 (read, f16 pairs)  1 rs (read, f32 [Mp])  2 b (read: f16 pairs, or sign bits, or
//   QUANT's codes)  [3 sc (read, f32 [N]) when SCALE; 3 qs (read) when QUANT]
//   c (read_write, f32 [M, N])  [raw (read_write) when RAW]  last: uniform Params {m, n, k, kp}.
// PAIR: 0 a16 (both paths)  1 rs (both paths)  2 bits0  3 bits1  4 cpath0  5 cpath1
//   6 uniform Params {m, n, k, kp, astr, rstr}.
// DUAL: 0 a16 (both paths)  1 rs (both paths)  2 bits0  3 bits1  4 sc0  5 sc1  6 c
//   [7 raw0  8 raw1 when RAW]  last: uniform Params {m, n, k, kp, astr, rstr}.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

#if defined(PAIR) && (!defined(SIGNS) || defined(SCALE) || defined(RAW) || defined(QUANT))
#error PAIR is a variant of the sign GEMM without column scales or raw sums (-DSIGNS -DPAIR)
#endif
#if defined(DUAL) && (!defined(SIGNS) || !defined(SCALE) || defined(QUANT) || defined(PAIR))
#error DUAL is a variant of the sign GEMM with column scales (-DSIGNS -DSCALE -DDUAL, perhaps -DRAW)
#endif

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
#ifdef QUANT
layout(constant_id = 11) const bool QFP8 = true;  // codes float8_e4m3fn, else int8
layout(constant_id = 12) const bool QF16 = false; // scales f16 (pairs), else f32
layout(constant_id = 13) const uint QBR = 128;    // rows of W per scale
layout(constant_id = 14) const uint QBC = 128;    // columns of W (inputs) per scale
#endif
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
#if defined(QUANT)
layout(set = 0, binding = 2, std430) readonly buffer Codes { uvec2 codes[]; };
layout(set = 0, binding = 3, std430) readonly buffer QS { uint qs[]; };
#define CB 4
#elif defined(PAIR) || defined(DUAL)
layout(set = 0, binding = 2, std430) readonly buffer Bits0 { uint bits0[]; }; // path 0's signs
layout(set = 0, binding = 3, std430) readonly buffer Bits1 { uint bits1[]; }; // path 1's
#elif defined(SIGNS)
layout(set = 0, binding = 2, std430) readonly buffer Bits { uint bits[]; };
#else
layout(set = 0, binding = 2, std430) readonly buffer B16 { uvec4 b16[]; };
#endif
#if defined(DUAL)
layout(set = 0, binding = 4, std430) readonly buffer SC0 { float sc0[]; };     // path 0's column scales
layout(set = 0, binding = 4, std430) readonly buffer SC0v { vec4 sc0v[]; };    // … 16 bytes at a time
layout(set = 0, binding = 5, std430) readonly buffer SC1 { float sc1[]; };     // path 1's
layout(set = 0, binding = 5, std430) readonly buffer SC1v { vec4 sc1v[]; };
#define CB 6
#elif defined(SCALE)
layout(set = 0, binding = 3, std430) readonly buffer SC { float sc[]; };
layout(set = 0, binding = 3, std430) readonly buffer SC4 { vec4 sc4[]; };
#define CB 4
#elif defined(PAIR)
#define CB 4
#elif !defined(QUANT)
#define CB 3
#endif
#ifdef PAIR
layout(set = 0, binding = CB, std430) buffer C0 { float cpath0[]; };     // path 0's C
layout(set = 0, binding = CB, std430) buffer C0v { vec4 cpath0v[]; };    // … 16 bytes at a time
layout(set = 0, binding = CB + 1, std430) buffer C1 { float cpath1[]; }; // path 1's C
layout(set = 0, binding = CB + 1, std430) buffer C1v { vec4 cpath1v[]; };
#define PB CB + 2
// astr, rstr: where path 1's pack starts in a16 (16-byte vectors) and rs (elements).
layout(set = 0, binding = PB, std140) uniform Params { uint m, n, k, kp, astr, rstr; } p;
#else
layout(set = 0, binding = CB, std430) buffer C { float c[]; };
layout(set = 0, binding = CB, std430) buffer C4 { vec4 c4[]; }; // c, 16 bytes at a time
#if defined(RAW) && defined(DUAL)
layout(set = 0, binding = CB + 1, std430) buffer Raw0 { float raw0[]; };  // path 0's raw sums
layout(set = 0, binding = CB + 1, std430) buffer Raw0v { vec4 raw0v[]; };
layout(set = 0, binding = CB + 2, std430) buffer Raw1 { float raw1[]; };  // path 1's
layout(set = 0, binding = CB + 2, std430) buffer Raw1v { vec4 raw1v[]; };
#define PB CB + 3
#elif defined(RAW)
layout(set = 0, binding = CB + 1, std430) buffer Raw { float raw[]; };
layout(set = 0, binding = CB + 1, std430) buffer Raw4 { vec4 raw4[]; };
#define PB CB + 2
#else
#define PB CB + 1
#endif
#ifdef DUAL
// astr, rstr: where path 1's pack starts in a16 (16-byte vectors) and rs (elements).
layout(set = 0, binding = PB, std140) uniform Params { uint m, n, k, kp, astr, rstr; } p;
#else
layout(set = 0, binding = PB, std140) uniform Params { uint m, n, k, kp; } p;
#endif
#endif

// PATH is the BLR path this code is on, uniform in the workgroup: PAIR's workgroup z, DUAL's
// variable path (main runs path 0, then path 1).
#if defined(PAIR)
#define PATH gl_WorkGroupID.z
#elif defined(DUAL)
uint path; // 0 or 1: set by main's loop over the paths, read by the helpers below
#define PATH path
#endif

// RS(i) is row i's inverse scale (PAIR, DUAL: of the path, PATH); PUT(arr, o, v) stores v at
// arr[o], or adds it (ACCUM); PUTC4 and PUTC store into C 16 or 4 bytes at a time (PAIR: into
// this path's C, by a branch on the workgroup-uniform path; DUAL: path 0 stores, path 1
// adds). DUAL's SC4 and SC1 (SCALE's column scales, 16 or 4 bytes) and RAW4 and RAW1 (RAW's
// stores) are path PATH's, by a branch; the other variants' are sc's and raw's.
#define PUT(arr, o, v) if (ACCUM) { arr[o] += v; } else { arr[o] = v; }
#if defined(PAIR) || defined(DUAL)
#define RS(i) rs[PATH * p.rstr + i]
#endif
#ifdef PAIR
#define PUTC4(o, v) if (PATH == 0u) { PUT(cpath0v, o, v) } else { PUT(cpath1v, o, v) }
#define PUTC(o, v) if (PATH == 0u) { PUT(cpath0, o, v) } else { PUT(cpath1, o, v) }
#elif defined(DUAL)
#define PUTC4(o, v) if (PATH == 0u) { c4[o] = v; } else { c4[o] += v; }
#define PUTC(o, v) if (PATH == 0u) { c[o] = v; } else { c[o] += v; }
#define RAW4(o, v) if (PATH == 0u) { raw0v[o] = v; } else { raw1v[o] = v; }
#define RAW1(o, v) if (PATH == 0u) { raw0[o] = v; } else { raw1[o] = v; }
// sc4p and sc1p return the path's column scales 4 … 4i+3 and i (DUAL's SC4 and SC1): only
// that path's binding is loaded.
vec4 sc4p(uint i) {
    vec4 s;
    if (PATH == 0u) {
        s = sc0v[i];
    } else {
        s = sc1v[i];
    }
    return s;
}
float sc1p(uint i) {
    float s;
    if (PATH == 0u) {
        s = sc0[i];
    } else {
        s = sc1[i];
    }
    return s;
}
#define SC4(i) sc4p(i)
#define SC1(i) sc1p(i)
#else
#define RS(i) rs[i]
#define PUTC4(o, v) PUT(c4, o, v)
#define PUTC(o, v) PUT(c, o, v)
#define RAW4(o, v) raw4[o] = v;
#define RAW1(o, v) raw[o] = v;
#define SC4(i) sc4[i]
#define SC1(i) sc[i]
#endif

// The epilogue's per-subgroup f32 tiles (WM·WN·LM·LN floats; LN % 8 = 0: each tile row is
// whole 16-byte vectors) reuse As once every subgroup is past the main loop (a barrier), so
// As holds whichever is larger.
const uint AW = BM * AS / 8, CW = WM * WN * LM * LN / 4; // 16-byte words of As and the tiles
shared uvec4 As[AW > CW ? AW : CW];
shared uvec4 Bs[(BN * BK + 8 * (BN + BK)) / 8]; // either layout
#ifdef QUANT
shared float Qm[BN]; // 2^E of W's row n0 + r: its weights are staged as f16(w · 2^E)
shared float Qd[BN]; // 2^−E: the epilogue's undo
#endif

coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> acc[CM * CN];

#ifdef SIGNS
// signs8 expands 8 sign bits (bit j ↦ element j; 1 ↦ +1.0, 0 ↦ −1.0) into 8 f16 halves:
// word j holds elements 2j (low half) and 2j+1 (high half), whose sign bits 15 and 31 flip
// −1.0 (0xBC00) into +1.0. The odd bits are first moved up by 15 (bit 2j+1 to 2j+16), so
// one shift by 15 − 2j puts both of word j's bits in place and a mask drops the rest: three
// operations a word. (The first form took each bit on its own, about twice the operations,
// and the sign GEMMs' staging is integer work the products wait for.)
uvec4 signs8(uint b) {
    uint u = (b & 0x55u) | ((b & 0xAAu) << 15); // bit 2j at 2j, bit 2j+1 at 2j+16
    uvec4 v;
    UNROLL for (uint j = 0; j < 4; j++) {
        v[j] = ((u << (15 - 2 * j)) & 0x80008000u) ^ 0xBC00BC00u;
    }
    return v;
}

// byte8 returns the 8 sign bits of elements e … e+7 (e a multiple of 8); PAIR, DUAL: of the
// path (PATH), whose bits alone are loaded.
#if defined(PAIR) || defined(DUAL)
uint byte8(uint e) {
    uint w;
    if (PATH == 0u) {
        w = bits0[e >> 5];
    } else {
        w = bits1[e >> 5];
    }
    return (w >> (e & 31u)) & 0xFFu;
}
#else
uint byte8(uint e) { return (bits[e >> 5] >> (e & 31u)) & 0xFFu; }
#endif
#endif

#ifdef QUANT
// pow2 is 2^e as an exact f32 (−126 ≤ e ≤ 127).
float pow2(int e) { return uintBitsToFloat(uint(e + 127) << 23); }

// qscale returns scale e of qs (row-major index).
float qscale(uint e) {
    if (QF16) {
        vec2 h = unpackHalf2x16(qs[e >> 1]);
        return (e & 1u) == 0u ? h.x : h.y;
    }
    return uintBitsToFloat(qs[e]);
}

// qcols is the number of scales per row of qs.
uint qcols() { return (p.k + QBC - 1) / QBC; }

// qexp returns E for a row of W whose largest |scale| is smax = f·2^x (f in [½, 1), x read
// from its bits): every weight of the row is below 2^(x+9) (e4m3: |value| ≤ 448 < 2⁹) or
// 2^(x+7) (int8: |value| ≤ 128), so with E = 15 − x − 9 (or 7) every w·2^E is below 2¹⁵
// (f16's largest finite value is 65504) and the row's largest possible weight lands in
// [2¹³, 2¹⁵). E ≥ −122 for any finite scale; it is clamped to ≤ 126 (2^E, 2^−E normal f32);
// 0 for an all-zero row.
int qexp(float smax) {
    if (!(smax > 0.0)) {
        return 0;
    }
    int x = int((floatBitsToUint(smax) >> 23) & 0xFFu) - 126;
    return min(15 - x - (QFP8 ? 9 : 7), 126);
}

// QUANT's A and B tiles hold each group of 4 elements along K in the order 0, 2, 1, 3 (the
// 8-bit GEMM's A is packed so: wgsl/coopmat_pack.wgsl's Pairs, gpu.coopPack): the sum over K
// is the same, and a code word's bytes 0 and 2 (elements 0, 2) then fill one f16 pair and
// bytes 1 and 3 the next, each pair a mask and a shift from the word, with no byte moved
// across the pair's halves (the in-order form took about twice the operations, and the
// staging is integer work beside the products).

// fp8pairs returns the e4m3 values of the 4 codes of x times 2⁻⁸ as two f16 pairs in the
// tiles' order, (code 0, code 2) and (code 1, code 3): each code's sign to bit 15 and its
// exponent and mantissa (bits 6–0) to bits 13–7 of an f16 give the value × 2⁻⁸ exactly,
// subnormals included (wgsl/linear_quant.wgsl's dq4). NaN codes are refused before upload.
uvec2 fp8pairs(uint x) {
    return uvec2(((x << 8) & 0x80008000u) | ((x << 7) & 0x3F803F80u),
                 (x & 0x80008000u) | ((x >> 1) & 0x3F803F80u));
}

// q8pairs returns the int8 values of the 4 codes of x as two f16 pairs in the tiles' order,
// (code 0, code 2) and (code 1, code 3), exactly and without a conversion instruction: code
// b ^ 0x80 (b + 128, 0 … 255) in the low mantissa bits of 0x6400 (1024.0) is 1152 + b, and
// 1152 is subtracted in f16 (every integer below 2048 is an f16).
void q8pairs(uint x, out f16vec2 lo, out f16vec2 hi) {
    lo = unpackFloat2x16((x & 0x00FF00FFu) ^ 0x64806480u) - f16vec2(1152.0hf);
    hi = unpackFloat2x16(((x >> 8) & 0x00FF00FFu) ^ 0x64806480u) - f16vec2(1152.0hf);
}

// dequant8 returns the 8 codes of w (byte j of the pair ↦ element j) times s as 8 f16 halves
// in the tiles' order (0, 2, 1, 3 in each group of 4), all in f16 arithmetic: s (already
// times the row's 2^E) is rounded to f16 once — exact for q8's f16 scales, one more rounding
// (≤ 2⁻¹¹ relative) for FP8's f32 scales — and each value · s is rounded to f16 once. An
// earlier form multiplied in f32 and converted each weight to and from f16: the conversions
// (a quarter of the FMA rate on NVIDIA GPUs) made the staging, not the products, the 8-bit
// GEMM's bound (DESIGN.md §9 "GEMMs on 8-bit weights").
uvec4 dequant8(uvec2 w, float s) {
    if (QFP8) {
        f16vec2 s2 = f16vec2(float16_t(s * 256.0)); // fp8pairs' 2⁻⁸, exactly
        uvec2 a = fp8pairs(w.x), b = fp8pairs(w.y);
        return uvec4(packFloat2x16(unpackFloat2x16(a.x) * s2), packFloat2x16(unpackFloat2x16(a.y) * s2),
                     packFloat2x16(unpackFloat2x16(b.x) * s2), packFloat2x16(unpackFloat2x16(b.y) * s2));
    }
    f16vec2 s2 = f16vec2(float16_t(s));
    f16vec2 a0, a1, b0, b1;
    q8pairs(w.x, a0, a1);
    q8pairs(w.y, b0, b1);
    return uvec4(packFloat2x16(a0 * s2), packFloat2x16(a1 * s2), packFloat2x16(b0 * s2), packFloat2x16(b1 * s2));
}
#endif

// loadA returns the 16-byte vector v of the A slice at k0 (kv vectors per packed row; PAIR,
// DUAL: of the path's pack, which starts at vector PATH·astr).
uvec4 loadA(uint v, uint k0, uint m0, uint kv) {
#if defined(PAIR) || defined(DUAL)
    return a16[PATH * p.astr + (m0 + v / (BK / 8)) * kv + k0 / 8 + v % (BK / 8)];
#else
    return a16[(m0 + v / (BK / 8)) * kv + k0 / 8 + v % (BK / 8)];
#endif
}

#ifdef QUANT
// qload loads the raw B vector v of the slice at k0 into w (8 codes of row n0 + v/(BK/8) of W
// along K: K % 8 = 0, so inside the row and on an 8-byte boundary) and sw (their scale's
// bits: QBC % 8 = 0, so one scale; an f16 scale shifted to the word's low half); both 0
// outside W. Only loads: qstage decodes them once they have arrived. (fcefa6f moved the
// shift to qstage, the offset in one more register per vector: on an H100 q8 then ran 1,165
// µs at 4B's gate shape against f16's 829 and FP8's 908, 1.41× the f16 GEMM where it had
// run 1.21× with the shift here; undone.)
void qload(uint v, uint k0, uint n0, out uvec2 w, out uint sw) {
    uint row = n0 + v / (BK / 8);
    uint col = k0 + (v % (BK / 8)) * 8;
    w = uvec2(0);
    sw = 0;
    if (row < p.n && col < p.k) {
        uint e = (row / QBR) * qcols() + col / QBC;
        w = codes[(row * p.k + col) / 8];
        sw = QF16 ? qs[e >> 1] >> (16u * (e & 1u)) : qs[e];
    }
}

// qstage returns qload's vector v (w, sw) dequantized: 8 f16 halves of
// value(code) · scale · 2^E in the tiles' order (dequant8; 0 outside W).
uvec4 qstage(uint v, uvec2 w, uint sw) {
    float s = QF16 ? unpackHalf2x16(sw).x : uintBitsToFloat(sw);
    return dequant8(w, s * Qm[v / (BK / 8)]);
}
#elif defined(SIGNS)
// sload returns the 8 sign bits of the B slice's vector v at k0: 8 elements along K of row n
// (TRANS_B: tile [BN][BK]) or along N of row k (tile [BK][BN]). Only the load: signs8
// decodes them once they have arrived, after the current slice's products (main). Outside B
// it returns 0, which decodes to −1s rather than the dense kernel's zeros, and changes no
// result: a column k ≥ K meets A's zero padding (±1 · 0 = ±0, and an f32 sum plus −0 is
// itself), and a row n ≥ N of B feeds only columns of C that are never written.
uint sload(uint v, uint k0, uint n0) {
    if (TRANS_B) {
        uint row = n0 + v / (BK / 8), col = k0 + (v % (BK / 8)) * 8;
        return row < p.n && col < p.k ? byte8(row * p.k + col) : 0u;
    }
    uint row = k0 + v / (BN / 8), col = n0 + (v % (BN / 8)) * 8;
    return row < p.k && col < p.n ? byte8(row * p.n + col) : 0u;
}
#else
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
        return b16[(row * p.k + col) / 8];
    }
    row = k0 + v / (BN / 8);
    col = n0 + (v % (BN / 8)) * 8;
    if (row >= p.k || col >= p.n) {
        return uvec4(0);
    }
    return b16[(row * p.n + col) / 8];
}
#endif

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

#ifdef DUAL
    // Path 0's GEMM, then path 1's, onto the same block of C (the header's DUAL). Unrolled:
    // each copy's path is a constant, so the branches on it fold away.
    UNROLL for (uint dp = 0; dp < 2; dp++) {
    path = dp;
#endif
    UNROLL for (uint i = 0; i < CM * CN; i++) {
        acc[i] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
    }
#ifdef QUANT
    // Each row of W in the block gets its power of two (qexp) before any B is staged. The
    // scan of a row's ⌈K/QBC⌉ scales is split between QP threads (2 where the workgroup has
    // 2·BN threads or more, else 1), each with four loads in flight, whose maxima meet in
    // Qm (part 0) and Qd (part 1); then row r's own thread turns them into 2^E and 2^−E.
    // (One thread a row and one load at a time made the scan a chain of ⌈K/QBC⌉ memory
    // latencies before a workgroup's first product: 76 at K 9728.)
    const uint QP = NT >= 2 * BN ? 2 : 1;
    UNROLL for (uint j = 0; j < (QP * BN + NT - 1) / NT; j++) {
        uint slot = tid + j * NT; // row slot % BN, part slot / BN
        if (slot < QP * BN) {
            uint r = slot % BN;
            float m0 = 0.0, m1 = 0.0, m2 = 0.0, m3 = 0.0;
            if (n0 + r < p.n) {
                uint nc = qcols(), base = ((n0 + r) / QBR) * nc, c = slot / BN;
                for (; c + 3 * QP < nc; c += 4 * QP) {
                    m0 = max(m0, abs(qscale(base + c)));
                    m1 = max(m1, abs(qscale(base + c + QP)));
                    m2 = max(m2, abs(qscale(base + c + 2 * QP)));
                    m3 = max(m3, abs(qscale(base + c + 3 * QP)));
                }
                for (; c < nc; c += QP) {
                    m0 = max(m0, abs(qscale(base + c)));
                }
            }
            float smax = max(max(m0, m1), max(m2, m3));
            if (slot < BN) {
                Qm[r] = smax;
            } else {
                Qd[r] = smax;
            }
        }
    }
    barrier();
    UNROLL for (uint j = 0; j < (BN + NT - 1) / NT; j++) {
        uint r = tid + j * NT;
        if (r < BN) {
            int e = qexp(QP == 2 ? max(Qm[r], Qd[r]) : Qm[r]);
            Qm[r] = pow2(e);
            Qd[r] = pow2(-e);
        }
    }
    barrier();
#endif

#if defined(PAIR) || defined(DUAL)
    // PAIR's z is the path, not a split, and DUAL does not split: every workgroup multiplies
    // all of K into its path's C.
    const uint kbeg = 0u, kend = p.kp, slab = 0u;
#else
    // Split-K (gpu.coopSplitK): with S = gl_NumWorkGroups.z > 1 workgroups, workgroup z
    // multiplies the z-th of S runs of whole BK slices of K, [kbeg, kend), and writes its
    // partial product to slab z of C (C [S, M, N]; Go sums the slabs). S = 1: all of K.
    const uint ns = p.kp / BK, per = (ns + gl_NumWorkGroups.z - 1) / gl_NumWorkGroups.z;
    const uint kbeg = min(gl_WorkGroupID.z * per, ns) * BK, kend = min((gl_WorkGroupID.z + 1) * per, ns) * BK;
    const uint slab = gl_WorkGroupID.z * p.m * p.n;
#endif

    uvec4 ra[AP], rb[BP];
#ifdef QUANT
    uvec2 rq[BP]; // the next slice's raw codes and scale words (qload)
    uint rqs[BP];
#elif defined(SIGNS)
    uint rsb[BP]; // the next slice's sign bytes (sload)
#endif
    if (kbeg < kend) {
        UNROLL for (uint j = 0; j < AP; j++) {
            ra[j] = loadA(tid + j * NT, kbeg, m0, kv);
        }
        UNROLL for (uint j = 0; j < BP; j++) {
#ifdef QUANT
            qload(tid + j * NT, kbeg, n0, rq[j], rqs[j]);
            rb[j] = qstage(tid + j * NT, rq[j], rqs[j]);
#elif defined(SIGNS)
            rb[j] = signs8(sload(tid + j * NT, kbeg, n0));
#else
            rb[j] = loadB(tid + j * NT, kbeg, n0);
#endif
        }
    }

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier(); // the previous slice's products are done with the tiles
        UNROLL for (uint j = 0; j < AP; j++) {
            As[aSlot(tid + j * NT)] = ra[j];
        }
        UNROLL for (uint j = 0; j < BP; j++) {
            Bs[bSlot(tid + j * NT)] = rb[j];
        }
        barrier();
        if (k0 + BK < kend) { // the next slice's loads, in flight during the products
            UNROLL for (uint j = 0; j < AP; j++) {
                ra[j] = loadA(tid + j * NT, k0 + BK, m0, kv);
            }
            UNROLL for (uint j = 0; j < BP; j++) {
#ifdef QUANT
                qload(tid + j * NT, k0 + BK, n0, rq[j], rqs[j]);
#elif defined(SIGNS)
                rsb[j] = sload(tid + j * NT, k0 + BK, n0);
#else
                rb[j] = loadB(tid + j * NT, k0 + BK, n0);
#endif
            }
        }
        mmaSlice(sgm, sgn);
#if defined(QUANT) || defined(SIGNS)
        // The next slice's B is decoded after the products: its loads had them to arrive,
        // and one subgroup's decoding overlaps the others' products.
        if (k0 + BK < kend) {
            UNROLL for (uint j = 0; j < BP; j++) {
#ifdef QUANT
                rb[j] = qstage(tid + j * NT, rq[j], rqs[j]);
#else
                rb[j] = signs8(rsb[j]);
#endif
            }
        }
#endif
    }

    barrier(); // every subgroup's products are done with As, which now holds the f32 tiles
    // Epilogue: one accumulator at a time through this subgroup's f32 tile. Where C's rows
    // are whole 16-byte vectors (n % 4 = 0: every Qwen3.5 and BLR shape), each lane writes 4
    // adjacent columns with one 16-byte store (and reads sc likewise); else one column. v is
    // precise: each product rounds on its own, so that an ACCUM add (c += v) is never fused
    // with the last product into one FMA — which NVIDIA's compiler did in some variants and
    // not others (the DUAL y 1 ulp off the two dispatches, 4-byte form, H100).
    const uint base = sg * LM * LN / 4;
    const bool wide = p.n % 4 == 0;
    UNROLL for (uint i = 0; i < CM; i++) {
        UNROLL for (uint j = 0; j < CN; j++) {
            coopMatStore(acc[i * CN + j], As, base, LN / 4, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint r0 = m0 + sgm * SM + i * LM, c0 = n0 + sgn * SN + j * LN;
            if (wide) {
                UNROLL for (uint e = lane; e < LM * LN / 4; e += SG) {
                    uint gi = r0 + e / (LN / 4);
                    uint gj = c0 + (e % (LN / 4)) * 4; // gj % 4 = 0 = n % 4: gj < n ⇒ gj + 3 < n
                    if (gi < p.m && gj < p.n) {
                        precise vec4 v = uintBitsToFloat(As[base + e]) * RS(gi);
#ifdef QUANT
                        v *= vec4(Qd[gj - n0], Qd[gj - n0 + 1], Qd[gj - n0 + 2], Qd[gj - n0 + 3]);
#endif
                        uint o = (slab + gi * p.n + gj) / 4; // slab % 4 = 0 as n % 4 = 0
#ifdef RAW
                        RAW4(o, v)
#endif
#ifdef SCALE
                        v *= SC4(gj / 4);
#endif
                        PUTC4(o, v)
                    }
                }
            } else {
                UNROLL for (uint e = lane; e < LM * LN; e += SG) {
                    uint gi = r0 + e / LN;
                    uint gj = c0 + e % LN;
                    if (gi < p.m && gj < p.n) {
                        precise float v = uintBitsToFloat(As[base + e / 4][e % 4]) * RS(gi);
#ifdef QUANT
                        v *= Qd[gj - n0];
#endif
                        uint o = slab + gi * p.n + gj;
#ifdef RAW
                        RAW1(o, v)
#endif
#ifdef SCALE
                        v *= SC1(gj);
#endif
                        PUTC(o, v)
                    }
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
#ifdef DUAL
    } // path 1's first slice is stored into As after the main loop's first barrier
#endif
}
