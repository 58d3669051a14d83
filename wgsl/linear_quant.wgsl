// LinearQuant: y = x·Wᵀ with W an 8-bit quantized weight, dequantized as it is loaded (no
// dense copy of W exists anywhere), f32 accumulation.
//   x f32 [M, K] row-major (M = rows, K = in);
//   W [N, K] (N = out): one byte code per weight, row-major, four per u32 word
//     (little-endian: byte e = n·K + k is bits 8·(e%4) … of word e/4); FP8: float8_e4m3fn
//     codes, q8: int8 codes;
//   scales [ceil(N/BR), ceil(K/BC)] row-major, f32 or f16 (packed two per u32 word,
//     ScaleF16): W[n, k] = value(code) · scale[n/BR, k/BC] (FP8's weight_scale_inv per
//     BR×BC block, q8's per row and BC inputs);
//   y f32 [M, N] row-major, overwritten.
// Every dequantized weight is value(code) · scale rounded to f32 once (exact for q8: a 7-bit
// integer times an 11-bit f16 significand), and every output one fma chain in K order, so
// the three forms below are bit-identical.
// Forms (Form): "naive", one invocation per output (the simple twin, the reference of the
// others); "tiled", gemm_tile.wgsl's body with TransB (Fast where N % BN = 0 and K % BK = 0,
// BC % 4 = 0: a slot's 4 consecutive k are one code word and share one scale); "lanes",
// gemm_lanes.wgsl's body for CPU adapters (K % 4 = 0, BC % 4 = 0).
// Template parameters: Form; FP8, ScaleF16 (bools); BR, BC (the scale block); naive: WG;
// tiled: BM, BN, BK, Fast, N, K, TransB (true); lanes: S, R, C, Pair (false).

{{- if or (eq .Form "lanes") .Fast}}
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
{{- else}}
@group(0) @binding(0) var<storage, read> a: array<f32>;
{{- end}}
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> sc: array<{{if .ScaleF16}}u32{{else}}f32{{end}}>;
{{- if and (eq .Form "tiled") .Fast}}
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{- end}}

{{template "gemm_params" (dict "B" 4)}}

const BR = {{.BR}}u;
const BC = {{.BC}}u;

// scaleAt returns the scale of W[row, kk].
fn scaleAt(row: u32, kk: u32) -> f32 {
    let e = (row / BR) * ((p.k + BC - 1u) / BC) + kk / BC;
{{- if .ScaleF16}}
    let pair = unpack2x16float(sc[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
{{- else}}
    return sc[e];
{{- end}}
}

// dq4 returns the four weights whose codes are the bytes of w (byte i is component i; a
// single code in the low byte gives its weight in .x), times the scale s.
fn dq4(w: u32, s: f32) -> vec4<f32> {
{{- if .FP8}}
    // float8_e4m3fn → f16 bits: the sign to bit 15, exponent and mantissa (bits 6–0) to bits
    // 13–7. The f16 then holds the e4m3 value × 2⁻⁸ exactly (same mantissa, exponent bias 15
    // instead of 7; e4m3 subnormals m·2⁻⁹ become f16 subnormals m·2⁻¹⁷), and × 256 restores
    // it. NaN codes (0x7F, 0xFF) are refused before upload (cmf.Tensor.QuantCodes).
    let lo = ((w & 0x7Fu) << 7u) | ((w & 0x80u) << 8u) | ((w & 0x7F00u) << 15u) | ((w & 0x8000u) << 16u);
    let h = w >> 16u;
    let hi = ((h & 0x7Fu) << 7u) | ((h & 0x80u) << 8u) | ((h & 0x7F00u) << 15u) | ((h & 0x8000u) << 16u);
    return vec4<f32>(unpack2x16float(lo), unpack2x16float(hi)) * 256.0 * s;
{{- else}}
    let q = vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u), bitcast<i32>(w << 8u), bitcast<i32>(w)) >> vec4<u32>(24u);
    return vec4<f32>(q) * s;
{{- end}}
}

// loadB returns B(kk, nn) = W[nn, kk], 0 outside W (the naive and the tiled general forms).
fn loadB(kk: u32, nn: u32) -> f32 {
    if (kk >= p.k || nn >= p.n) {
        return 0.0;
    }
    let e = nn * p.k + kk;
    return dq4((b[e >> 2u] >> (8u * (e & 3u))) & 0xFFu, scaleAt(nn, kk)).x;
}
{{- if eq .Form "naive"}}

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = (wid.x + wid.y * nwg.x) * {{.WG}}u + li;
    if (idx >= p.m * p.n) {
        return;
    }
    let i = idx / p.n;
    let j = idx % p.n;
    var acc = 0.0;
    for (var kk = 0u; kk < p.k; kk++) {
        acc = fma(a[i * p.k + kk], loadB(kk, j), acc);
    }
    c[idx] = acc;
}
{{- else if eq .Form "lanes"}}

{{template "lanes_main" .}}
{{- else}}

{{template "gemm_tiles" .}}
{{template "gemm_main_f32" .}}
{{- end}}
{{- define "gemm_breg"}}vec2<u32>{{end}}
{{- define "gemm_btrans"}}{{range $i := seq 4}} let v{{$i}} = dq4(rb{{$.t}}_{{$i}}.x, bitcast<f32>(rb{{$.t}}_{{$i}}.y));{{end}}{{end}}
{{- define "gemm_bcol"}}{{$c := printf "%c" (index "xyzw" .j)}}vec4<f32>(v0.{{$c}}, v1.{{$c}}, v2.{{$c}}, v3.{{$c}}){{end}}
{{- define "gemm_bk"}}let k4 = (kl >> 2u) + s / {{div .BN 4}}u;{{end}}
{{- define "gemm_bload"}}vec2<u32>(b[(row + {{.i}}u) * K4 + k4], bitcast<u32>(scaleAt(row + {{.i}}u, 4u * k4))){{end}}
{{- define "gemm_cfast"}}c[gm * N4 + (n0 >> 2u) + lid.x + {{mul .q 16}}u] = acc_{{.i}}_{{.q}};{{end}}
{{- define "lanes_setup"}}{{range $j := seq .C}} let bn{{$j}} = min(nl + {{$j}}u, p.n - 1u); let bc{{$j}} = bn{{$j}} * k4n;{{end}}{{end}}
{{- define "lanes_bload"}}{{range $j := seq .C}} let b{{$j}} = dq4(b[bc{{$j}} + k4], scaleAt(bn{{$j}}, 4u * k4));{{end}}{{end}}
{{- define "lanes_aprep"}}{{end}}
{{- define "lanes_aload"}}a[ar{{.a}} + k4]{{end}}
{{- define "lanes_ascale"}}{{.v}}{{end}}
{{- define "lanes_store"}}c[{{.gm}} * p.n + {{.n}}] = {{.v}};{{end}}
