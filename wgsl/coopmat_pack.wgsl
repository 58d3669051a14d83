// CoopmatPack: the A operand of a cooperative-matrix GEMM (gpu/coopmat.go), f32 → f16 with a
// power-of-two scale per row. For row i < m, with v_ic = a[i, c]·sa[c] (sa = 1 when Scale is
// off) and amax_i = max_c |v_ic|, e_i = clamp(15 − frexp(amax_i).exp, −126, 126) puts amax_i·2^e_i
// in [2¹⁴, 2¹⁵) (f16's largest finite value is 65504 < 2¹⁶, so nothing overflows); then
//   a16[i, c] = f16(v_ic·2^e_i) for c < k, 0 for k ≤ c < kp;   rs[i] = 2^−e_i
// (0 scale exponent for an all-zero or non-finite row). Rows m ≤ i < mp are zero with rs 1.
// The GEMM's epilogue multiplies row i's sums by rs[i], undoing the scale exactly; the only
// error is f16's rounding of each v_ic, ≤ 2⁻¹¹·|v_ic| above amax_i·2⁻²⁹ (below it the f16
// subnormal step, 2⁻²⁴·2^−e_i ≤ amax_i·2⁻³⁸). Gradients scaled by 1/(nb·t) (~1e-8) would flush
// to zero in f16 without the scale.
// a: f32 [m, k]; sa: f32 [k]; a16: u32 [mp, kp/2] (element 2w in the low half of word w);
// rs: f32 [mp]. Template parameters: WG (a power of two), Scale, and R: 0 for the general
// form (one workgroup of WG threads per row, 4-byte loads, a loop that reads the row twice;
// the simple twin); else the vector form: k % 4 = 0 and kp/4 ≤ R·T, a, sa and a16 read and
// written 16 and 8 bytes at a time, T threads per row (a power of two) and RW = WG/T rows per
// workgroup, each invocation loading its R vectors of the row into registers at once (all
// loads in flight together, one read of the row) and converting them from there; the row's
// maximum is a tree over its T slots of workgroup memory. Rows of a short row (kp = 384: 96
// vectors) no longer leave most of a workgroup idle behind seven barriers. Both forms give
// the same scale (the maximum is exact) and the same conversions. gpu/coopmat.go coopPackFor
// chooses (a 2-D grid past 65535 workgroups). Pairs (the 8-bit GEMM's A: coopmat_gemm.comp
// QUANT) stores each group of 4 columns in the order 0, 2, 1, 3 — word 2j of a row holds
// columns 4j and 4j+2, word 2j+1 columns 4j+1 and 4j+3 (kp % 4 = 0) — the order in which that
// kernel stages its decoded weights; the values are the same. Twin (the vector form, Scale;
// bindings a, sa, sb, a16, rs, b16, rsb):
// the two paths of a BLR layer that share A (t1: x ⊙ g_p; dt2: dy ⊙ h_p) packed in one pass
// that reads A once: A ⊙ sa into a16, rs and A ⊙ sb into b16, rsb, each exactly as a pack of
// its own (the same products, maximum and conversions: the same bits; gpu/coopmat.go
// coopPackPaths).

{{- $b := 1}}{{if .Scale}}{{$b = 2}}{{end}}{{if .Twin}}{{$b = 3}}{{end}}
{{- /* $b: a16's binding; rs follows it, then (Twin) b16 and rsb, then the uniforms */ -}}
{{- if .R}}
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
{{- if .Scale}}
@group(0) @binding(1) var<storage, read> sa: array<vec4<f32>>;
{{- end}}
{{- if .Twin}}
@group(0) @binding(2) var<storage, read> sb: array<vec4<f32>>;
{{- end}}
@group(0) @binding({{$b}}) var<storage, read_write> a16: array<vec2<u32>>;
{{- else}}
@group(0) @binding(0) var<storage, read> a: array<f32>;
{{- if .Scale}}
@group(0) @binding(1) var<storage, read> sa: array<f32>;
{{- end}}
@group(0) @binding({{$b}}) var<storage, read_write> a16: array<u32>;
{{- end}}
@group(0) @binding({{add $b 1}}) var<storage, read_write> rs: array<f32>;
{{- if .Twin}}
@group(0) @binding({{add $b 2}}) var<storage, read_write> b16: array<vec2<u32>>;
@group(0) @binding({{add $b 3}}) var<storage, read_write> rsb: array<f32>;
{{- end}}

struct Params {
    m: u32,
    k: u32,
    kp: u32,
    mp: u32,
};
@group(0) @binding({{if .Twin}}{{add $b 4}}{{else}}{{add $b 2}}{{end}}) var<uniform> p: Params;

