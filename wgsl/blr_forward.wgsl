// The BLR GEMM stage: C[M, N] (+)= (A ⊙ sa)·B (⊙ sc), f32 accumulation, where B is a ±1 sign
// matrix stored as packed bits (DESIGN.md §4). BLRForward runs it twice per path:
//   t1 = (x ⊙ g)·Vᵀ            (TransB: B(k, n) = V[n][k],  M=rows, K=n_in, N=r)
//   y (+)= ((t1 ⊙ ℓ)·Uᵀ) ⊙ h   (TransB, ScaleC, Accum for paths after the first)
// and BLRBackward uses it for c = (t1⊙ℓ)·Uᵀ, dt2 = (dy⊙h)·U and dxg = (dt2⊙ℓ)·V (not TransB:
// B(k, n) = bits row k, column n).
// A: f32 [M, K] row-major; sa: f32 [K] (scales A's columns); sc: f32 [N] (scales C's
// columns, ScaleC only); C: f32 [M, N] row-major, overwritten or, when Accum, added to.
// bits: u32 words of the sign matrix's bit rows laid end to end (the payload's bytes, little
// endian): element e of the row-major matrix ([N, K] when TransB, else [K, N]) is bit e & 31
// of word e >> 5; 1 ↦ +1, 0 ↦ −1.
//
// Tiling as linear.wgsl: a workgroup of 16×16 threads computes a 64×64 block of C, each
// thread a 4×4 sub-block in four vec4 accumulators, stepping through K in BK = 16 slices
// staged in workgroup memory (every slot written before the barrier: workgroup memory is
// not zero-initialised). Grid: (ceil(N/64), ceil(M/64)). The simple twin is
// blr_forward_naive.wgsl. Template parameters: TransB, ScaleC, Accum (bools).

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> sa: array<f32>;
{{- if .ScaleC}}
@group(0) @binding(3) var<storage, read> sc: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{- end}}

struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding({{if .ScaleC}}5{{else}}4{{end}}) var<uniform> p: Params;

const BM = 64u;
const BN = 64u;
const BK = 16u;

var<workgroup> ta: array<vec4<f32>, 256>; // [BK][BM/4]
var<workgroup> tb: array<vec4<f32>, 256>; // [BK][BN/4]

// loadB returns the logical element B(kk, nn) of the K×N sign operand, 0 outside it.
fn loadB(kk: u32, nn: u32) -> f32 {
    if (kk >= p.k || nn >= p.n) {
        return 0.0;
    }
{{- if .TransB}}
    let e = nn * p.k + kk;
{{- else}}
    let e = kk * p.n + nn;
{{- end}}
    return select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
}

fn loadA(mm: u32, kk: u32) -> f32 {
    if (mm >= p.m || kk >= p.k) {
        return 0.0;
    }
    return a[mm * p.k + kk] * sa[kk];
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
                    let idx = (gm + i) * p.n + gn + j;
                    let v = accs[i][j]{{if .ScaleC}} * sc[gn + j]{{end}};
{{- if .Accum}}
                    c[idx] = c[idx] + v;
{{- else}}
                    c[idx] = v;
{{- end}}
                }
            }
        }
    }
}
