// BLRSignGrad, the straight-through gradient of one sign matrix of a BLR path (DESIGN.md
// "Sign learning"), a GEMM that reduces over rows:
//   out[i, j] = sa[i]·sb[j]·Σ_row a[row, i]·b[row, j]
// a f32 [rows, NA], b f32 [rows, NB], sa f32 [NA], sb f32 [NB], out f32 [NA, NB] (overwritten).
// For U: a = dy, b = t1, sa = h, sb = ℓ (G_U [m, r]); for V: a = dt2, b = x, sa = ℓ, sb = g
// (G_V [r, n]). With Mask, out is exactly 0 where the rank index (j when MaskCols, else i)
// is padded (mask == 0). Simple form: one invocation per element of out, an fma chain over
// rows in order (deterministic). Template parameters: Mask, MaskCols (bools), WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> sa: array<f32>;
@group(0) @binding(3) var<storage, read> sb: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
{{- if .Mask}}
@group(0) @binding(5) var<storage, read> mask: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;
{{- else}}
@group(0) @binding(5) var<uniform> p: Params;
{{- end}}

struct Params {
    rows: u32,
    na: u32,
    nb: u32,
};

{{template "ew_main" (dict "WG" .WG "N" "p.na * p.nb")}}
    let ii = i / p.nb;
    let jj = i - ii * p.nb;
{{- if .Mask}}
{{- if .MaskCols}}
    if (mask[jj] == 0u) {
{{- else}}
    if (mask[ii] == 0u) {
{{- end}}
        out[i] = 0.0;
        return;
    }
{{- end}}
    var s = 0.0;
    for (var row = 0u; row < p.rows; row++) {
        s = fma(a[row * p.na + ii], b[row * p.nb + jj], s);
    }
    out[i] = s * (sa[ii] * sb[jj]);
}
