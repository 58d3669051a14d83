// The GEMM family: C[M, N] = A[M, K] · B, f32 accumulation.
//   Linear  (TransB, BF16):  y = x·Wᵀ, x f32 [rows, in], W f16 [out, in]   (M=rows, K=in,  N=out)
//   LinearT (!TransB, BF16): dx = dy·W, dy f32 [rows, out], W f16 [out, in] (M=rows, K=out, N=in)
//   MatMul  (either, f32 B): C = A·B or A·Bᵀ.
// A: f32 [M, K] row-major. B: [N, K] row-major when TransB, else [K, N]; f32, or f16 packed
// two per u32 word (BF16). C: f32 [M, N] row-major, overwritten.
//
// Tiling: a workgroup of 16×16 threads computes a BM×BN = 64×64 block of C, each thread a 4×4
// sub-block, stepping through K in BK = 16 slices staged in workgroup memory. Every tile
// element is written before the barrier (zero outside the matrix): workgroup memory is not
// zero-initialised on this stack. Grid: (ceil(N/64), ceil(M/64)).
// Template parameters: TransB, BF16 (bools).

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

const BM = 64u;
const BN = 64u;
const BK = 16u;

var<workgroup> ta: array<f32, 1024>; // [BK][BM]
var<workgroup> tb: array<f32, 1024>; // [BK][BN]

// loadB returns the logical element B(kk, nn) of the K×N operand.
fn loadB(kk: u32, nn: u32) -> f32 {
{{- if .TransB}}
    let e = nn * p.k + kk;
{{- else}}
    let e = kk * p.n + nn;
{{- end}}
{{- if .BF16}}
    let pair = unpack2x16float(b[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
{{- else}}
    return b[e];
{{- end}}
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var t = 0u; t < 4u; t++) {
            let e = li + t * 256u;
            // A tile: consecutive threads walk K (contiguous in A).
            let am = e / BK;
            let ak = e % BK;
            var av = 0.0;
            if (m0 + am < p.m && k0 + ak < p.k) {
                av = a[(m0 + am) * p.k + k0 + ak];
            }
            ta[ak * BM + am] = av;
{{- if .TransB}}
            let bn = e / BK;
            let bk = e % BK;
{{- else}}
            let bk = e / BN;
            let bn = e % BN;
{{- end}}
            var bv = 0.0;
            if (n0 + bn < p.n && k0 + bk < p.k) {
                bv = loadB(k0 + bk, n0 + bn);
            }
            tb[bk * BN + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a4 = vec4<f32>(ta[kk * BM + lid.y * 4u], ta[kk * BM + lid.y * 4u + 1u],
                               ta[kk * BM + lid.y * 4u + 2u], ta[kk * BM + lid.y * 4u + 3u]);
            let b4 = vec4<f32>(tb[kk * BN + lid.x * 4u], tb[kk * BN + lid.x * 4u + 1u],
                               tb[kk * BN + lid.x * 4u + 2u], tb[kk * BN + lid.x * 4u + 3u]);
            for (var i = 0u; i < 4u; i++) {
                acc[i * 4u + 0u] = fma(a4[i], b4.x, acc[i * 4u + 0u]);
                acc[i * 4u + 1u] = fma(a4[i], b4.y, acc[i * 4u + 1u]);
                acc[i * 4u + 2u] = fma(a4[i], b4.z, acc[i * 4u + 2u]);
                acc[i * 4u + 3u] = fma(a4[i], b4.w, acc[i * 4u + 3u]);
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let gm = m0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let gn = n0 + lid.x * 4u + j;
            if (gm < p.m && gn < p.n) {
                c[gm * p.n + gn] = acc[i * 4u + j];
            }
        }
    }
}
