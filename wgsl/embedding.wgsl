// Embedding: out[r, c] = table[ids[r], c] for r < rows, c < hidden.
// table: the slice of rows v0 .. v0+count−1 of a [vocab, hidden] row-major table, f32
// (array<f32>) or f16 packed two per u32 (F16); a table larger than one storage binding is
// gathered slice by slice, each dispatch writing only the rows whose id falls in its slice.
// ids: u32 [rows] (validated on the host); out: f32 [rows, hidden].
// Template parameters: WG (workgroup size), F16 (bool).

@group(0) @binding(0) var<storage, read> table: array<{{if .F16}}u32{{else}}f32{{end}}>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

struct Params {
    rows: u32,
    hidden: u32,
    v0: u32,
    count: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "ew_main_rc" (dict "WG" .WG "N" "p.rows * p.hidden" "Cols" "p.hidden" "R" "r" "C" "c")}}
    let id = ids[r];
    if (id < p.v0 || id - p.v0 >= p.count) {
        return; // another slice's row
    }
    let e = (id - p.v0) * p.hidden + c;
{{- if .F16}}
    let pair = unpack2x16float(table[e >> 1u]);
    out[i] = select(pair.x, pair.y, (e & 1u) == 1u);
{{- else}}
    out[i] = table[e];
{{- end}}
}
