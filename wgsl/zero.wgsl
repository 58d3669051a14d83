// Zero: writes n zero words into b (u32 [n]: any dtype, zero bits are 0 in f32, f16, u32).
// Template parameters: WG.

@group(0) @binding(0) var<storage, read_write> b: array<u32>;

struct Params {
    n: u32,
};
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i < p.n) {
        b[i] = 0u;
    }
}
