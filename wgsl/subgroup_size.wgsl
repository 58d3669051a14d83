// The subgroup probe of gpu.Open on CPU adapters: invocation i of one workgroup of WG writes
// its subgroup size to out[i] and its subgroup invocation id to out[WG + i], so the launcher
// can check that a workgroup of S invocations is one subgroup with lane = local index
// (what the lane-blocked GEMMs of gemm_lanes.wgsl rely on). Template parameter: WG.

@group(0) @binding(0) var<storage, read_write> out: array<u32>;

@compute @workgroup_size({{.WG}})
fn main(@builtin(local_invocation_index) li: u32, @builtin(subgroup_size) size: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    out[li] = size;
    out[{{.WG}}u + li] = lane;
}
