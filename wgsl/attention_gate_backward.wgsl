// AttentionGateBackward: the backward of y = o ⊙ sigmoid(gate) (DESIGN.md §3,
// host.AttentionGateBackward), elementwise over n f32 values:
//   do    = dy ⊙ σ(gate)
//   dgate = dy ⊙ o ⊙ σ(gate)·(1 − σ(gate))
// o, gate, dy, d_o, dgate: f32 [rows, nh·HD] row-major (any common length n). With
// e = exp(−|gate|) ∈ (0, 1]: σ = 1/(1+e) for gate ≥ 0, e/(1+e) otherwise, and
// σ·(1 − σ) = e/(1+e)² for either sign, so no exp overflows and no 1 − σ cancels.
// One invocation per element. Template parameters: WG.

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> d_o: array<f32>;
@group(0) @binding(4) var<storage, read_write> dgate: array<f32>;

{{template "ew_params_n" (dict "B" 5)}}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let g = gate[i];
    let e = exp(-abs(g));
    let r = 1.0 / (1.0 + e);
    let s = select(e * r, r, g >= 0.0);
    let g1 = dy[i];
    d_o[i] = g1 * s;
    dgate[i] = g1 * o[i] * (e * r * r);
}
