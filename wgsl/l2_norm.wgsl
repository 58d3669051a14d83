// L2Norm: y[r, :] = scale · x[r, :] · rsqrt(Σ x[r, :]² + 1e−6), per row of n values, f32
// (HF `l2norm` of the GatedDeltaNet; rows = tokens·heads, n = dk).
// x, y: f32 [rows, n] row-major. One workgroup of WG threads per row, tree reduction, or its
// lanes form (reduce.wgsl: one subgroup per row, the same bits).
// Template parameters: WG (power of two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

struct Params {
    rows: u32,
    n: u32,
    scale: f32,
};
@group(0) @binding(2) var<uniform> p: Params;

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.rows" "Tree" "f32")}}
    let base = r * p.n;
{{- template "red_sum_squares" (dict "P" . "X" "x" "Base" "base" "N" "p.n" "Out" "ss")}}
    let f = p.scale * inverseSqrt(ss + 1e-6);
    for (var c = lane0; c < p.n; c += RSTEP) {
        y[base + c] = x[base + c] * f;
    }
}
