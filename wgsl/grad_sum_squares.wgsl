// GradSumSquares, for the global gradient norm: out[0] += Σ_i g_i² over g f32 [n], in two
// stages (template Stage), deterministic (fixed-order tree sums, no atomics):
//   "partial" (G workgroups of WG threads): partial[w] = Σ of g² over the strided indices
//             i = (w·WG + lid) + j·G·WG of workgroup w;
//   "final"   (one workgroup): out[0] += Σ_w partial[w].
// Workgroup memory is written before it is read. Template parameters: Stage, WG.

struct Params {
    n: u32,
    groups: u32,
};

var<workgroup> red: array<f32, {{.WG}}>;

{{- if eq .Stage "partial"}}

@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read_write> partial: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var i = wid.x * {{.WG}}u + lid; i < p.n; i += p.groups * {{.WG}}u) {
        s = fma(g[i], g[i], s);
    }
{{- else}}

@group(0) @binding(0) var<storage, read> partial: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var i = lid; i < p.groups; i += {{.WG}}u) {
        s += partial[i];
    }
{{- end}}
{{- template "red_sum" (dict "WG" .WG "Buf" "red" "Val" "s")}}
    if (lid == 0u) {
{{- if eq .Stage "partial"}}
        partial[wid.x] = red[0];
{{- else}}
        out[0] = out[0] + red[0];
{{- end}}
    }
}
