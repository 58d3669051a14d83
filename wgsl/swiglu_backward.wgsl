// SwiGLUBackward: for y = silu(gate) ⊙ up, elementwise over n f32 values,
//   dgate = dy ⊙ up ⊙ silu′(gate),  silu′(g) = σ(g)·(1 + g·(1 − σ(g))),
//   dup   = dy ⊙ silu(gate)                                (host.SwiGLUBackward).
// gate, up, dy, dgate, dup: f32 [n] (any row-major shape). Template parameters: WG.

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(4) var<storage, read_write> dup: array<f32>;

struct Params {
    n: u32,
};
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i < p.n) {
        let g = gate[i];
        // sigmoid and 1 − sigmoid without overflow: exp of a non-positive argument only.
        let e = exp(-abs(g));
        let s = select(e / (1.0 + e), 1.0 / (1.0 + e), g >= 0.0);
        let sc = select(1.0 / (1.0 + e), e / (1.0 + e), g >= 0.0);
        let d = dy[i];
        dgate[i] = d * up[i] * (s * (1.0 + g * sc));
        dup[i] = d * (g * s);
    }
}
