// The GEMM family: C[M, N] = A[M, K] · B, f32 accumulation.
//   Linear  (TransB, BF16):  y = x·Wᵀ, x f32 [rows, in], W f16 [out, in]   (M=rows, K=in,  N=out)
//   LinearT (!TransB, BF16): dx = dy·W, dy f32 [rows, out], W f16 [out, in] (M=rows, K=out, N=in)
//   MatMul  (either, f32 B): C = A·B or A·Bᵀ.
// A: f32 [M, K] row-major. B: [N, K] row-major when TransB, else [K, N]; f32, or f16 packed
// two per u32 word (BF16). C: f32 [M, N] row-major, overwritten.
//
// Tiling: a workgroup of 16×16 threads computes a BM×BN block of C, each thread a TM×TN
// sub-block (TM = BM/16 rows, TN = BN/16 columns, multiples of 4) held in vec4
// accumulators with literal indices, stepping through K in BK slices staged in workgroup
// memory as vec4s (4 consecutive m, or n, per slot). The BK loop and the register block are
// unrolled by the template. Every tile slot is written before the barrier (zero outside the
// matrix): workgroup memory is not zero-initialised on this stack.
// Grid: (ceil(N/BN), ceil(M/BM)). The simple twin is linear_naive.wgsl.
// Template parameters: TransB, BF16 (bools); BM, BN (64 or 128), BK (16 or 32).
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

const BM = {{.BM}}u;
const BN = {{.BN}}u;
const BK = {{.BK}}u;

var<workgroup> ta: array<vec4<f32>, {{$ASlots}}>; // [BK][BM/4]: slot k·BM/4 + g holds m = 4g..4g+3
var<workgroup> tb: array<vec4<f32>, {{$BSlots}}>; // [BK][BN/4]: slot k·BN/4 + g holds n = 4g..4g+3

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

fn store4(row: u32, n: u32, v: vec4<f32>) {
    if (n + 3u < p.n) {
        c[row + n] = v.x;
        c[row + n + 1u] = v.y;
        c[row + n + 2u] = v.z;
        c[row + n + 3u] = v.w;
    } else {
        for (var j = 0u; j < 4u; j++) {
            if (n + j < p.n) {
                c[row + n + j] = v[j];
            }
        }
    }
}
