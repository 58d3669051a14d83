// Adam (host.Adam, DESIGN.md §6), in place on parameter vectors θ with moments m, v, for the
// gradient g (all f32 [n]). Two forms (template Multi):
//   one vector (gpu.Adam): live u32 [n] (1 trains, 0 = rank padding), Mask only;
//   many vectors packed in arenas (gpu.MultiTensorAdam, gpu.Pack): θ, g, m, v share one
//     layout; seg [n] gives each element's vector index, with bit 31 set for a masked
//     element (rank padding) or 0xFFFFFFFF for a gap between vectors (left alone); segs
//     [nseg] holds each vector's (first element, length, relative, 0). Same arithmetic and
//     reduction order as one call per vector, so the results are bit-identical.
// Stages (template Stage):
//   "rms"    (one workgroup per vector): rms[s] = sqrt(Σ_live θ² / #live), 0 when nothing is
//            live.
//   "update" (one thread per value): m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g²,
//            d = (m·c1)/(sqrt(v·c2) + ε) with c1 = 1/(1−β1^t), c2 = 1/(1−β2^t) from the host,
//            θ ← θ − lr·s·d with s = max(|θ|, floor·rms) for a relative vector, else
//            θ ← θ − glr·d (one vector: glr = lr); a masked entry gets θ = m = v = 0.
// Template parameters: Stage, WG (power of two), Multi, Relative, Mask (bools; Relative and
// Mask are per vector in the Multi form and ignored).

struct Params {
    n: u32,
    lr: f32,
    glr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    c1: f32,
    c2: f32,
    floor: f32,
    nseg: u32,
};

const GAP: u32 = 0xffffffffu;
const MASKED: u32 = 0x80000000u;

{{- if eq .Stage "rms"}}

@group(0) @binding(0) var<storage, read> theta: array<f32>;
{{- if .Multi}}
@group(0) @binding(1) var<storage, read> seg: array<u32>;
@group(0) @binding(2) var<storage, read> segs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> rms: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
{{- else if .Mask}}
@group(0) @binding(1) var<storage, read> live: array<u32>;
@group(0) @binding(2) var<storage, read_write> rms: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
{{- else}}
@group(0) @binding(1) var<storage, read_write> rms: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
{{- end}}

var<workgroup> red: array<vec2<f32>, {{.WG}}>;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
{{- if .Multi}}
{{- template "red_row" (dict "R" "s" "Count" "p.nseg")}}
    let first = segs[s].x;
    let n = segs[s].y;
{{- else}}
    let s = 0u;
    let first = 0u;
    let n = p.n;
{{- end}}
    var acc = vec2<f32>(0.0);
    for (var i = lid; i < n; i += {{.WG}}u) {
        let j = first + i;
{{- if .Multi}}
        if ((seg[j] & MASKED) == 0u) {
{{- else if .Mask}}
        if (live[j] != 0u) {
{{- else}}
        {
{{- end}}
            acc += vec2<f32>(theta[j] * theta[j], 1.0);
        }
    }
{{- template "red_sum" (dict "WG" .WG "Buf" "red" "Val" "acc")}}
    if (lid == 0u) {
        rms[s] = select(0.0, sqrt(red[0].x / red[0].y), red[0].y > 0.0);
    }
}
{{- else if eq .Stage "update"}}

@group(0) @binding(0) var<storage, read_write> theta: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
{{- $u := 4}}
{{- if .Multi}}
@group(0) @binding(4) var<storage, read> seg: array<u32>;
@group(0) @binding(5) var<storage, read> segs: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> rms: array<f32>;
{{- $u = 7}}
{{- else}}
{{- if .Mask}}
@group(0) @binding(4) var<storage, read> live: array<u32>;
{{- $u = 5}}
{{- end}}
{{- if .Relative}}
@group(0) @binding({{$u}}) var<storage, read> rms: array<f32>;
{{- $u = add $u 1}}
{{- end}}
{{- end}}
@group(0) @binding({{$u}}) var<uniform> p: Params;

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
{{- if .Multi}}
    let s = seg[i];
    if (s == GAP) {
        return;
    }
    let masked = (s & MASKED) != 0u;
{{- else if .Mask}}
    let s = 0u;
    let masked = live[i] == 0u;
{{- else}}
    let s = 0u;
    let masked = false;
{{- end}}
    if (masked) {
        theta[i] = 0.0;
        m[i] = 0.0;
        v[i] = 0.0;
        return;
    }
    let g = grad[i];
    let mi = p.b1 * m[i] + (1.0 - p.b1) * g;
    let vi = p.b2 * v[i] + (1.0 - p.b2) * (g * g);
    m[i] = mi;
    v[i] = vi;
    let d = (mi * p.c1) / (sqrt(vi * p.c2) + p.eps);
    let t = theta[i];
{{- if .Multi}}
    if (segs[s].z != 0u) {
{{- else if .Relative}}
    {
{{- end}}
{{- if or .Multi .Relative}}
        let sc = max(abs(t), p.floor * rms[s]);
        theta[i] = t - p.lr * sc * d;
        return;
    }
{{- end}}
{{- if or .Multi (not .Relative)}}
    theta[i] = t - p.glr * d;
{{- end}}
}
{{- end}}
