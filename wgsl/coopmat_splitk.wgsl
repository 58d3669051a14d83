// CoopmatSplitK: the sum of a split-K cooperative-matrix GEMM's slabs (coopmat_gemm.comp
// dispatched with S workgroups along z; gpu/coopmat.go coopSplitK):
//   c[i] (+)= Σ_{z < S} part[z·n + i]   for i < n, z ascending (a fixed order, deterministic).
// part: f32 [S, n] (slab z: workgroup z's product over its run of K); c: f32 [n].
// Template parameters: WG (workgroup size), Accum (add to c instead of writing it).

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> c: array<f32>;

struct Params {
    n: u32,
    s: u32,
};
@group(0) @binding(2) var<uniform> p: Params;

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    var v = part[i];
    for (var z = 1u; z < p.s; z++) {
        v += part[z * p.n + i];
    }
{{- if .Accum}}
    c[i] += v;
{{- else}}
    c[i] = v;
{{- end}}
}
