// AttentionGate: y = o ⊙ sigmoid(gate), the output gate of Qwen3.5 gated attention
// (DESIGN.md §3), elementwise over n f32 values (o, gate, y: [rows, nh·headDim] row-major).
// Template parameters: WG.

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

struct Params {
    n: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i < p.n) {
        let g = gate[i];
        // sigmoid without overflow: exp of a non-positive argument only.
        let e = exp(-abs(g));
        let s = select(e / (1.0 + e), 1.0 / (1.0 + e), g >= 0.0);
        y[i] = o[i] * s;
    }
}
