// SplitQueryGate: splits the gated-attention q_proj output per head into query and gate
// (DESIGN.md §3: per token and head, the first HD values are the query, the next HD the gate;
// not the two halves of the row). qg: f32 [rows, heads, 2·HD]; q, gate: f32 [rows, heads, HD]
// (row-major).
// SplitQueryGateBackward (Backward): its adjoint (a permutation, so its inverse) scatters
// the query and gate gradients dq, dgate: f32 [rows, heads, HD] back into the interleaved
// layout, dqg: f32 [rows, heads, 2·HD], overwritten.
// One invocation per (row, head, dim), moving both halves. Template parameters: Backward, WG.

{{- if .Backward}}

@group(0) @binding(0) var<storage, read> dq: array<f32>;
@group(0) @binding(1) var<storage, read> dgate: array<f32>;
@group(0) @binding(2) var<storage, read_write> dqg: array<f32>;
{{- else}}

@group(0) @binding(0) var<storage, read> qg: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> gate: array<f32>;
{{- end}}

struct Params {
    n: u32,  // rows·heads·hd
    hd: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "ew_main_rc" (dict "WG" .WG "N" "p.n" "Cols" "p.hd" "R" "rh" "C" "c")}}
    // rh = (row, head)
    let j = 2u * rh * p.hd + c; // the query's index in the interleaved layout
{{- if .Backward}}
    dqg[j] = dq[i];
    dqg[j + p.hd] = dgate[i];
{{- else}}
    q[i] = qg[j];
    gate[i] = qg[j + p.hd];
{{- end}}
}
