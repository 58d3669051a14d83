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
// memory as vec4s (4 consecutive m, or n, per slot). A thread's rows are the 4-row groups
// lid.y + 16·r and its columns the 4-column groups lid.x + 16·q (r < TM/4, q < TN/4), so
// the 16 threads of a row read 16 consecutive slots of tb (no bank conflicts) and store 16
// consecutive vec4s of C. The BK loop and the register block are unrolled by the template;
// each accumulator is one fma chain in K order.
//
// Two staging paths (chosen exactly in Go, gemmFast):
//   - Fast (N % BN == 0, K % BK == 0; N and K compiled in): vector global loads without
//     bounds checks — A (and B when TransB) as 4×4 blocks (4 rows × 4 consecutive k as vec4,
//     f16 as vec2<u32>) transposed in registers, B [K, N] as one vec4 (or vec2<u32>) of 4
//     consecutive n — and vec4 stores of C. Rows beyond M are clamped on load and not
//     stored. The next K slice is loaded into registers while the current one is
//     multiplied (register prefetch; without it the 128×128 tile ran at 0.5–0.85× the
//     speed on the H200).
//   - General (any sizes): scalar loads with bounds checks (0 outside the matrix). Every
//     tile slot is written before the barrier: workgroup memory is not zero-initialised.
// Grid: (ceil(N/BN), ceil(M/BM)). The simple twin is linear_naive.wgsl.
// Template parameters: TransB, BF16, Fast (bools); BM, BN (64 or 128), BK (16 or
// 32); N, K (the sizes, Fast only, else 0).
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}

