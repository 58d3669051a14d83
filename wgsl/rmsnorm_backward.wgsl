// RMSNormBackward, the row part: per row of n values, with inv = rsqrt(mean(x²) + eps) and
// γ = 1 + w (ZeroCentred) or w (plain),
//   dx_i = inv·γ_i·dy_i − inv³·x_i·(1/n)·Σ_j γ_j·dy_j·x_j      (host.RMSNormBackward)
// and inv[row] for the gain gradient (dw_i += Σ_rows dy_i·x_i·inv, grad_col_dot.wgsl).
// x, dy, dx: f32 [rows, n] row-major; w: f32 [n]; inv: f32 [rows]. One workgroup of WG
// threads per row (linear index wid.x + wid.y·nwg.x), both sums reduced in workgroup memory
// (every slot written before the barrier), or its lanes form (reduce.wgsl: one subgroup per
// row, the same bits). Template parameters: WG (power of two), ZeroCentred (bool), Lanes,
// S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;
@group(0) @binding(4) var<storage, read_write> inv_out: array<f32>;

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
};
@group(0) @binding(5) var<uniform> p: Params;

fn gain(c: u32) -> f32 {
{{- if .ZeroCentred}}
    return 1.0 + w[c];
{{- else}}
    return w[c];
{{- end}}
}

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.rows" "Tree" "vec2<f32>")}}
    let base = r * p.n;
{{- template "red_sums2" (dict "P" . "X" "x" "Base" "base" "N" "p.n" "Y" "gain(c) * dy[base + c] * v" "Out" "tot")}}
    let inv = inverseSqrt(tot.x / f32(p.n) + p.eps);
    let k = inv * inv * inv * tot.y / f32(p.n);
    for (var c = lane0; c < p.n; c += RSTEP) {
        dx[base + c] = inv * gain(c) * dy[base + c] - k * x[base + c];
    }
    if (lane_first) {
        inv_out[r] = inv;
    }
}
