// The gated delta rule backward's partial-gradient sum, shared by its token-by-token
// (GatedDeltaRuleBackward), chunked (GatedDeltaRuleChunkedBackward) and lane-blocked
// (GatedDeltaRuleBackwardLanes) forms: the per-value-head (GVA: the value heads sharing a key
// head) and, in the lane form, per-slice contributions added in a fixed order (slice, then
// head), so every form is deterministic:
//   out[r, a] = Σ_{s < NS} Σ_{m < G} part[off + ((s·R + r)·G + m)·W + a].
// dq, dk: R = rows·hk, G = hv/hk, W = DK; the lane form's dβ, dg: R = rows·hv, G = 1, W = 1.
// part, out: f32. One invocation per output element (linear index (wid.x + wid.y·nwg.x)·WG +
// lid). Template parameters: WG.

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

struct Params {
    n: u32,  // R·W
    w: u32,  // W
    g: u32,  // G
    ns: u32, // NS
    off: u32,
};
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (e >= p.n) {
        return;
    }
    let a = e % p.w;
    let r = e / p.w;
    var s = 0.0;
    for (var sl = 0u; sl < p.ns; sl++) {
        let base = p.off + ((sl * (p.n / p.w) + r) * p.g) * p.w + a;
        for (var m = 0u; m < p.g; m++) {
            s += part[base + m * p.w];
        }
    }
    out[e] = s;
}
