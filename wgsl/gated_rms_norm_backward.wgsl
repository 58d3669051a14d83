// GatedRMSNormBackward, the group part: for y = w ⊙ n(x) ⊙ silu(z), n(x) = x·inv,
// inv = rsqrt(mean(x²) + eps) per group of n = dv values (one value head of one row), with
// dn = dy ⊙ silu(z) (host.GatedRMSNormBackward):
//   dz_i = dy_i·w_i·x_i·inv·silu′(z_i),   silu′(z) = σ(z)·(1 + z·(1 − σ(z))),
//   dx_i = inv·w_i·dn_i − inv³·x_i·(1/n)·Σ_j w_j·dn_j·x_j,
// and, for the gain gradient (dw_i += Σ_groups dn_i·x_i·inv, grad_col_dot.wgsl), dn itself
// and inv[group]. x, z, dy, dx, dz, dn: f32 [groups, n] row-major; w: f32 [n];
// inv: f32 [groups]. One workgroup of WG threads per group (linear index wid.x + wid.y·nwg.x);
// both sums reduced by a fixed tree in workgroup memory (every slot written before the
// barrier), or its lanes form (reduce.wgsl: one subgroup per group, the same bits). Template
// parameters: WG (power of two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> dz: array<f32>;
@group(0) @binding(6) var<storage, read_write> dn_out: array<f32>;
@group(0) @binding(7) var<storage, read_write> inv_out: array<f32>;

struct Params {
    groups: u32,
    n: u32,
    eps: f32,
};
@group(0) @binding(8) var<uniform> p: Params;

// sig returns (σ(v), 1 − σ(v)) without overflow: exp of a non-positive argument only.
fn sig(v: f32) -> vec2<f32> {
    let e = exp(-abs(v));
    let a = 1.0 / (1.0 + e);
    let b = e / (1.0 + e);
    return select(vec2<f32>(b, a), vec2<f32>(a, b), v >= 0.0);
}

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.groups" "Tree" "vec2<f32>")}}
    let base = r * p.n;
{{- range $q := seq .Q}}
    var s{{$q}} = vec2<f32>(0.0);
    for (var c = {{template "red_l" (dict "P" $ "Q" $q)}}; c < p.n; c += {{$.WG}}u) {
        let xv = x[base + c];
        let zv = z[base + c];
        let dn = dy[base + c] * (zv * sig(zv).x);
        s{{$q}} += vec2<f32>(xv * xv, w[c] * dn * xv);
    }
{{- end}}
{{- template "red_row_sum" (dict "P" . "Buf" "partial" "U" "s" "Out" "tot")}}
    let inv = inverseSqrt(tot.x / f32(p.n) + p.eps);
    let k = inv * inv * inv * tot.y / f32(p.n);
    for (var c = lane0; c < p.n; c += RSTEP) {
        let i = base + c;
        let xv = x[i];
        let zv = z[i];
        let sg = sig(zv);
        let d = dy[i];
        let dn = d * (zv * sg.x);
        dn_out[i] = dn;
        dx[i] = inv * w[c] * dn - k * xv;
        dz[i] = d * w[c] * (xv * inv) * (sg.x * (1.0 + zv * sg.y));
    }
    if (lane_first) {
        inv_out[r] = inv;
    }
}
