// The simple twin of linear.wgsl (same operands and Params, one invocation per element of
// C, no workgroup memory): the reference the tiled GEMM is tested against, besides the host.
// Template parameters: TransB, BF16 (bools), WG.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<{{if .BF16}}u32{{else}}f32{{end}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

{{template "gemm_params" (dict "B" 3)}}

fn loadB(kk: u32, nn: u32) -> f32 {
{{- template "gemm_bvalue" (dict "TransB" .TransB "BF16" .BF16)}}
}

{{template "ew_main_rc" (dict "WG" .WG "N" "p.m * p.n" "Cols" "p.n" "R" "row" "C" "col")}}
    var s = 0.0;
    for (var kk = 0u; kk < p.k; kk++) {
        s = fma(a[row * p.k + kk], loadB(kk, col), s);
    }
    c[i] = s;
}