{{- if .Fast}}
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}vec2<u32>{{else}}vec4<f32>{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
{{- else}}
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
{{- end}}

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

{{- if .Fast}}
const N = {{.N}}u;
const K = {{.K}}u;
const N4 = {{div .N 4}}u;
const K4 = {{div .K 4}}u;

// rowA returns 4 consecutive elements k..k+3 (k a multiple of 4) of row i of a [rows, K]
// operand as f32.
fn rowA(i: u32, k: u32) -> vec4<f32> {
    return a[i * K4 + (k >> 2u)];
}
{{- if .BF16}}
fn cvt(v: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y));
}
{{- end}}
{{- else}}

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
{{- end}}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    // acc_i_q: row 4·(lid.y + 16·(i/4)) + i%4 of the block, columns 4·(lid.x + 16·q)..+3.
{{- range $i := seq $TM}}{{range $q := seq $TN4}}
    var acc_{{$i}}_{{$q}} = vec4<f32>(0.0);
{{- end}}{{end}}
{{- if .Fast}}
    let mlast = p.m - 1u;
    // Staging registers: A (and B when TransB) block t, row i: ra{t}_{i} (rb{t}_{i});
    // B [K, N] slot t: rb{t}.
{{- range $t := seq (div (add $ABlk 255) 256)}}{{range $i := seq 4}}
    var ra{{$t}}_{{$i}}: vec4<f32>;
{{- end}}{{end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}{{range $i := seq 4}}
    var rb{{$t}}_{{$i}}: {{if $.BF16}}vec2<u32>{{else}}vec4<f32>{{end}};
{{- end}}{{end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    var rb{{$t}}: {{if $.BF16}}vec2<u32>{{else}}vec4<f32>{{end}};
{{- end}}{{end}}
    {
        let kl = 0u;
{{- template "load" $}}
    }
    for (var k0 = 0u; k0 < K; k0 += BK) {
        // Store the staged registers: A blocks transposed (slot (4·k4 + j)·BM/4 + g holds
        // component j of rows 4g..4g+3).
{{- range $t := seq (div (add $ABlk 255) 256)}}
        {
            let s = li + {{mul $t 256}}u;
{{- if lt $ABlk 256}}
            if (s < {{$ABlk}}u) {
{{- else}}
            {
{{- end}}
                let g = s % {{$AM4}}u;
                let k4 = s / {{$AM4}}u;
{{- range $j := seq 4}}{{$comp := index "xyzw" $j}}
                ta[(4u * k4 + {{$j}}u) * {{$AM4}}u + g] = vec4<f32>(ra{{$t}}_0.{{printf "%c" $comp}}, ra{{$t}}_1.{{printf "%c" $comp}}, ra{{$t}}_2.{{printf "%c" $comp}}, ra{{$t}}_3.{{printf "%c" $comp}});
{{- end}}
            }
        }
{{- end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}
        {
            let s = li + {{mul $t 256}}u;
{{- if lt $BBlk 256}}
            if (s < {{$BBlk}}u) {
{{- else}}
            {
{{- end}}
                let g = s % {{$BN4}}u;
                let k4 = s / {{$BN4}}u;
{{- range $i := seq 4}}
                let v{{$i}} = {{if $.BF16}}cvt(rb{{$t}}_{{$i}}){{else}}rb{{$t}}_{{$i}}{{end}};
{{- end}}
{{- range $j := seq 4}}{{$comp := index "xyzw" $j}}
                tb[(4u * k4 + {{$j}}u) * {{$BN4}}u + g] = vec4<f32>(v0.{{printf "%c" $comp}}, v1.{{printf "%c" $comp}}, v2.{{printf "%c" $comp}}, v3.{{printf "%c" $comp}});
{{- end}}
            }
        }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
        tb[li + {{mul $t 256}}u] = {{if $.BF16}}cvt(rb{{$t}}){{else}}rb{{$t}}{{end}};
{{- end}}
{{- end}}
        workgroupBarrier();
        // The next slice's global loads are in flight during the products.
        if (k0 + BK < K) {
            let kl = k0 + BK;
{{- template "load" $}}
        }
{{- else}}
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
{{- end}}
{{- range $kk := seq .BK}}
        {
{{- range $r := seq $TM4}}
            let a{{$r}} = ta[{{mul $kk $AM4}}u + lid.y + {{mul $r 16}}u];
{{- end}}
{{- range $q := seq $TN4}}
            let b{{$q}} = tb[{{mul $kk $BN4}}u + lid.x + {{mul $q 16}}u];
{{- end}}
{{- range $i := seq $TM}}{{$r := div $i 4}}{{$comp := index "xyzw" (mod $i 4)}}
{{- range $q := seq $TN4}}
            acc_{{$i}}_{{$q}} = fma(vec4<f32>(a{{$r}}.{{printf "%c" $comp}}), b{{$q}}, acc_{{$i}}_{{$q}});
{{- end}}{{end}}
        }
{{- end}}
        workgroupBarrier();
    }
{{- range $i := seq $TM}}
    {
        let gm = m0 + (lid.y + {{mul (div $i 4) 16}}u) * 4u + {{mod $i 4}}u;
        if (gm < p.m) {
{{- range $q := seq $TN4}}
{{- if $.Fast}}
            c[gm * N4 + (n0 >> 2u) + lid.x + {{mul $q 16}}u] = acc_{{$i}}_{{$q}};
{{- else}}
            store4(gm * p.n, n0 + (lid.x + {{mul $q 16}}u) * 4u, acc_{{$i}}_{{$q}});
{{- end}}
{{- end}}
        }
    }
{{- end}}
}
{{- if not .Fast}}

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
{{- end}}
{{- /* load: the staging loads of the K slice at kl (a u32 in scope, as are m0, n0, mlast,
li) into the registers: A 4×4 blocks (rows 4g..4g+3 clamped to M, k = kl + 4·k4..+3) with
g = s % (BM/4), k4 = s / (BM/4); B likewise when TransB, else slot s (k = kl + s / (BN/4),
4 columns at n0 + 4·(s % (BN/4))). */}}
{{- define "load"}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}{{$BSlots := mul .BK $BN4}}
{{- range $t := seq (div (add $ABlk 255) 256)}}
    {
        let s = li + {{mul $t 256}}u;
{{- if lt $ABlk 256}}
        if (s < {{$ABlk}}u) {
{{- else}}
        {
{{- end}}
            let row = m0 + (s % {{$AM4}}u) * 4u;
            let k = kl + (s / {{$AM4}}u) * 4u;
{{- range $i := seq 4}}
            ra{{$t}}_{{$i}} = rowA(min(row + {{$i}}u, mlast), k);
{{- end}}
        }
    }
{{- end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}
    {
        let s = li + {{mul $t 256}}u;
{{- if lt $BBlk 256}}
        if (s < {{$BBlk}}u) {
{{- else}}
        {
{{- end}}
            let row = n0 + (s % {{$BN4}}u) * 4u;
            let k4 = (kl >> 2u) + s / {{$BN4}}u;
{{- range $i := seq 4}}
            rb{{$t}}_{{$i}} = b[(row + {{$i}}u) * K4 + k4];
{{- end}}
        }
    }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    {
        let s = li + {{mul $t 256}}u;
        rb{{$t}} = b[(kl + s / {{$BN4}}u) * N4 + (n0 >> 2u) + s % {{$BN4}}u];
    }
{{- end}}
{{- end}}
{{- end}}
