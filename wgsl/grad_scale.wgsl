// GradScale: g ← s·g elementwise over g f32 [n] (gradient-norm clipping), s an f32 uniform.
// Template parameters: WG.

@group(0) @binding(0) var<storage, read_write> g: array<f32>;

struct Params {
    n: u32,
    s: f32,
};
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i < p.n) {
        g[i] = p.s * g[i];
    }
}
