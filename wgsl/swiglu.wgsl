// SwiGLU: y = silu(gate) ⊙ up, silu(g) = g·sigmoid(g), elementwise over n f32 values.
// gate, up, y: f32 [n] (any row-major shape). Template parameters: WG.

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

{{template "ew_params_n" (dict "B" 3)}}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let g = gate[i];
{{- template "ew_sigmoid" (dict "X" "g" "S" "s")}}
    y[i] = g * s * up[i];
}
