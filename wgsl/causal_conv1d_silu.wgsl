// CausalConv1dSiLU: depthwise causal convolution over time within each window, then SiLU
// (DESIGN.md §3, HF F.silu(conv1d(x)[..., :t]) with groups = channels, no bias):
//   y[(b,τ), c] = silu( Σ_{i<K} w[c·K + i] · x[(b, τ−K+1+i), c] ),  x = 0 before the window.
// x, y: f32 [nb·t, C] row-major (token-major), y in Blocks column blocks (cc_blocks: y0, y1,
// y2); w: f32 [C, 1, K] flattened to [C·K].
// One invocation per output element; the window position is τ = row mod t, so no tap reads
// the previous window; or the run form (RB > 0, causal_conv1d_lib.wgsl: RB tokens of one
// channel per invocation, the same bits). Template parameters: WG (workgroup size), K
// (kernel taps), RB (0: per element), Blocks.

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
{{- template "cc_blocks" (dict "Name" "y" "B" 2 "Blocks" .Blocks "Store" true)}}

{{template "cc_params" (dict "B" (add 2 .Blocks))}}

{{- if gt .RB 0}}
{{template "cc_run_preact" .}}
{{- template "ew_sigmoid" (dict "X" "s" "S" "sg")}}
        store_y(base + tau, ch, s * sg);
{{- template "cc_run_shift" .}}
}
{{- else}}
{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
{{- template "cc_preact" (dict "K" .K)}}
    // silu(s) = s·sigmoid(s), sigmoid without overflow (exp of a non-positive argument).
{{- template "ew_sigmoid" (dict "X" "s" "S" "sg")}}
    store_y(row, ch, s * sg);
}
{{- end}}
