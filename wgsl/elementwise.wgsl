{{- /*
elementwise.wgsl: the entry points shared by the kernels of a 1-D problem spread over a 2-D
grid (defines only, parsed with every shader; names prefixed ew_). Instantiate with dict;
every key a define names must be given (templates run with missingkey=error).
*/ -}}

{{- /* ew_entry: the opening of the entry point main with the builtins wid (workgroup_id),
nwg (num_workgroups) and lid (local_invocation_index), workgroups of WG invocations; the
kernel writes the body and the closing brace. Keys: WG. */ -}}
{{define "ew_entry"}}
{{- template "ew_entry_form" (dict "WG" .WG "Lanes" false)}}
{{- end}}

{{- /* ew_entry_form: ew_entry, or in the lanes form of CPU adapters (Lanes; gemm_lanes.wgsl
says why) the entry of one subgroup of WG lanes with sl (subgroup_invocation_id) in place of
lid. Keys: WG, Lanes. */ -}}
{{define "ew_entry_form"}}
@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
{{- if .Lanes}}
        @builtin(subgroup_invocation_id) sl: u32) {
{{- else}}
        @builtin(local_invocation_index) lid: u32) {
{{- end}}
{{- end}}

{{- /* ew_blocks: ew_entry_form and the workgroup's place in a grid of nb·Heads·N workgroups
(p.nb windows, Heads heads, N blocks per head, e.g. row blocks or column slices): the linear
workgroup index wg = wid.x + wid.y·nwg.x, N = Count (declared unless Count is ""), the
return past the grid (wg is uniform, so the barriers and subgroup operations after it stay
in uniform control flow), I = wg mod N, BH = wg / N = b·Heads + H, the head H and the window
b. Keys: WG, Lanes, Count, N, Heads (expressions), I, BH, H (names to declare), Notes (the
comment on the exit). */ -}}
{{define "ew_blocks"}}
{{- template "ew_entry_form" (dict "WG" .WG "Lanes" .Lanes)}}
    let wg = wid.x + wid.y * nwg.x;
{{- if .Count}}
    let {{.N}} = {{.Count}};
{{- end}}
{{- if .Notes}}
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
{{- end}}
    if (wg >= p.nb * {{.Heads}} * {{.N}}) {
        return;
    }
    let {{.I}} = wg % {{.N}};
    let {{.BH}} = wg / {{.N}};
    let {{.H}} = {{.BH}} % {{.Heads}};
    let b = {{.BH}} / {{.Heads}};
{{- end}}

{{- /* ew_index: ew_entry and the invocation's element index i = (wid.x + wid.y·nwg.x)·WG + lid
of an elementwise kernel (which bounds-checks i against its size itself). Keys: WG. */ -}}
{{define "ew_index"}}
{{- template "ew_entry" (dict "WG" .WG)}}
    let i = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
{{- end}}

{{- /* ew_main: ew_index and the return of the invocations past the size: i ≥ N. Keys: WG, N
(an expression, e.g. p.n). */ -}}
{{define "ew_main"}}
{{- template "ew_index" (dict "WG" .WG)}}
    if (i >= {{.N}}) {
        return;
    }
{{- end}}

{{- /* ew_main_rc: ew_main over the elements of a row-major matrix of Cols columns, and the
element's row R = i / Cols and column C = i − R·Cols. Keys: WG, N, Cols (expressions), R,
C (the names to declare). */ -}}
{{define "ew_main_rc"}}
{{- template "ew_main" (dict "WG" .WG "N" .N)}}
    let {{.R}} = i / {{.Cols}};
    let {{.C}} = i - {{.R}} * {{.Cols}};
{{- end}}

{{- /* ew_params_n: the uniform Params { n } (the element count) of an elementwise kernel at
binding B of group 0, read as p. Keys: B. */ -}}
{{define "ew_params_n"}}
struct Params {
    n: u32,
};
@group(0) @binding({{.B}}) var<uniform> p: Params;
{{- end}}

{{- /* ew_sigmoid: S = σ(X) = 1/(1 + e^−X) without overflow (exp of a non-positive argument
only: e = e^−|X|, σ = 1/(1 + e) for X ≥ 0, e/(1 + e) below), declaring e and S. Keys: X (an
f32 expression without side effects), S (the name to declare). */ -}}
{{define "ew_sigmoid"}}
        let e = exp(-abs({{.X}}));
        let {{.S}} = select(e / (1.0 + e), 1.0 / (1.0 + e), {{.X}} >= 0.0);
{{- end}}
