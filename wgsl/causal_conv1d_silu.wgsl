// CausalConv1dSiLU: depthwise causal convolution over time within each window, then SiLU
// (DESIGN.md §3, HF F.silu(conv1d(x)[..., :t]) with groups = channels, no bias):
//   y[(b,τ), c] = silu( Σ_{i<K} w[c·K + i] · x[(b, τ−K+1+i), c] ),  x = 0 before the window.
// x, y: f32 [nb·t, C] row-major (token-major); w: f32 [C, 1, K] flattened to [C·K].
// One invocation per output element; the window position is τ = row mod t, so no tap reads
// the previous window. Template parameters: WG (workgroup size), K (kernel taps).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

struct Params {
    n: u32, // nb·t·C
    c: u32, // channels
    t: u32, // window length
};
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i >= p.n) {
        return;
    }
    let row = i / p.c;
    let ch = i - row * p.c;
    let tau = row % p.t;
    var s = 0.0;
    for (var k = 0u; k < {{.K}}u; k++) {
        // tap k reads time τ − (K−1) + k; skip it when that is before the window start.
        let back = {{.K}}u - 1u - k;
        if (back <= tau) {
            s += w[ch * {{.K}}u + k] * x[i - back * p.c];
        }
    }
    // silu(s) = s·sigmoid(s), sigmoid without overflow (exp of a non-positive argument).
    let e = exp(-abs(s));
    let sg = select(e / (1.0 + e), 1.0 / (1.0 + e), s >= 0.0);
    y[i] = s * sg;
}
