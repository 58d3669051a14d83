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
// Tiling as linear.wgsl (the same template structure): a workgroup of 16×16 threads computes
// a BM×BN block of C, each thread a TM×TN sub-block (TM = BM/16, TN = BN/16) in vec4
// accumulators with literal indices, stepping through K in BK slices staged in workgroup
// memory as vec4s (signs expanded to ±1.0 while staging). Every tile slot is written before
// the barrier (zero outside the matrix): workgroup memory is not zero-initialised.
// Grid: (ceil(N/BN), ceil(M/BM)). The simple twin is blr_forward_naive.wgsl.
// Template parameters: TransB, ScaleC, Accum (bools); BM, BN (64 or 128), BK (16 or 32).
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}

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

const BM = {{.BM}}u;
const BN = {{.BN}}u;
const BK = {{.BK}}u;

var<workgroup> ta: array<vec4<f32>, {{$ASlots}}>; // [BK][BM/4]: slot k·BM/4 + g holds m = 4g..4g+3
var<workgroup> tb: array<vec4<f32>, {{$BSlots}}>; // [BK][BN/4]: slot k·BN/4 + g holds n = 4g..4g+3

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
    // acc_i_q: row i of the thread's block, columns 4q..4q+3.
{{- range $i := seq $TM}}{{range $q := seq $TN4}}
    var acc_{{$i}}_{{$q}} = vec4<f32>(0.0);
{{- end}}{{end}}
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // Staging: A (and B when TransB) are contiguous along k, so consecutive threads
        // take consecutive k and each slot loads 4 rows; B [K, N] is contiguous along n, so
        // a slot loads 4 consecutive n of one k.
{{- range $t := seq (div $ASlots 256)}}
        {
            let s = li + {{mul $t 256}}u;
            let sk = s % BK;
            let am = m0 + (s / BK) * 4u;
            ta[sk * {{$AM4}}u + s / BK] = vec4<f32>(loadA(am, k0 + sk), loadA(am + 1u, k0 + sk),
                                                    loadA(am + 2u, k0 + sk), loadA(am + 3u, k0 + sk));
        }
{{- end}}
{{- range $t := seq (div $BSlots 256)}}
        {
            let s = li + {{mul $t 256}}u;
{{- if $.TransB}}
            let sk = s % BK;
            let bn = n0 + (s / BK) * 4u;
            tb[sk * {{$BN4}}u + s / BK] = vec4<f32>(loadB(k0 + sk, bn), loadB(k0 + sk, bn + 1u),
                                                    loadB(k0 + sk, bn + 2u), loadB(k0 + sk, bn + 3u));
{{- else}}
            let sk = s / {{$BN4}}u;
            let g = s % {{$BN4}}u;
            let bn = n0 + g * 4u;
            tb[sk * {{$BN4}}u + g] = vec4<f32>(loadB(k0 + sk, bn), loadB(k0 + sk, bn + 1u),
                                               loadB(k0 + sk, bn + 2u), loadB(k0 + sk, bn + 3u));
{{- end}}
        }
{{- end}}
        workgroupBarrier();
{{- range $kk := seq .BK}}
        {
{{- range $r := seq $TM4}}
            let a{{$r}} = ta[{{mul $kk $AM4}}u + lid.y * {{$TM4}}u + {{$r}}u];
{{- end}}
{{- range $q := seq $TN4}}
            let b{{$q}} = tb[{{mul $kk $BN4}}u + lid.x * {{$TN4}}u + {{$q}}u];
{{- end}}
{{- range $i := seq $TM}}{{$r := div $i 4}}{{$comp := index "xyzw" (mod $i 4)}}
{{- range $q := seq $TN4}}
            acc_{{$i}}_{{$q}} = fma(vec4<f32>(a{{$r}}.{{printf "%c" $comp}}), b{{$q}}, acc_{{$i}}_{{$q}});
{{- end}}{{end}}
        }
{{- end}}
        workgroupBarrier();
    }
    let gm = m0 + lid.y * {{$TM}}u;
    let gn = n0 + lid.x * {{$TN}}u;
{{- range $i := seq $TM}}
    if (gm + {{$i}}u < p.m) {
        let row = (gm + {{$i}}u) * p.n;
{{- range $q := seq $TN4}}
        store4(row, gn + {{mul $q 4}}u, acc_{{$i}}_{{$q}});
{{- end}}
    }
{{- end}}
}

fn store1(i: u32, col: u32, v: f32) {
    let s = v{{if .ScaleC}} * sc[col]{{end}};
{{- if .Accum}}
    c[i] = c[i] + s;
{{- else}}
    c[i] = s;
{{- end}}
}

fn store4(row: u32, n: u32, v: vec4<f32>) {
    if (n + 3u < p.n) {
        store1(row + n, n, v.x);
        store1(row + n + 1u, n + 1u, v.y);
        store1(row + n + 2u, n + 2u, v.z);
        store1(row + n + 3u, n + 3u, v.w);
    } else {
        for (var j = 0u; j < 4u; j++) {
            if (n + j < p.n) {
                store1(row + n + j, n + j, v[j]);
            }
        }
    }
}
