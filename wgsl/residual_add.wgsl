// ResidualAdd: x += y, elementwise over n f32 values (x, y row-major f32 [n]).
// Template parameters: WG (workgroup size).

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;

struct Params {
    n: u32,
};
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i < p.n) {
        x[i] = x[i] + y[i];
    }
}
