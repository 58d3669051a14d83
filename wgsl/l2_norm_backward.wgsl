// L2NormBackward: the backward of y = scale·x·f, f = (Σx² + ε)^−½, ε = 1e−6, per row of n
// values (host.L2NormBackward), the exact Jacobian including ε:
//   dx = scale·(f·dy − f³·x·(x·dy)).
// It stays finite and correct at tiny or zero norms (f ≤ ε^−½ = 1000, f³ ≤ 1e9 in f32),
// unlike the ε-free form (dy − y(y·dy))/‖x‖.
// x, dy, dx: f32 [rows, n] row-major. One workgroup of WG threads per row (linear index
// wid.x + wid.y·nwg.x); Σx² and x·dy reduced by a fixed tree in workgroup memory (every slot
// written before the barrier), or its lanes form (reduce.wgsl: one subgroup per row, the
// same bits). Template parameters: WG (power of two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;

struct Params {
    rows: u32,
    n: u32,
    scale: f32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.rows" "Tree" "vec2<f32>")}}
    let base = r * p.n;
{{- template "red_sums2" (dict "P" . "X" "x" "Base" "base" "N" "p.n" "Y" "v * dy[base + c]" "Out" "tot")}}
    let f = inverseSqrt(tot.x + 1e-6);
    let fs = p.scale * f;
    let k = fs * f * (f * tot.y); // scale·f³·(x·dy), f³ ≤ 1e9: no overflow
    for (var c = lane0; c < p.n; c += RSTEP) {
        dx[base + c] = fs * dy[base + c] - k * x[base + c];
    }
}