var<workgroup> partial: array<{{if .Twin}}vec2<f32>{{else}}f32{{end}}, {{.WG}}>;
{{if .R}}
{{- if .Twin}}
// vals returns elements 4q … 4q+3 of row i of A ⊙ sa and of A ⊙ sb (zero past the matrix).
fn vals(i: u32, q: u32) -> array<vec4<f32>, 2> {
    if (i >= p.m || 4u * q >= p.k) {
        return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    let x = a[i * (p.k / 4u) + q];
    return array<vec4<f32>, 2>(x * sa[q], x * sb[q]);
}
{{- else}}
// val returns elements 4q … 4q+3 of row i (zero past the matrix).
fn val(i: u32, q: u32) -> vec4<f32> {
    if (i >= p.m || 4u * q >= p.k) {
        return vec4<f32>(0.0);
    }
    return a[i * (p.k / 4u) + q]{{if .Scale}} * sa[q]{{end}};
}
{{- end}}
{{else}}
fn val(i: u32, c: u32) -> f32 {
    if (i >= p.m || c >= p.k) {
        return 0.0;
    }
    return a[i * p.k + c]{{if .Scale}} * sa[c]{{end}};
}
{{end}}
{{- if .R}}
@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Row i of this workgroup's RW rows; a row past mp takes part in the barriers only.
    let lane = lid % {{.T}}u;
    let i = (wid.x + wid.y * nwg.x) * {{div .WG .T}}u + lid / {{.T}}u;
{{- if .Twin}}
    var mx = vec2<f32>(0.0); // the row's largest |value| of A ⊙ sa, of A ⊙ sb
{{- range $r := seq .R}}
    let vu{{$r}} = vals(i, lane + {{$r}}u * {{$.T}}u);
    let v{{$r}} = vu{{$r}}[0];
    let u{{$r}} = vu{{$r}}[1];
{{- end}}
{{- range $r := seq .R}}
    let a{{$r}} = abs(v{{$r}});
    let b{{$r}} = abs(u{{$r}});
    mx = max(mx, vec2<f32>(max(max(a{{$r}}.x, a{{$r}}.y), max(a{{$r}}.z, a{{$r}}.w)),
                           max(max(b{{$r}}.x, b{{$r}}.y), max(b{{$r}}.z, b{{$r}}.w))));
{{- end}}
{{- else}}
    var mx = 0.0;
{{- range $r := seq .R}}
    let v{{$r}} = val(i, lane + {{$r}}u * {{$.T}}u);
{{- end}}
{{- range $r := seq .R}}
    let a{{$r}} = abs(v{{$r}});
    mx = max(mx, max(max(a{{$r}}.x, a{{$r}}.y), max(a{{$r}}.z, a{{$r}}.w)));
{{- end}}
{{- end}}
    partial[lid] = mx;
    workgroupBarrier();
    for (var h = {{.T}}u / 2u; h > 0u; h >>= 1u) {
        if (lane < h) {
            partial[lid] = max(partial[lid], partial[lid + h]);
        }
        workgroupBarrier();
    }
    let amax = partial[lid - lane]{{if .Twin}}.x{{end}};
{{- template "red_pow2" (dict "Max" "amax" "E" "e")}}
    let s = ldexp(1.0, e);
{{- if .Twin}}
    let bmax = partial[lid - lane].y;
{{- template "red_pow2" (dict "Max" "bmax" "E" "eb")}}
    let sbv = ldexp(1.0, eb);
{{- end}}
    if (i >= p.mp) {
        return;
    }
    if (lane == 0u) {
        rs[i] = ldexp(1.0, -e);
{{- if .Twin}}
        rsb[i] = ldexp(1.0, -eb);
{{- end}}
    }
    let vecs = p.kp / 4u;
{{- range $r := seq .R}}
    if (lane + {{$r}}u * {{$.T}}u < vecs) {
        let w{{$r}} = v{{$r}} * s;
        a16[i * vecs + lane + {{$r}}u * {{$.T}}u] = vec2<u32>(pack2x16float(w{{$r}}.{{if $.Pairs}}xz{{else}}xy{{end}}), pack2x16float(w{{$r}}.{{if $.Pairs}}yw{{else}}zw{{end}}));
{{- if $.Twin}}
        let z{{$r}} = u{{$r}} * sbv;
        b16[i * vecs + lane + {{$r}}u * {{$.T}}u] = vec2<u32>(pack2x16float(z{{$r}}.{{if $.Pairs}}xz{{else}}xy{{end}}), pack2x16float(z{{$r}}.{{if $.Pairs}}yw{{else}}zw{{end}}));
{{- end}}
    }
{{- end}}
}
{{- else}}
{{template "red_main" (dict "WG" .WG "R" "i" "Count" "p.mp")}}
    var mx = 0.0;
    for (var c = lid; c < p.k; c += {{.WG}}u) {
        mx = max(mx, abs(val(i, c)));
    }
{{- template "red_pow2_scale" (dict "WG" .WG "Buf" "partial" "Val" "mx" "Inv" "rs[i]")}}
    let words = p.kp / 2u;
    for (var w = lid; w < words; w += {{.WG}}u) {
{{- if .Pairs}}
        let c = (w >> 1u) * 4u + (w & 1u); // columns c and c + 2
        a16[i * words + w] = pack2x16float(vec2<f32>(val(i, c) * s, val(i, c + 2u) * s));
{{- else}}
        a16[i * words + w] = pack2x16float(vec2<f32>(val(i, 2u * w) * s, val(i, 2u * w + 1u) * s));
{{- end}}
    }
}
{{- end}}
