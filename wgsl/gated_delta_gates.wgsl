// GatedDeltaGates: the per-token, per-value-head gates of the GatedDeltaNet (DESIGN.md §3):
//   beta = sigmoid(b),   g = −exp(A_log[j]) · softplus(a + dt_bias[j])
// a, b, g, beta: f32 [rows, hv] row-major; A_log, dt_bias: f32 [hv]. One invocation per
// element. Template parameters: WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> alog: array<f32>;
@group(0) @binding(3) var<storage, read> dtb: array<f32>;
@group(0) @binding(4) var<storage, read_write> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> beta: array<f32>;

struct Params {
    n: u32,  // rows·hv
    hv: u32,
};
@group(0) @binding(6) var<uniform> p: Params;

// sigmoid without overflow: exp of a non-positive argument only.
fn sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}

// softplus(x) = max(x, 0) + log1p(exp(−|x|)); log1p(e) by its series for e < 1/8 (9 terms:
// truncation < e⁹/9 relative, below f32 rounding), since log(1 + e) loses e's low bits.
fn softplus(x: f32) -> f32 {
    let e = exp(-abs(x));
    var l: f32;
    if (e < 0.125) {
        l = e * (1.0 - e * (1.0 / 2.0 - e * (1.0 / 3.0 - e * (1.0 / 4.0 - e * (1.0 / 5.0
            - e * (1.0 / 6.0 - e * (1.0 / 7.0 - e * (1.0 / 8.0 - e * (1.0 / 9.0)))))))));
    } else {
        l = log(1.0 + e);
    }
    return max(x, 0.0) + l;
}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let j = i % p.hv;
    beta[i] = sigmoid(b[i]);
    g[i] = -exp(alog[j]) * softplus(a[i] + dtb[j]);
}
