{{- /*
elementwise.wgsl: the entry points shared by the kernels of a 1-D problem spread over a 2-D
grid (defines only, parsed with every shader; names prefixed ew_). Instantiate with dict;
every key a define names must be given (templates run with missingkey=error).
*/ -}}

{{- /* ew_entry: the opening of the entry point main with the builtins wid (workgroup_id),
nwg (num_workgroups) and lid (local_invocation_index), workgroups of WG invocations; the
kernel writes the body and the closing brace. Keys: WG. */ -}}
{{define "ew_entry"}}
@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
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
