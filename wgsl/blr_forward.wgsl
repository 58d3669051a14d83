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
// Raw (ScaleC only): every output's sum before ⊙ sc is also stored in raw [M, N] (BLRForward
// keeps c = (t1 ⊙ ℓ)·Uᵀ so that BLRBackward need not recompute it).
// Grid: (ceil(N/BN), ceil(M/BM)). The simple twin is blr_forward_naive.wgsl.
// Template parameters: TransB, ScaleC, Accum, Raw, Fast (bools); BM, BN (64 or 128),
// BK (16 or 32); N, K (the sizes, Fast only, else 0).
{{- $TM := div .BM 16}}{{$TN := div .BN 16}}{{$TM4 := div $TM 4}}{{$TN4 := div $TN 4}}
{{- $AM4 := div .BM 4}}{{$BN4 := div .BN 4}}{{$BK4 := div .BK 4}}
{{- $ASlots := mul .BK $AM4}}{{$BSlots := mul .BK $BN4}}
{{- $ABlk := mul $AM4 $BK4}}{{$BBlk := mul $BN4 $BK4}}

{{- $f := "f32"}}{{if .Fast}}{{$f = "vec4<f32>"}}{{end}}
{{template "gemm_blr_io" (dict "A" $f "SA" $f "F" $f "ScaleC" .ScaleC "Raw" .Raw)}}

{{template "gemm_tiles" .}}

{{- if .Fast}}

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
{{- template "gemm_belem" (dict "TransB" .TransB)}}
    return select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
}

fn loadA(mm: u32, kk: u32) -> f32 {
    if (mm >= p.m || kk >= p.k) {
        return 0.0;
    }
    return a[mm * p.k + kk] * sa[kk];
}
{{- end}}

// The kernel body: the tiled GEMM of gemm_tile.wgsl, with this file's sign-bit B hooks below.
{{template "gemm_main" .}}
{{- if not .Fast}}

fn store1(i: u32, col: u32, v: f32) {
{{- if .Raw}}
    raw[i] = v;
{{- end}}
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
{{- define "gemm_breg"}}u32{{end}}
{{- define "gemm_btrans"}}let v = vec4<u32>(rb{{.t}}_0, rb{{.t}}_1, rb{{.t}}_2, rb{{.t}}_3);{{end}}
{{- define "gemm_bcol"}}signs(v >> vec4<u32>({{.j}}u)){{end}}
{{- define "gemm_bslot"}}signs(vec4<u32>(rb{{.t}}) >> vec4<u32>(0u, 1u, 2u, 3u)){{end}}
{{- define "gemm_bk"}}let k = kl + (s / {{div .BN 4}}u) * 4u;{{end}}
{{- define "gemm_bload"}}nibble((row + {{.i}}u) * K + k){{end}}
{{- define "gemm_bslotload"}}nibble((kl + s / {{div .BN 4}}u) * N + n0 + (s % {{div .BN 4}}u) * 4u){{end}}
{{- define "gemm_cfast"}}{ let n4 = (n0 >> 2u) + lid.x + {{mul .q 16}}u;{{if .P.Raw}} raw[gm * N4 + n4] = acc_{{.i}}_{{.q}};{{end}} let v = acc_{{.i}}_{{.q}}{{if .P.ScaleC}} * sc[n4]{{end}};{{if .P.Accum}} c[gm * N4 + n4] = c[gm * N4 + n4] + v;{{else}} c[gm * N4 + n4] = v;{{end}} }{{end}}
