// AttentionGate: y = o ⊙ sigmoid(gate), the output gate of Qwen3.5 gated attention
// (DESIGN.md §3), elementwise over n f32 values (o, gate, y: [rows, nh·headDim] row-major).
// Template parameters: WG.

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

{{template "ew_params_n" (dict "B" 3)}}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let g = gate[i];
{{- template "ew_sigmoid" (dict "X" "g" "S" "s")}}
    y[i] = o[i] * s;
}
