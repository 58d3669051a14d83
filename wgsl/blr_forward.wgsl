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
// Tiling and staging as linear.wgsl (the same template structure, see there): 16×16
// threads per BM×BN block, TM×TN outputs per thread in vec4 accumulators (rows lid.y + 16·r,
// columns lid.x + 16·q in 4-groups), BK slices of A ⊙ sa and of the signs (expanded to
// ±1.0 while staging) in workgroup memory as vec4s; each accumulator is one fma chain in K
// order. Fast path (N % BN == 0, K % BK == 0, chosen exactly in Go): vec4 loads of A and sa,
// 4 sign bits per load (4 consecutive k of a row when TransB, 4 consecutive n otherwise:
// the 4 bits never straddle a word because N, K and the offsets are multiples of 4), vec4
// loads and stores of C and sc, rows beyond M clamped on load and not stored, register
// prefetch of the next K slice. General path: per-element bounds-checked loads
// (0 outside the matrix); every tile slot is written before the barrier.
// Grid: (ceil(N/BN), ceil(M/BM)). The simple twin is blr_forward_naive.wgsl.
// Template parameters: TransB, ScaleC, Accum, Fast (bools); BM, BN (64 or 128),
// BK (16 or 32); N, K (the sizes, Fast only, else 0).
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}

{{- $f := "f32"}}{{if .Fast}}{{$f = "vec4<f32>"}}{{end}}
@group(0) @binding(0) var<storage, read> a: array<{{$f}}>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> sa: array<{{$f}}>;
{{- if .ScaleC}}
@group(0) @binding(3) var<storage, read> sc: array<{{$f}}>;
@group(0) @binding(4) var<storage, read_write> c: array<{{$f}}>;
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<{{$f}}>;
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

{{- if .Fast}}
const N = {{.N}}u;
const K = {{.K}}u;
const N4 = {{div .N 4}}u;
const K4 = {{div .K 4}}u;

// rowA returns 4 consecutive elements k..k+3 (k a multiple of 4) of row i of A, times
// sa[k..k+3].
fn rowA(i: u32, k: u32) -> vec4<f32> {
    return a[i * K4 + (k >> 2u)] * sa[k >> 2u];
}

// nibble returns the 4 sign bits of elements e..e+3 (e a multiple of 4) in bits 0..3.
fn nibble(e: u32) -> u32 {
    return (bits[e >> 5u] >> (e & 31u)) & 15u;
}

// signs maps bit 0 of each lane to ±1.0 (1 ↦ +1, 0 ↦ −1).
fn signs(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(0xBF800000u) ^ ((v & vec4<u32>(1u)) << vec4<u32>(31u)));
}
{{- else}}

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
    // Staging registers: A block t, row i: ra{t}_{i}; the 4 sign bits of B when TransB
    // (block t, row i): rb{t}_{i}, else (slot t): rb{t}.
{{- range $t := seq (div (add $ABlk 255) 256)}}{{range $i := seq 4}}
    var ra{{$t}}_{{$i}}: vec4<f32>;
{{- end}}{{end}}
{{- if .TransB}}{{range $t := seq (div (add $BBlk 255) 256)}}{{range $i := seq 4}}
    var rb{{$t}}_{{$i}}: u32;
{{- end}}{{end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    var rb{{$t}}: u32;
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
                let v = vec4<u32>(rb{{$t}}_0, rb{{$t}}_1, rb{{$t}}_2, rb{{$t}}_3);
{{- range $j := seq 4}}
                tb[(4u * k4 + {{$j}}u) * {{$BN4}}u + g] = signs(v >> vec4<u32>({{$j}}u));
{{- end}}
            }
        }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
        tb[li + {{mul $t 256}}u] = signs(vec4<u32>(rb{{$t}}) >> vec4<u32>(0u, 1u, 2u, 3u));
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
            {
                let n4 = (n0 >> 2u) + lid.x + {{mul $q 16}}u;
                let v = acc_{{$i}}_{{$q}}{{if $.ScaleC}} * sc[n4]{{end}};
{{- if $.Accum}}
                c[gm * N4 + n4] = c[gm * N4 + n4] + v;
{{- else}}
                c[gm * N4 + n4] = v;
{{- end}}
            }
{{- else}}
            store4(gm * p.n, n0 + (lid.x + {{mul $q 16}}u) * 4u, acc_{{$i}}_{{$q}});
{{- end}}
{{- end}}
        }
    }
{{- end}}
}
{{- if not .Fast}}

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
{{- end}}
{{- /* load: the staging loads of the K slice at kl (a u32 in scope, as are m0, n0, mlast,
li) into the registers: A ⊙ sa 4×4 blocks (rows 4g..4g+3 clamped to M, k = kl + 4·k4..+3)
with g = s % (BM/4), k4 = s / (BM/4); the sign bits of B likewise when TransB (4 bits per
row), else slot s (k = kl + s / (BN/4), 4 columns at n0 + 4·(s % (BN/4))). */}}
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
            let k = kl + (s / {{$BN4}}u) * 4u;
{{- range $i := seq 4}}
            rb{{$t}}_{{$i}} = nibble((row + {{$i}}u) * K + k);
{{- end}}
        }
    }
{{- end}}
{{- else}}{{range $t := seq (div $BSlots 256)}}
    {
        let s = li + {{mul $t 256}}u;
        rb{{$t}} = nibble((kl + s / {{$BN4}}u) * N + n0 + (s % {{$BN4}}u) * 4u);
    }
{{- end}}
{{- end}}
{{- end}}
