// The simple twin of linear.wgsl (same operands and Params, one invocation per element of
// C, no workgroup memory): the reference the tiled GEMM is tested against, besides the host.
// Template parameters: TransB, BF16 (bools), WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

fn loadB(kk: u32, nn: u32) -> f32 {
{{- if .TransB}}
    let e = nn * p.k + kk;
{{- else}}
    let e = kk * p.n + nn;
{{- end}}
{{- if .BF16}}
    let pair = unpack2x16float(b[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
{{- else}}
    return b[e];
{{- end}}
}

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i >= p.m * p.n) {
        return;
    }
    let row = i / p.n;
    let col = i - row * p.n;
    var s = 0.0;
    for (var kk = 0u; kk < p.k; kk++) {
        s = fma(a[row * p.k + kk], loadB(kk, col), s);
    }
    c[i] = s;
}
