// GatedRMSNorm: the gated norm of the GatedDeltaNet (DESIGN.md §3, HF
// Qwen3NextRMSNormGated), per value head over dv with a plain gain:
//   y = w ⊙ x · rsqrt(mean(x²) + eps) ⊙ silu(z)
// x, z, y: f32 [rows, hv, dv] row-major, i.e. groups = rows·hv groups of n = dv values;
// w: f32 [dv]. One workgroup of WG threads per group, tree reduction, f32 throughout, or its
// lanes form (reduce.wgsl: one subgroup per group, the same bits).
// Template parameters: WG (power of two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

struct Params {
    groups: u32,
    n: u32,
    eps: f32,
};
@group(0) @binding(4) var<uniform> p: Params;

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.groups" "Tree" "f32")}}
    let base = r * p.n;
{{- template "red_sum_squares" (dict "P" . "X" "x" "Base" "base" "N" "p.n" "Out" "ss")}}
    let inv = inverseSqrt(ss / f32(p.n) + p.eps);
    for (var c = lane0; c < p.n; c += RSTEP) {
        let zz = z[base + c];
        // silu(z) = z·sigmoid(z), sigmoid without overflow.
{{- template "ew_sigmoid" (dict "X" "zz" "S" "sg")}}
        y[base + c] = w[c] * (x[base + c] * inv) * (zz * sg);
    }
}
