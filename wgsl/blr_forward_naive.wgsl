// The simple twin of blr_forward.wgsl (same operands, bindings and Params, one invocation
// per element of C, no workgroup memory): C[M, N] (+)= (A ⊙ sa)·B (⊙ sc) with B a packed
// ±1 bit matrix ([N, K] when TransB, else [K, N]; element e is bit e & 31 of word e >> 5).
// Raw (ScaleC only): also stores each sum before ⊙ sc in raw [M, N].
// Template parameters: TransB, ScaleC, Accum, Raw (bools), WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> sa: array<f32>;
{{- if .ScaleC}}
@group(0) @binding(3) var<storage, read> sc: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;
{{- if .Raw}}
@group(0) @binding(5) var<storage, read_write> raw: array<f32>;
{{- end}}
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{- end}}

{{if .ScaleC}}{{if .Raw}}{{template "gemm_params" (dict "B" 6)}}{{else}}{{template "gemm_params" (dict "B" 5)}}{{end}}{{else}}{{template "gemm_params" (dict "B" 4)}}{{end}}

fn loadB(kk: u32, nn: u32) -> f32 {
{{- template "gemm_belem" (dict "TransB" .TransB)}}
    return select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
}

{{template "ew_main" (dict "WG" .WG "N" "p.m * p.n")}}
    let row = i / p.n;
    let col = i - row * p.n;
    var s = 0.0;
    for (var kk = 0u; kk < p.k; kk++) {
        s = fma(a[row * p.k + kk] * sa[kk], loadB(kk, col), s);
    }
{{- if .Raw}}
    raw[i] = s;
{{- end}}
{{- if .ScaleC}}
    s = s * sc[col];
{{- end}}
{{- if .Accum}}
    c[i] = c[i] + s;
{{- else}}
    c[i] = s;
{{- end}}
}
