// QKNormRoPE: per-head query/key RMSNorm with zero-centred gain, then partial rotary position
// embedding (DESIGN.md §3, host.QKNormRoPE):
//   n = x · rsqrt(mean(x²) + eps) · (1 + w)                         (per head, over HD)
//   y_i       = n_i·cos(p·f_i) − n_{i+R/2}·sin(p·f_i)     i < R/2
//   y_{i+R/2} = n_{i+R/2}·cos(p·f_i) + n_i·sin(p·f_i)
//   y_i       = n_i                                     i ≥ R
// with p = row mod t (the position within the window) and f_i = θ^(−2i/R).
// x, y: f32 [rows, heads, HD] row-major; w: f32 [HD]; tab: f32 [2, t, R/2], the cosines then
// the sines of p·f_i, computed on the host in float64 (exact arguments for any p, where an
// f32 p·f_i and a GPU cos of a large argument would lose ~1e-4).
// One workgroup of WG threads per (row, head), or its lanes form (reduce.wgsl: one subgroup
// per group, the same bits). Template parameters: WG (power of two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> tab: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
{{template "rope_params"}}
@group(0) @binding(4) var<uniform> p: Params;

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "gi" "Count" "p.groups" "Tree" "f32")}}
    let base = gi * p.hd;
{{- template "red_sum_squares" (dict "P" . "X" "x" "Base" "base" "N" "p.hd" "Out" "ss")}}
    let inv = inverseSqrt(ss / f32(p.hd) + p.eps);
    let pos = (gi / p.heads) % p.t;
    let rot = 2u * p.half;
    for (var c = lane0; c < p.hd; c += RSTEP) {
        let nc = x[base + c] * inv * (1.0 + w[c]);
        if (c >= rot) {
            y[base + c] = nc;
        } else {
{{- template "rope_pair" (dict "I" "            ")}}
            let np = x[base + pc] * inv * (1.0 + w[pc]);
            y[base + c] = select(nc * cs + np * sn, nc * cs - np * sn, first);
        }
    }
}
