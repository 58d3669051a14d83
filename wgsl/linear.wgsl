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

{{template "gemm_params" (dict "B" 3)}}

{{template "gemm_tiles" .}}

{{- if .Fast}}
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
{{- template "gemm_bvalue" (dict "TransB" .TransB "BF16" .BF16)}}
}
{{- end}}

// The kernel body: the tiled GEMM of gemm_tile.wgsl, with this file's f16 or f32 B hooks below.
{{template "gemm_main_f32" .}}
{{- define "gemm_breg"}}{{if .BF16}}vec2<u32>{{else}}vec4<f32>{{end}}{{end}}
{{- define "gemm_btrans"}}{{range $i := seq 4}} let v{{$i}} = {{if $.P.BF16}}cvt(rb{{$.t}}_{{$i}}){{else}}rb{{$.t}}_{{$i}}{{end}};{{end}}{{end}}
{{- define "gemm_bcol"}}{{$c := printf "%c" (index "xyzw" .j)}}vec4<f32>(v0.{{$c}}, v1.{{$c}}, v2.{{$c}}, v3.{{$c}}){{end}}
{{- define "gemm_bslot"}}{{if .P.BF16}}cvt(rb{{.t}}){{else}}rb{{.t}}{{end}}{{end}}
{{- define "gemm_bk"}}let k4 = (kl >> 2u) + s / {{div .BN 4}}u;{{end}}
{{- define "gemm_bload"}}b[(row + {{.i}}u) * K4 + k4]{{end}}
{{- define "gemm_bslotload"}}b[(kl + s / {{div .BN 4}}u) * N4 + (n0 >> 2u) + s % {{div .BN 4}}u]{{end}}
{{- define "gemm_cfast"}}c[gm * N4 + (n0 >> 2u) + lid.x + {{mul .q 16}}u] = acc_{{.i}}_{{.q}};{{end}}
