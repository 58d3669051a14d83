{{- /*
gated_delta_rule_lib.wgsl: what the gated delta rule's kernels share across their forms
(defines only, parsed with every shader; names prefixed gdr_): the token-by-token
(gated_delta_rule.wgsl, gated_delta_rule_backward.wgsl), lane-blocked
(gated_delta_rule_lanes.wgsl) and chunked kernels (through gated_delta_rule_chunk_lib.wgsl's
gdrc_main). Both start at the beginning of a line: call them on a line of their own.
*/ -}}

{{- /* gdr_forward_io: the forward's bindings (q, k as vec4s; v, g, beta, o; state when
WantState) and its uniform Params (nb, t, hk, hv) as p. Pass the kernel's parameters (the
key WantState). */ -}}
{{define "gdr_forward_io" -}}
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
{{- if .WantState}}
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
{{- end}}

struct Params {
    nb: u32,
    t: u32,
    hk: u32,
    hv: u32,
};
@group(0) @binding({{if .WantState}}7{{else}}6{{end}}) var<uniform> p: Params;
{{- end}}

{{- /* gdr_main: elementwise.wgsl's ew_blocks over the value heads j (of p.hv; bj =
b·hv + j) and N blocks (chunks or column slices) I per head, and when KH the key head
kh = j / (hv/hk). Keys: WG, Lanes, N (an expression), I (the name to declare), Notes (the
comment on the exit), KH. */ -}}
{{define "gdr_main" -}}
{{- template "ew_blocks" (dict "WG" .WG "Lanes" .Lanes "Count" "" "N" .N "Heads" "p.hv" "I" .I "BH" "bj" "H" "j" "Notes" .Notes)}}
{{- if .KH}}
    let kh = j / (p.hv / p.hk);
{{- end}}
{{- end}}
