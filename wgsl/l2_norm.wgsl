// L2Norm: y[r, :] = scale · x[r, :] · rsqrt(Σ x[r, :]² + 1e−6), per row of n values, f32
// (HF `l2norm` of the GatedDeltaNet; rows = tokens·heads, n = dk).
// x, y: f32 [rows, n] row-major. One workgroup of WG threads per row, tree reduction.
// Template parameters: WG (power of two).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

struct Params {
    rows: u32,
    n: u32,
    scale: f32,
};
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> partial: array<f32, {{.WG}}>;

{{template "red_main" (dict "WG" .WG "R" "r" "Count" "p.rows")}}
    let base = r * p.n;
{{- template "red_sum_squares" (dict "WG" .WG "X" "x" "Base" "base" "N" "p.n")}}
    let f = p.scale * inverseSqrt(partial[0] + 1e-6);
    for (var c = lid; c < p.n; c += {{.WG}}u) {
        y[base + c] = x[base + c] * f;
    }
}
