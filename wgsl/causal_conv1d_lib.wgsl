{{- /*
causal_conv1d_lib.wgsl: the pieces CausalConv1dSiLU and its backward share (defines only,
parsed with every shader; names prefixed cc_): x and the per-element tensors are f32
[nb·t, C] row-major (token-major), w is f32 [C, 1, K] flattened to [C·K], one invocation per
element i (ew_main).
*/ -}}

{{- /* cc_params: the uniform Params { n = nb·t·C, c = C, t } at binding B, read as p. */ -}}
{{define "cc_params"}}
struct Params {
    n: u32, // nb·t·C
    c: u32, // channels
    t: u32, // window length
};
@group(0) @binding({{.B}}) var<uniform> p: Params;
{{- end}}

{{- /* cc_pos: element i's token row, channel ch and window position tau = row mod t. */ -}}
{{define "cc_pos"}}
    let row = i / p.c;
    let ch = i - row * p.c;
    let tau = row % p.t;
{{- end}}

{{- /* cc_preact: cc_pos and the pre-activation s = Σ_{k<K} w[ch·K + k]·x[i − (K−1−k)·C] of the
forward, a tap skipped when its time τ − (K−1) + k is before the window start (x = 0 there).
Keys: K (the taps). */ -}}
{{define "cc_preact"}}
{{- template "cc_pos"}}
    var s = 0.0;
    for (var k = 0u; k < {{.K}}u; k++) {
        let back = {{.K}}u - 1u - k;
        if (back <= tau) {
            s += w[ch * {{.K}}u + k] * x[i - back * p.c];
        }
    }
{{- end}}
