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
//                B(4·k4 … 4·k4+3, nl + j);
//   lanes_aprep  statements of the K step before the row loads (may be empty);
//   (lanes_bload and lanes_aprep may keep state across K steps in variables lanes_setup
//   declares: k4 runs 0, 1, …, k4n − 1 in order);
//   lanes_aload  (dict a, P) the vec4<f32> A(row, 4·k4 … 4·k4+3) of the lane's row a, whose
//                element offset divided by 4 is ar{a};
//   lanes_store  (dict v, gm, n, j, P) the store of value v at row gm, column n = nl + j.
// Template parameters: S (lanes: the subgroup size), R (row blocks: rows per workgroup
// S·R), C (columns per lane: columns per workgroup S·C). K must be a multiple of 4; A rows
// beyond M and B columns beyond N are clamped on load and not stored. Grid:
// (ceil(N/(S·C)), ceil(M/(S·R))).
{{define "lanes_main"}}
@compute @workgroup_size({{.S}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let m0 = wid.y * {{mul .S .R}}u;
    let nl = wid.x * {{mul .S .C}}u + sl * {{.C}}u;
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
        let xa{{$a}} = {{template "lanes_aload" (dict "a" $a "P" $)}};
{{- range $i := seq $.S}}
        {
            let x = subgroupBroadcast(xa{{$a}}, {{$i}}u);
{{- range $j := seq $.C}}
            acc_{{$a}}_{{$i}}_{{$j}} = fma(x.x, b{{$j}}.x, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma(x.y, b{{$j}}.y, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma(x.z, b{{$j}}.z, acc_{{$a}}_{{$i}}_{{$j}});
            acc_{{$a}}_{{$i}}_{{$j}} = fma(x.w, b{{$j}}.w, acc_{{$a}}_{{$i}}_{{$j}});
{{- end}}
        }
{{- end}}
{{- end}}
    }
{{- range $a := seq .R}}{{range $i := seq $.S}}
    {
        let gm = m0 + {{add (mul $a $.S) $i}}u;
        if (gm < p.m) {
{{- range $j := seq $.C}}
            if (nl + {{$j}}u < p.n) { {{template "lanes_store" (dict "v" (printf "acc_%d_%d_%d" $a $i $j) "gm" "gm" "n" (printf "nl + %du" $j) "j" $j "P" $)}} }
{{- end}}
        }
    }
{{- end}}{{end}}
}
{{- end}}
