// The sub-steps that the chunked gated delta rule's kernels share
// (gated_delta_rule_chunked.wgsl, gated_delta_rule_chunked_backward.wgsl): chunks of C = 64
// tokens, workgroups per (window b, value head j, chunk ci) or per (b, j, slice of CS value
// columns) with the state slice S [DK, CS] in workgroup memory sw. Not a kernel: a library
// of templates that wgsl.Render parses with every shader. A dict argument must hold every
// key named (I: an extra indentation, "" or "    ", prefixed to each line). gdrc_params,
// gdrc_main and gdrc_col4 start at the beginning of a line (call them on a line of their
// own); the others start with a line break (call them with the left trim marker, as the
// kernels' range blocks are written). The defines:
//   gdrc_params (dict U, Note, P) the Params struct (nb, t, hk, hv, nck; Note: the comment
//               on nck), its uniform binding p at binding U (none when U is 0), then the
//               constants C, DK = P.DK, DV = P.DV, D4 = DK/4 and GMIN, the floor of the
//               log-decays g (below it e^g is 0 in f32: the state is forgotten);
//   gdrc_main   (dict WG, Slices, Notes) gated_delta_rule_lib.wgsl's gdr_main (workgroup
//               size WG) over the chunk index ci of p.nck chunks, or when Slices the slice
//               index slice over NS slices, then kh and S zeroed in sw (DK·C4 vec4s).
//               Notes: the forward's comment on barrier uniformity;
//   gdrc_chunk  (dict I, Let, Notes) the chunk's first token t0, length L, token row row0
//               and scratch row sr0 (declared with let when Let, else assigned to private
//               variables; Notes: comments on row0, sr0);
//   gdrc_col4   (no argument) the WGSL function col4(base, c): u[base + c..c+3] for the
//               columns c < DV (0 beyond), of the binding u;
//   gdrc_gates  (no argument) e^{γ_i} into gq and e^{γ_{L−1} − γ_i} into gk (0 at i ≥ L),
//               from the cumulative log-decays gc of the chunk (invocations lid < C);
//   gdrc_s4     (no argument) s0..s3 = rows 4d..4d+3 of S in sw at column group c4;
//   gdrc_save_s (dict I, Dst) the slice of S in sw stored to Dst, an expression of the
//               state row d and value column c (c < DV) of the slice;
//   gdrc_rows8  (P) the stores of an 8-row register block (rows i = 8·rg + r, r < 8, of
//               key group dg): for dg < D4 and each row i < L, the kernel's hook
//               gdrc_row_store (dict r, P), the statements storing register r.
{{define "gdrc_params" -}}
struct Params {
    nb: u32,
    t: u32,
    hk: u32,
    hv: u32,
    nck: u32,{{if .Note}} // ⌈t / 64⌉{{end}}
};
{{- if .U}}
@group(0) @binding({{.U}}) var<uniform> p: Params;
{{- end}}

const C: u32 = 64u;
const DK: u32 = {{.P.DK}}u;
const DV: u32 = {{.P.DV}}u;
const D4: u32 = DK / 4u;
// The floor of g: e^{−104} is below half the smallest f32 subnormal, so a token with g ≤ GMIN
// (−∞ included) forgets the state exactly as e^g = 0 does, while the chunk's cumulative
// log-decays stay finite (no −∞ − −∞ = NaN) and their differences across such a token stay
// ≤ GMIN (decay 0).
const GMIN: f32 = -104.0;
{{- end}}
{{define "gdrc_main"}}
{{- $n := "p.nck"}}{{$i := "ci"}}{{if .Slices}}{{$n = "NS"}}{{$i = "slice"}}{{end -}}
{{template "gdr_main" (dict "WG" .WG "Lanes" false "N" $n "I" $i "Notes" .Notes "KH" .Slices)}}
{{- if .Slices}}
    for (var e = lid; e < DK * C4; e += WG) {
        sw[e] = vec4<f32>(0.0);
    }
{{- end}}
{{- end}}
{{define "gdrc_chunk"}}
{{- $let := ""}}{{if .Let}}{{$let = "let "}}{{end}}
{{.I}}    let t0 = ci * C;
{{.I}}    let L = min(C, p.t - t0);
{{.I}}    {{$let}}row0 = b * p.t + t0;{{if .Notes}} // token row of the chunk's first token{{end}}
{{.I}}    {{$let}}sr0 = bj * p.t + t0;{{if .Notes}} // scratch row of the chunk's first token{{end}}
{{- end}}
{{define "gdrc_col4" -}}
// col4 loads u[base + c..c+3] for the slice's columns c < DV (0 beyond).
fn col4(base: u32, c: u32) -> vec4<f32> {
    var r = vec4<f32>(0.0);
    for (var m = 0u; m < 4u; m++) {
        if (c + m < DV) {
            r[m] = u[base + c + m];
        }
    }
    return r;
}
{{- end}}
{{define "gdrc_gates"}}
        if (lid < C) {
            let gl = gc[sr0 + L - 1u];
            var eq = 0.0;
            var ek = 0.0;
            if (lid < L) {
                let x = gc[sr0 + lid];
                eq = exp(x);
                ek = exp(gl - x);
            }
            gq[lid] = eq;
            gk[lid] = ek;
        }
{{- end}}
{{define "gdrc_s4"}}
{{- range $m := seq 4}}
                let s{{$m}} = sw[(4u * d{{if $m}} + {{$m}}u{{end}}) * C4 + c4];
{{- end}}
{{- end}}
{{define "gdrc_save_s"}}
{{.I}}    for (var e = lid; e < DK * CS; e += WG) {
{{.I}}        let d = e / CS;
{{.I}}        let c = slice * CS + e % CS;
{{.I}}        if (c < DV) {
{{.I}}            {{.Dst}} = sw[d * C4 + (e % CS) / 4u][e % 4u];
{{.I}}        }
{{.I}}    }
{{- end}}
{{define "gdrc_rows8"}}
        if (dg < D4) {
{{- range $r := seq 8}}
            {
                let i = 8u * rg + {{$r}}u;
                if (i < L) {
{{- template "gdrc_row_store" (dict "r" $r "P" $)}}
                }
            }
{{- end}}
        }
{{- end}}
