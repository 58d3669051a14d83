// Adam (host.Adam, DESIGN.md §6), in place on a parameter vector θ with moments m, v (all
// f32 [n]); live: u32 [n] (1 trains, 0 = rank padding), Mask only. Stages (template Stage):
//   "rms"    (one workgroup): rms[0] = sqrt(Σ_live θ² / #live), 0 when nothing is live.
//   "update" (one thread per value): m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g²,
//            d = (m·c1)/(sqrt(v·c2) + ε) with c1 = 1/(1−β1^t), c2 = 1/(1−β2^t) from the host,
//            θ ← θ − lr·s·d with s = max(|θ|, floor·rms[0]) (Relative) or 1; a masked entry
//            gets θ = m = v = 0.
// Template parameters: Stage, WG (power of two), Relative, Mask (bools).

struct Params {
    n: u32,
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    c1: f32,
    c2: f32,
    floor: f32,
};

{{- if eq .Stage "rms"}}

@group(0) @binding(0) var<storage, read> theta: array<f32>;
{{- if .Mask}}
@group(0) @binding(1) var<storage, read> live: array<u32>;
@group(0) @binding(2) var<storage, read_write> rms: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
{{- else}}
@group(0) @binding(1) var<storage, read_write> rms: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
{{- end}}

var<workgroup> red: array<vec2<f32>, {{.WG}}>;

@compute @workgroup_size({{.WG}})
fn main(@builtin(local_invocation_index) lid: u32) {
    var s = vec2<f32>(0.0);
    for (var i = lid; i < p.n; i += {{.WG}}u) {
{{- if .Mask}}
        if (live[i] != 0u) {
            s += vec2<f32>(theta[i] * theta[i], 1.0);
        }
{{- else}}
        s += vec2<f32>(theta[i] * theta[i], 1.0);
{{- end}}
    }
    red[lid] = s;
    workgroupBarrier();
    for (var h = {{.WG}}u / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            red[lid] += red[lid + h];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        rms[0] = select(0.0, sqrt(red[0].x / red[0].y), red[0].y > 0.0);
    }
}
{{- else if eq .Stage "update"}}

@group(0) @binding(0) var<storage, read_write> theta: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
{{- $u := 4}}
{{- if .Mask}}
@group(0) @binding(4) var<storage, read> live: array<u32>;
{{- $u = 5}}
{{- end}}
{{- if .Relative}}
@group(0) @binding({{$u}}) var<storage, read> rms: array<f32>;
{{- $u = add $u 1}}
{{- end}}
@group(0) @binding({{$u}}) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (i >= p.n) {
        return;
    }
{{- if .Mask}}
    if (live[i] == 0u) {
        theta[i] = 0.0;
        m[i] = 0.0;
        v[i] = 0.0;
        return;
    }
{{- end}}
    let g = grad[i];
    let mi = p.b1 * m[i] + (1.0 - p.b1) * g;
    let vi = p.b2 * v[i] + (1.0 - p.b2) * (g * g);
    m[i] = mi;
    v[i] = vi;
    let d = (mi * p.c1) / (sqrt(vi * p.c2) + p.eps);
    let t = theta[i];
{{- if .Relative}}
    let s = max(abs(t), p.floor * rms[0]);
    theta[i] = t - p.lr * s * d;
{{- else}}
    theta[i] = t - p.lr * d;
{{- end}}
}
{{- end}}
