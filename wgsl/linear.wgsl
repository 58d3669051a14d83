// The GEMM family: C[M, N] = A[M, K] · B, f32 accumulation.
//   Linear  (TransB, BF16):  y = x·Wᵀ, x f32 [rows, in], W f16 [out, in]   (M=rows, K=in,  N=out)
//   LinearT (!TransB, BF16): dx = dy·W, dy f32 [rows, out], W f16 [out, in] (M=rows, K=out, N=in)
//   MatMul  (either, f32 B): C = A·B or A·Bᵀ.
// A: f32 [M, K] row-major. B: [N, K] row-major when TransB, else [K, N]; f32, or f16 packed
// two per u32 word (BF16). C: f32 [M, N] row-major, overwritten.
//
// Tiling: a workgroup of 16×16 threads computes a BM×BN = 64×64 block of C, each thread a
// 4×4 sub-block held in four vec4 accumulators, stepping through K in BK = 16 slices staged in
// workgroup memory as vec4s (4 consecutive m, or n, per slot). The BK loop is unrolled with
// literal indices. Every tile slot is written before the barrier (zero outside the matrix):
// workgroup memory is not zero-initialised on this stack. Grid: (ceil(N/64), ceil(M/64)).
// The simple twin is linear_naive.wgsl. Template parameters: TransB, BF16 (bools).

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

var<workgroup> ta: array<vec4<f32>, 256>; // [BK][BM/4]: slot k·16 + g holds m = 4g..4g+3
var<workgroup> tb: array<vec4<f32>, 256>; // [BK][BN/4]: slot k·16 + g holds n = 4g..4g+3

// loadB returns the logical element B(kk, nn) of the K×N operand, 0 outside it.
fn loadB(kk: u32, nn: u32) -> f32 {
    if (kk >= p.k || nn >= p.n) {
        return 0.0;
    }
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

fn loadA(mm: u32, kk: u32) -> f32 {
    if (mm >= p.m || kk >= p.k) {
        return 0.0;
    }
    return a[mm * p.k + kk];
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // Staging roles: A (and B when TransB) are contiguous along k, so consecutive threads
    // take consecutive k and each loads 4 rows; B [K, N] is contiguous along n, so each
    // thread loads 4 consecutive n of one k.
    let sk = li % 16u;
    let sg = li / 16u;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        let am = m0 + sg * 4u;
        ta[sk * 16u + sg] = vec4<f32>(loadA(am, k0 + sk), loadA(am + 1u, k0 + sk),
                                      loadA(am + 2u, k0 + sk), loadA(am + 3u, k0 + sk));
{{- if .TransB}}
        let bn = n0 + sg * 4u;
        tb[sk * 16u + sg] = vec4<f32>(loadB(k0 + sk, bn), loadB(k0 + sk, bn + 1u),
                                      loadB(k0 + sk, bn + 2u), loadB(k0 + sk, bn + 3u));
{{- else}}
        let bn = n0 + sk * 4u;
        tb[sg * 16u + sk] = vec4<f32>(loadB(k0 + sg, bn), loadB(k0 + sg, bn + 1u),
                                      loadB(k0 + sg, bn + 2u), loadB(k0 + sg, bn + 3u));
{{- end}}
        workgroupBarrier();
{{- range $kk := seq 16}}
        {
            let a4 = ta[{{$kk}}u * 16u + lid.y];
            let b4 = tb[{{$kk}}u * 16u + lid.x];
            acc0 = fma(vec4<f32>(a4.x), b4, acc0);
            acc1 = fma(vec4<f32>(a4.y), b4, acc1);
            acc2 = fma(vec4<f32>(a4.z), b4, acc2);
            acc3 = fma(vec4<f32>(a4.w), b4, acc3);
        }
{{- end}}
        workgroupBarrier();
    }
    let gm = m0 + lid.y * 4u;
    let gn = n0 + lid.x * 4u;
    let accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var i = 0u; i < 4u; i++) {
        if (gm + i < p.m) {
            for (var j = 0u; j < 4u; j++) {
                if (gn + j < p.n) {
                    c[(gm + i) * p.n + gn + j] = accs[i][j];
                }
            }
        }
    }
}
