// The simple twin of blr_forward.wgsl (same operands, bindings and Params, one invocation
// per element of C, no workgroup memory): C[M, N] (+)= (A ⊙ sa)·B (⊙ sc) with B a packed
// ±1 bit matrix ([N, K] when TransB, else [K, N]; element e is bit e & 31 of word e >> 5).
// Template parameters: TransB, ScaleC, Accum (bools), WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> sa: array<f32>;
{{- if .ScaleC}}
@group(0) @binding(3) var<storage, read> sc: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{- end}}

struct Params {
    m: u32,
    n: u32,
    k: u32,
};
@group(0) @binding({{if .ScaleC}}5{{else}}4{{end}}) var<uniform> p: Params;

fn loadB(kk: u32, nn: u32) -> f32 {
{{- if .TransB}}
    let e = nn * p.k + kk;
{{- else}}
    let e = kk * p.n + nn;
{{- end}}
    return select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
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
        s = fma(a[row * p.k + kk] * sa[kk], loadB(kk, col), s);
    }
{{- if .ScaleC}}
    s = s * sc[col];
{{- end}}
{{- if .Accum}}
    c[i] = c[i] + s;
{{- else}}
    c[i] = s;
{{- end}}
}
