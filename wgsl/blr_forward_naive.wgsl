// The simple twin of blr_forward.wgsl (same operands, bindings and Params, one invocation
// per element of C, no workgroup memory): C[M, N] (+)= (A ⊙ sa)·B (⊙ sc) with B a packed
// ±1 bit matrix ([N, K] when TransB, else [K, N]; element e is bit e & 31 of word e >> 5).
// Raw (ScaleC only): also stores each sum before ⊙ sc in raw [M, N].
// Template parameters: TransB, ScaleC, Accum, Raw (bools), WG.

{{template "gemm_blr_io" (dict "A" "f32" "SA" "f32" "F" "f32" "ScaleC" .ScaleC "Raw" .Raw)}}

fn loadB(kk: u32, nn: u32) -> f32 {
{{- template "gemm_belem" (dict "TransB" .TransB)}}
    return select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
}

{{template "ew_main_rc" (dict "WG" .WG "N" "p.m * p.n" "Cols" "p.n" "R" "row" "C" "col")}}
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
