// BLRSignGrad, the straight-through gradient of one sign matrix of a BLR path (DESIGN.md
// "Sign learning"), a GEMM that reduces over rows:
//   out[i, j] = sa[i]·sb[j]·Σ_row a[row, i]·b[row, j]
// a f32 [rows, NA], b f32 [rows, NB], sa f32 [NA], sb f32 [NB], out f32 [NA, NB] (overwritten).
// For U: a = dy, b = t1, sa = h, sb = ℓ (G_U [m, r]); for V: a = dt2, b = x, sa = ℓ, sb = g
// (G_V [r, n]). With Mask, out is exactly 0 where the rank index (j when MaskCols, else i)
// is padded (mask == 0). Two forms (template Tiled), bit-identical (the same fma chain over
// rows in order, deterministic):
//   simple (the parity twin): one invocation per element of out, WG per workgroup;
//   tiled: a workgroup of 16×16 invocations owns a 16×16 tile of out; per chunk of 16 rows
//          it stages a[rows, i-tile] and b[rows, j-tile] in workgroup memory (coalesced
//          loads; every slot written, zero outside the matrix, before the barrier) and each
//          invocation adds 16 fmas. Grid: (ceil(NB/16), ceil(NA/16)).
// Template parameters: Tiled, Mask, MaskCols (bools), WG.

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

{{- if .Tiled}}

var<workgroup> ta: array<f32, 256>; // [row in chunk][i in tile]
var<workgroup> tb: array<f32, 256>; // [row in chunk][j in tile]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let jj = wid.x * 16u + lid.x;
    let ii = wid.y * 16u + lid.y;
    let ia = wid.y * 16u + lid.x; // the a column this invocation loads
    var s = 0.0;
    for (var r0 = 0u; r0 < p.rows; r0 += 16u) {
        let row = r0 + lid.y;
        var va = 0.0;
        var vb = 0.0;
        if (row < p.rows && ia < p.na) {
            va = a[row * p.na + ia];
        }
        if (row < p.rows && jj < p.nb) {
            vb = b[row * p.nb + jj];
        }
        ta[lid.y * 16u + lid.x] = va;
        tb[lid.y * 16u + lid.x] = vb;
        workgroupBarrier();
        let n = min(16u, p.rows - r0);
        for (var k = 0u; k < n; k++) {
            s = fma(ta[k * 16u + lid.y], tb[k * 16u + lid.x], s);
        }
        workgroupBarrier();
    }
    if (ii >= p.na || jj >= p.nb) {
        return;
    }
{{- if .Mask}}
{{- if .MaskCols}}
    if (mask[jj] == 0u) {
{{- else}}
    if (mask[ii] == 0u) {
{{- end}}
        out[ii * p.nb + jj] = 0.0;
        return;
    }
{{- end}}
    out[ii * p.nb + jj] = s * (sa[ii] * sb[jj]);
}
{{- else}}

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
{{- end}}
