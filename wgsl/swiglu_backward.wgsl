// SwiGLUBackward: for y = silu(gate) ⊙ up, elementwise over n f32 values,
//   dgate = dy ⊙ up ⊙ silu′(gate),  silu′(g) = σ(g)·(1 + g·(1 − σ(g))),
//   dup   = dy ⊙ silu(gate)                                (host.SwiGLUBackward).
// gate, up, dy, dgate, dup: f32 [n] (any row-major shape). Template parameters: WG.

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(4) var<storage, read_write> dup: array<f32>;

{{template "ew_params_n" (dict "B" 5)}}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let g = gate[i];
    // sigmoid and 1 − sigmoid without overflow: exp of a non-positive argument only.
{{- template "ew_sigmoid" (dict "X" "g" "S" "s")}}
    let sc = select(1.0 / (1.0 + e), e / (1.0 + e), g >= 0.0);
    let d = dy[i];
    dgate[i] = d * up[i] * (s * (1.0 + g * sc));
    dup[i] = d * (g * s);
}
