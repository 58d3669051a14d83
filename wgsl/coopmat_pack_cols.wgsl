// CoopmatPackCols: an operand of the cooperative-matrix sign-gradient GEMM (BLRSignGrad's
// out[i, j] = sa[i]·sb[j]·Σ_row a[row, i]·b[row, j]; gpu/coopmat.go coopSignGrad), f32 → f16
// with a power-of-two scale per column (the GEMM reduces over rows, so a column of a or b is
// one row of A or one column of B): for column c < n of x [rows, n], with amax_c =
// max_row |x[row, c]| and e_c = clamp(15 − frexp(amax_c).exp, −126, 126) (0 for an all-zero
// or non-finite column), as coopmat_pack.wgsl does per row.
// Stages (template Stage), recorded in this order:
//   colmax: maxbits[c] = atomicMax of the bits of |x[row, c]| (non-negative f32 bits order
//           as the values; a NaN's bits are above +∞'s) over rows chunks of RC rows, one
//           workgroup of WG threads per 64 columns and chunk; maxbits starts zeroed;
//   scale:  mult[c] = 2^e_c and scale[c] = 2^−e_c·s[c] (·0 where Mask and mask[c] == 0: a
//           padded rank, whose gradient is exactly 0) for c < n; both 0 for n ≤ c < np;
//   t:      out16 = the transposed, scaled x: element (c, row) at half c·kp + row for c < np,
//           row < kp (0 outside x), through 32×32 tiles in workgroup memory so that reads
//           and writes are coalesced; grid (np/32, kp/32);
//   plain:  out16 = the scaled x as is: element (row, c) at half row·n + c (n even).
// x: f32 [rows, n]; s: f32 [n]; mask: u32 [n]; maxbits: u32 [n]; mult, scale: f32 [np];
// out16: u32 words of f16 pairs (element 2w in the low half of word w).
// Template parameters: Stage, Mask, WG, RC.

struct Params {
    rows: u32,
    n: u32,
    kp: u32,
    np: u32,
};

{{- if eq .Stage "colmax"}}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> maxbits: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x * {{.WG}}u + lid;
    if (c >= p.n) {
        return;
    }
    var mx = 0u;
    let r1 = min(p.rows, (wid.y + 1u) * {{.RC}}u);
    for (var r = wid.y * {{.RC}}u; r < r1; r++) {
        mx = max(mx, bitcast<u32>(abs(x[r * p.n + c])));
    }
    atomicMax(&maxbits[c], mx);
}
{{- else if eq .Stage "scale"}}
@group(0) @binding(0) var<storage, read> maxbits: array<u32>;
@group(0) @binding(1) var<storage, read> s: array<f32>;
{{- if .Mask}}
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> mult: array<f32>;
@group(0) @binding(4) var<storage, read_write> scale: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
{{- else}}
@group(0) @binding(2) var<storage, read_write> mult: array<f32>;
@group(0) @binding(3) var<storage, read_write> scale: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
{{- end}}

{{template "ew_index" (dict "WG" .WG)}}
    let c = i;
    if (c >= p.np) {
        return;
    }
    if (c >= p.n) {
        mult[c] = 0.0;
        scale[c] = 0.0;
        return;
    }
    let amax = bitcast<f32>(maxbits[c]);
{{- template "red_pow2" (dict "Max" "amax" "E" "e")}}
    mult[c] = ldexp(1.0, e);
{{- if .Mask}}
    scale[c] = select(0.0, ldexp(1.0, -e) * s[c], mask[c] != 0u);
{{- else}}
    scale[c] = ldexp(1.0, -e) * s[c];
{{- end}}
}
{{- else}}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> mult: array<f32>;
@group(0) @binding(2) var<storage, read_write> out16: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
{{- if eq .Stage "t"}}

var<workgroup> tile: array<f32, 1056>; // 32 rows × 33 (padded against bank conflicts)

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c0 = wid.x * 32u;
    let r0 = wid.y * 32u;
    for (var q = 0u; q < 16u; q++) {
        let idx = lid + 64u * q;
        let r = r0 + idx / 32u;
        let c = c0 + idx % 32u;
        var v = 0.0;
        if (r < p.rows && c < p.n) {
            v = x[r * p.n + c] * mult[c];
        }
        tile[(idx / 32u) * 33u + idx % 32u] = v;
    }
    workgroupBarrier();
    // Column c0 + j's rows r0 … r0+31 are 16 consecutive words; 4 columns per pass.
    for (var q = 0u; q < 8u; q++) {
        let j = 4u * q + lid / 16u;
        let w = lid % 16u;
        let v = vec2<f32>(tile[(2u * w) * 33u + j], tile[(2u * w + 1u) * 33u + j]);
        out16[((c0 + j) * p.kp + r0) / 2u + w] = pack2x16float(v);
    }
}
{{- else}}

{{template "ew_index" (dict "WG" .WG)}}
    let w = i;
    let half = p.n / 2u;
    if (w >= p.rows * half) {
        return;
    }
    let r = w / half;
    let c = 2u * (w % half);
    out16[w] = pack2x16float(vec2<f32>(x[r * p.n + c] * mult[c], x[r * p.n + c + 1u] * mult[c + 1u]));
}
{{- end}}
{{- end}}
