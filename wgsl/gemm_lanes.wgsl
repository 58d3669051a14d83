// The shared body of the lane-blocked GEMM kernels for CPU adapters (linear_lanes.wgsl,
// blr_forward_lanes.wgsl): C[M, N] = A[M, K]·B, each output one fma chain in K order, so the
// results are bit-identical to the tiled kernels of gemm_tile.wgsl and their naive twins.
// Not a kernel: a library of templates parsed with every shader.
//
// Why a third form: Mesa lavapipe (llvmpipe) runs a workgroup on one CPU thread, S
// invocations at a time in the S lanes of a SIMD vector (S = 8 with AVX2), and in Mesa 22
// every storage or workgroup memory load is a loop over the lanes, one scalar load per lane
// and component with its bounds check — whatever the address. The tiled GEMM, which stages
// operands in workgroup memory and reloads them for every few products, ran at 0.6–0.9
// GFLOP/s on 2 cores there. This form loads each operand element once per workgroup and
// shares it through registers: a workgroup is one subgroup of S lanes; lane l loads rows
// m0 + S·a + l of A (a < R) and owns the C consecutive columns n0 + C·l … of B and C; each
// A row is passed to every lane with subgroupBroadcast (a register shuffle), so a lane does
// 4·R·S·C fused multiply-adds per 4·R + (B's loads) lane loads. No workgroup memory, no
// barrier.
//
// Hooks a kernel file defines (each on one line, P the parameters):
//   lanes_setup  statements before the K loop (column offsets, per-column values the store
//                reads; nl, k4n, m0 in scope);
//   lanes_bload  statements of the K step k4 defining b0 … b{C−1}: vec4<f32>, column j's
//                B(4·k4 … 4·k4+3, nl + j) (in a pair: B_0's for j < H, B_1's column nl + j − H
//                after);
//   lanes_aprep  statements of the K step before the row loads (may be empty);
//   (lanes_bload and lanes_aprep may keep state across K steps in variables lanes_setup
//   declares: k4 runs 0, 1, …, k4n − 1 in order);
//   lanes_aload  (dict a, P) the vec4<f32> A(row, 4·k4 … 4·k4+3) of the lane's row a, whose
//                element offset divided by 4 is ar{a};
//   lanes_ascale (dict v, q, P) the value broadcast for output q: v itself, or v times a
//                per-k scale (one f32 product per element);
//   lanes_store  (dict v, gm, n, j, q, P) the store of value v at row gm, column n of output
//                q (0 but in a pair), accumulator column j.
// Template parameters: S (lanes: the subgroup size), R (row blocks: rows per workgroup
// S·R), C (columns per lane: columns per workgroup S·C), Pair (below) and H (C, or C/2 in a
// pair: gpu.lanesParams.H). K must be a multiple of 4; A rows beyond M and B columns beyond N
// are clamped on load and not stored. Grid: (ceil(N/(S·C)), ceil(M/(S·R))).
//
// Pair: two GEMMs that share A, C_q = (A ⊙ s_q)·B_q for q = 0, 1 (a BLR layer's two paths),
// each element of A loaded once for both. A lane owns H = C/2 columns nl + j of each output:
// accumulators j < H are C_0's, j ≥ H C_1's column nl + j − H; the grid is then
// (ceil(N/(S·H)), ceil(M/(S·R))). The hook lanes_ascale (dict v, q, P) scales the loaded
// A value v for output q (lanes_aload gives the unscaled value in a pair); lanes_store gets
// q and the column.
{{define "lanes_main"}}
{{- $H := .H}}
@compute @workgroup_size({{.S}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let m0 = wid.y * {{mul .S .R}}u;
    let nl = wid.x * {{mul .S $H}}u + sl * {{$H}}u;
    let k4n = p.k >> 2u;
{{- range $a := seq .R}}
    let ar{{$a}} = min(m0 + {{mul $a $.S}}u + sl, p.m - 1u) * k4n;
{{- end}}
    {{template "lanes_setup" $}}
    // acc_a_i_j: row m0 + S·a + i, column nl + j.
{{- range $a := seq .R}}{{range $i := seq $.S}}{{range $j := seq $.C}}
    var acc_{{$a}}_{{$i}}_{{$j}} = 0.0;
{{- end}}{{end}}{{end}}
    for (var k4 = 0u; k4 < k4n; k4++) {
        {{template "lanes_bload" $}}
        {{template "lanes_aprep" $}}
{{- range $a := seq .R}}
        let av{{$a}} = {{template "lanes_aload" (dict "a" $a "P" $)}};
        let xa{{$a}} = {{template "lanes_ascale" (dict "v" (printf "av%d" $a) "q" 0 "P" $)}};
{{- if $.Pair}}
        let xb{{$a}} = {{template "lanes_ascale" (dict "v" (printf "av%d" $a) "q" 1 "P" $)}};
{{- end}}
{{- range $i := seq $.S}}
        {
            let x0 = subgroupBroadcast(xa{{$a}}, {{$i}}u);
{{- if $.Pair}}
            let x1 = subgroupBroadcast(xb{{$a}}, {{$i}}u);
{{- end}}
{{- range $j := seq $.C}}{{$x := "x0"}}{{if ge $j $H}}{{$x = "x1"}}{{end}}
            acc_{{$a}}_{{$i}}_{{$j}} = fma({{$x}}.x, b{{$j}}.x, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma({{$x}}.y, b{{$j}}.y, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma({{$x}}.z, b{{$j}}.z, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma({{$x}}.w, b{{$j}}.w, acc_{{$a}}_{{$i}}_{{$j}});
{{- end}}
        }
{{- end}}
{{- end}}
    }
{{- range $a := seq .R}}{{range $i := seq $.S}}
    {
        let gm = m0 + {{add (mul $a $.S) $i}}u;
        if (gm < p.m) {
{{- range $j := seq $.C}}{{$q := 0}}{{$jj := $j}}{{if ge $j $H}}{{$q = 1}}{{$jj = sub $j $H}}{{end}}
            if (nl + {{$jj}}u < p.n) { {{template "lanes_store" (dict "v" (printf "acc_%d_%d_%d" $a $i $j) "gm" "gm" "n" (printf "nl + %du" $jj) "j" $j "q" $q "P" $)}} }
{{- end}}
        }
    }
{{- end}}{{end}}
}
{{- end}}
