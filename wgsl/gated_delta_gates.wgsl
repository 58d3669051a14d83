// GatedDeltaGates: the per-token, per-value-head gates of the GatedDeltaNet (DESIGN.md §3):
//   beta = sigmoid(b),   g = −exp(A_log[j]) · softplus(a + dt_bias[j])
// a, b, g, beta: f32 [rows, hv] row-major; A_log, dt_bias: f32 [hv].
// GatedDeltaGatesBackward (Backward): its backward with respect to a and b (A_log and
// dt_bias frozen; host.GatedDeltaGatesBackward):
//   db = dβ·σ(b)·(1 − σ(b)),   da = −dg·exp(A_log[j])·σ(a + dt_bias[j])  (0 where dg = 0),
// dg, dbeta, da, db: f32 [rows, hv].
// One invocation per element (linear index (wid.x + wid.y·nwg.x)·WG + lid). Template
// parameters: Backward, WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> alog: array<f32>;
@group(0) @binding(3) var<storage, read> dtb: array<f32>;
{{- if .Backward}}
@group(0) @binding(4) var<storage, read> dg: array<f32>;
@group(0) @binding(5) var<storage, read> dbeta: array<f32>;
@group(0) @binding(6) var<storage, read_write> da: array<f32>;
@group(0) @binding(7) var<storage, read_write> db: array<f32>;
{{- else}}
@group(0) @binding(4) var<storage, read_write> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> beta: array<f32>;
{{- end}}

struct Params {
    n: u32,  // rows·hv
    hv: u32,
};
@group(0) @binding({{if .Backward}}8{{else}}6{{end}}) var<uniform> p: Params;
{{- if not .Backward}}

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
{{- end}}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let j = i % p.hv;
{{- if .Backward}}
    // σ(b)·(1 − σ(b)) = e/(1 + e)² with e = exp(−|b|): symmetric, no overflow.
    let eb = exp(-abs(b[i]));
    let ob = 1.0 / (1.0 + eb);
    db[i] = dbeta[i] * (eb * ob) * ob;
    // σ(x) without overflow: exp of a non-positive argument only.
    let x = a[i] + dtb[j];
{{- template "ew_sigmoid" (dict "X" "x" "S" "sx")}}
    // dg = 0 gives da = 0 even where exp(A_log) overflows f32 (A_log ≥ 88.8: g = −∞, whose
    // dg the delta rule's backward gives as 0), as the float64 host computes, not 0·∞ = NaN.
    da[i] = select(-dg[i] * exp(alog[j]) * sx, 0.0, dg[i] == 0.0);
{{- else}}
{{- template "ew_sigmoid" (dict "X" "b[i]" "S" "sb")}}
    beta[i] = sb;
    g[i] = -exp(alog[j]) * softplus(a[i] + dtb[j]);
{{- end}}
}
