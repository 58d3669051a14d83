// SplitQueryGateBackward: the adjoint of SplitQueryGate (a permutation, so its inverse):
// scatters the query and gate gradients back into the per-head interleaved q_proj layout
// (DESIGN.md §3: per token and head, HD query values then HD gate values).
// dq, dgate: f32 [rows, heads, HD]; dqg: f32 [rows, heads, 2·HD] (row-major), overwritten.
// One invocation per (row, head, dim), writing both halves. Template parameters: WG.

@group(0) @binding(0) var<storage, read> dq: array<f32>;
@group(0) @binding(1) var<storage, read> dgate: array<f32>;
@group(0) @binding(2) var<storage, read_write> dqg: array<f32>;

struct Params {
    n: u32,  // rows·heads·hd
    hd: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let rh = i / p.hd;       // (row, head)
    let c = i - rh * p.hd;
    let dst = 2u * rh * p.hd + c;
    dqg[dst] = dq[i];
    dqg[dst + p.hd] = dgate[i];
}
