// TargetLogits: out[r] = Σ_c h[r, c] · E[ids[r], c], the logit of one chosen vocabulary row
// per token (for the NLL: lse − logit[target]), f32 accumulation.
// h: f32 [rows, hidden]; e: the slice of rows v0 .. v0+count−1 of E [vocab, hidden]
// row-major, f32 (array<f32>) or f16 packed two per u32 (F16); a head larger than one
// storage binding is processed slice by slice, each dispatch writing only the rows whose id
// falls in its slice. ids: u32 [rows] (validated on the host); out: f32 [rows].
// One workgroup of WG threads per row, tree reduction.
// Template parameters: WG (power of two), F16 (bool).

@group(0) @binding(0) var<storage, read> h: array<f32>;
@group(0) @binding(1) var<storage, read> e: array<{{if .F16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

struct Params {
    rows: u32,
    hidden: u32,
    v0: u32,
    count: u32,
};
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> partial: array<f32, {{.WG}}>;

fn ew(i: u32) -> f32 {
{{- if .F16}}
    let pair = unpack2x16float(e[i >> 1u]);
    return select(pair.x, pair.y, (i & 1u) == 1u);
{{- else}}
    return e[i];
{{- end}}
}

{{template "red_main" (dict "WG" .WG "R" "r" "Count" "p.rows")}}
    let id = ids[r];
    if (id < p.v0 || id - p.v0 >= p.count) {
        return;
    }
    let hb = r * p.hidden;
    let eb = (id - p.v0) * p.hidden;
    var s = 0.0;
    for (var c = lid; c < p.hidden; c += {{.WG}}u) {
        s += h[hb + c] * ew(eb + c);
    }
{{- template "red_sum" (dict "WG" .WG "Buf" "partial" "Val" "s")}}
    if (lid == 0u) {
        out[r] = partial[0];
    }
}
