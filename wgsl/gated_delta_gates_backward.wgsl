// GatedDeltaGatesBackward: the backward of beta = σ(b), g = −exp(A_log)·softplus(a + dt_bias)
// with respect to a and b (A_log and dt_bias frozen; host.GatedDeltaGatesBackward):
//   db = dβ·σ(b)·(1 − σ(b)),   da = −dg·exp(A_log[j])·σ(a + dt_bias[j])  (0 where dg = 0).
// a, b, dg, dbeta, da, db: f32 [rows, hv] row-major; A_log, dt_bias: f32 [hv]. One
// invocation per element (linear index (wid.x + wid.y·nwg.x)·WG + lid). Template
// parameters: WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> alog: array<f32>;
@group(0) @binding(3) var<storage, read> dtb: array<f32>;
@group(0) @binding(4) var<storage, read> dg: array<f32>;
@group(0) @binding(5) var<storage, read> dbeta: array<f32>;
@group(0) @binding(6) var<storage, read_write> da: array<f32>;
@group(0) @binding(7) var<storage, read_write> db: array<f32>;

struct Params {
    n: u32,  // rows·hv
    hv: u32,
};
@group(0) @binding(8) var<uniform> p: Params;

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let j = i % p.hv;
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
}
