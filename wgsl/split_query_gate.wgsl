// SplitQueryGate: splits the gated-attention q_proj output per head into query and gate
// (DESIGN.md §3: per token and head, the first HD values are the query, the next HD the gate;
// not the two halves of the row). qg: f32 [rows, heads, 2·HD]; q, gate: f32 [rows, heads, HD]
// (row-major). One invocation per output element pair. Template parameters: WG.

@group(0) @binding(0) var<storage, read> qg: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> gate: array<f32>;

struct Params {
    n: u32,  // rows·heads·hd
    hd: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let rh = i / p.hd;       // (row, head)
    let c = i - rh * p.hd;
    let src = 2u * rh * p.hd + c;
    q[i] = qg[src];
    gate[i] = qg[src + p.hd];
}
