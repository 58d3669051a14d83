// RMSNorm: y[r, :] = x[r, :] · rsqrt(mean(x[r, :]²) + eps) · gain, per row of n values,
// f32 throughout. gain = 1 + w (ZeroCentred, Qwen3.5's RMSNorm) or w (plain).
// x, y: f32 [rows, n] row-major; w: f32 [n]. One workgroup of WG threads per row, or its
// lanes form (reduce.wgsl: one subgroup per row, the same bits).
// Template parameters: WG (power of two), ZeroCentred (bool), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.rows" "Tree" "f32")}}
    let base = r * p.n;
{{- template "red_sum_squares" (dict "P" . "X" "x" "Base" "base" "N" "p.n" "Out" "ss")}}
    let inv = inverseSqrt(ss / f32(p.n) + p.eps);
    for (var c = lane0; c < p.n; c += RSTEP) {
{{- if .ZeroCentred}}
        y[base + c] = x[base + c] * inv * (1.0 + w[c]);
{{- else}}
        y[base + c] = x[base + c] * inv * w[c];
{{- end}}
    }
}
