{{- /*
reduce.wgsl: the workgroup reductions shared by the row kernels (defines only, parsed with
every shader; names prefixed red_). Each define is instantiated with dict; every key it
names must be given (templates run with missingkey=error). They expect the entry point's
builtins to be named wid, nwg (the 2-D grid) and lid (local_invocation_index).

The order of the float operations is fixed by the text: a strided partial sum per
invocation (c = lid, lid + WG, …), then a tree over the WG slots, h = WG/2, WG/4, …, 1,
each level behind a barrier, so a result is deterministic and the same in every kernel that
instantiates the define. Every slot is written before the first barrier (workgroup memory
is not zero-initialised on wgpu-native 27). The lanes form (red_lanes_*, red_row_*, below)
adds the same pairs without workgroup memory or barriers.
*/ -}}

{{- /* red_row: the linear workgroup index R = wid.x + wid.y·nwg.x of a 1-D grid spread over
2-D, and the return of workgroups past Count. R is uniform across the workgroup, so the early
exit keeps the barriers after it uniform. Keys: R (the name to declare), Count (an
expression, e.g. p.rows). */ -}}
{{define "red_row"}}
    let {{.R}} = wid.x + wid.y * nwg.x;
    if ({{.R}} >= {{.Count}}) {
        return; // uniform per workgroup
    }
{{- end}}

{{- /* red_main: the entry point (ew_entry) of a kernel with one workgroup per row, and
red_row's row index R and early exit. Keys: WG, R, Count. */ -}}
{{define "red_main"}}
{{- template "ew_entry" (dict "WG" .WG)}}
{{- template "red_row" (dict "R" .R "Count" .Count)}}
{{- end}}

{{- /* red_sum: Buf[lid] = Val, then the tree sum: afterwards Buf[0] holds the sum of the WG
slots (f32 or vecN<f32>). Keys: WG, Buf (a workgroup array of WG elements), Val (the
invocation's value). */ -}}
{{define "red_sum"}}
    {{.Buf}}[lid] = {{.Val}};
    workgroupBarrier();
    for (var h = {{.WG}}u / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            {{.Buf}}[lid] += {{.Buf}}[lid + h];
        }
        workgroupBarrier();
    }
{{- end}}

{{- /* red_max: as red_sum with max instead of +: afterwards Buf[0] holds the maximum. */ -}}
{{define "red_max"}}
    {{.Buf}}[lid] = {{.Val}};
    workgroupBarrier();
    for (var h = {{.WG}}u / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            {{.Buf}}[lid] = max({{.Buf}}[lid], {{.Buf}}[lid + h]);
        }
        workgroupBarrier();
    }
{{- end}}

{{- /* red_pow2: declares E (i32) = clamp(15 − frexp(Max).exp, −126, 126), the exponent that
puts Max·2^E in [2¹⁴, 2¹⁵) (0 for a Max of 0 or not finite): the power-of-two scale of the
cooperative-matrix packs (coopmat_pack*.wgsl) for a block whose largest |value| is Max. Keys:
Max (an f32 expression), E (the name to declare). */ -}}
{{define "red_pow2"}}
    var {{.E}} = 0;
    if ({{.Max}} > 0.0 && {{.Max}} <= 3.4028234e38) {
        {{.E}} = clamp(15 - frexp({{.Max}}).exp, -126, 126);
    }
{{- end}}

{{- /* red_pow2_scale: the power-of-two scale of a block from each invocation's largest
|value| Val: the workgroup maximum amax (red_max through Buf), red_pow2's e, s = 2^e (the
scale the block is multiplied by) and, by invocation 0, Inv = 2^−e (Inv: the store's target,
e.g. rs[i]). Keys: WG, Buf, Val, Inv. */ -}}
{{define "red_pow2_scale"}}
{{- template "red_max" (dict "WG" .WG "Buf" .Buf "Val" .Val)}}
    let amax = {{.Buf}}[0];
{{- template "red_pow2" (dict "Max" "amax" "E" "e")}}
    let s = ldexp(1.0, e);
    if (lid == 0u) {
        {{.Inv}} = ldexp(1.0, -e);
    }
{{- end}}

{{- /* red_sum_squares: Σ_c X[Base + c]² for c < N, declared as Out in every invocation, in
either form (the workgroup form reduces in partial, red_row_open's tree of Tree f32): the
sum of squares of one row of a norm. Keys: P (Lanes, WG, S, Q), X (a storage array), Base,
N (expressions), Out. */ -}}
{{define "red_sum_squares"}}
{{- range $q := seq .P.Q}}
    var ss{{$q}} = 0.0;
    for (var c = {{template "red_l" (dict "P" $.P "Q" $q)}}; c < {{$.N}}; c += {{$.P.WG}}u) {
        let v = {{$.X}}[{{$.Base}} + c];
        ss{{$q}} += v * v;
    }
{{- end}}
{{- template "red_row_sum" (dict "P" .P "Buf" "partial" "U" "ss" "Out" .Out)}}
{{- end}}

{{- /* red_sums2: the two sums (Σ_c v², Σ_c Y) of one row of a norm's backward,
v = X[Base + c], c < N, declared as Out (a vec2<f32>) in every invocation, in either form
(the workgroup form reduces in partial, red_row_open's tree of Tree vec2<f32>). Keys: P
(Lanes, WG, S, Q), X (a storage array), Base, N, Y (expressions; Y in v and c). */ -}}
{{define "red_sums2"}}
{{- range $q := seq .P.Q}}
    var s{{$q}} = vec2<f32>(0.0);
    for (var c = {{template "red_l" (dict "P" $.P "Q" $q)}}; c < {{$.N}}; c += {{$.P.WG}}u) {
        let v = {{$.X}}[{{$.Base}} + c];
        s{{$q}} += vec2<f32>(v * v, {{$.Y}});
    }
{{- end}}
{{- template "red_row_sum" (dict "P" .P "Buf" "partial" "U" "s" "Out" .Out)}}
{{- end}}

{{- /* red_slice_lse: one step of the streamed log-sum-exp of a row over vocabulary slices:
the slice maximum mslice of logits[base + c], c < p.cols; the running (mold, sold) read from
state[2·row], state[2·row + 1] unless p.first ≠ 0 (then (−∞, 0)); mnew = max(mold, mslice);
and snew = Σ_c exp(logits[base + c] − mnew) + sold·e^{mold − mnew}, in every invocation.
The workgroup form reduces through Buf (a workgroup array<f32, WG>), the lanes form (Lanes,
one subgroup of S lanes) by subgroupMax and subgroupAdd. The kernel declares logits, state,
p.cols, p.first, row, base and neg_inf(). It is red_slice_max, the strided sum s of the
exponentials and red_slice_snew; a kernel that reads the slice again after the maximum
(LogitsTopK's prefilter) writes that loop itself, in the same order, for the same bits.
Keys: Lanes, WG, S, Buf. */ -}}
{{define "red_slice_lse"}}
{{- $l := "lid"}}{{$step := .WG}}{{if .Lanes}}{{$l = "sl"}}{{$step = .S}}{{end}}
{{- template "red_slice_max" .}}
    var s = 0.0;
    for (var c = {{$l}}; c < p.cols; c += {{$step}}u) {
        s += exp(logits[base + c] - mnew);
    }
{{- template "red_slice_snew" .}}
{{- end}}

{{- /* red_slice_max: red_slice_lse's first half: each invocation's maximum mx over its
columns, the slice maximum mslice, (mold, sold) and mnew (the workgroup form leaves Buf free:
a barrier follows its read). Keys: Lanes, WG, S, Buf. */ -}}
{{define "red_slice_max"}}
{{- $l := "lid"}}{{$step := .WG}}{{if .Lanes}}{{$l = "sl"}}{{$step = .S}}{{end}}
    var mx = neg_inf();
    for (var c = {{$l}}; c < p.cols; c += {{$step}}u) {
        mx = max(mx, logits[base + c]);
    }
{{- if .Lanes}}
    let mslice = subgroupMax(mx);
{{- else}}
{{- template "red_max" (dict "WG" .WG "Buf" .Buf "Val" "mx")}}
    let mslice = {{.Buf}}[0];
    workgroupBarrier();
{{- end}}
    var mold = neg_inf();
    var sold = 0.0;
    if (p.first == 0u) {
        mold = state[2u * row];
        sold = state[2u * row + 1u];
    }
    let mnew = max(mold, mslice);
{{- end}}

{{- /* red_slice_snew: red_slice_lse's second half: snew from each invocation's strided sum
s of exp(x − mnew) (the workgroup form leaves the sum in Buf[0]: a barrier must come
before Buf is written again). Keys: Lanes, WG, S, Buf. */ -}}
{{define "red_slice_snew"}}
{{- if .Lanes}}
    var snew = subgroupAdd(s);
{{- else}}
{{- template "red_sum" (dict "WG" .WG "Buf" .Buf "Val" "s")}}
    var snew = {{.Buf}}[0];
{{- end}}
    if (sold > 0.0) {
        snew += sold * exp(mold - mnew);
    }
{{- end}}

{{- /* The lanes form of the one-workgroup-per-row kernels (CPU adapters; gemm_lanes.wgsl
says why): a workgroup is one subgroup of S lanes, and lane sl does the work of the
workgroup form's threads sl + S·q (q < Q = WG/S) — the same strided partial sums, then
red_lanes_sum's copy of red_sum's tree — so the results are the same bits, without the
barriers (on lavapipe each barrier swaps every SIMD group of the workgroup in and out). A
kernel written for both forms takes the keys Lanes, WG, S and Q (1 in the workgroup form)
and uses the defines below: red_row_open, red_l for the first element of partial sum q,
red_row_sum (or red_sum_squares), and lane0 / RSTEP / lane_first for its elementwise
loops. */ -}}

{{- /* red_row_open: the entry point in either form (the lanes form's: one subgroup, lane sl)
and the row index R with its early exit; before it, in the workgroup form, the tree of
red_row_sum, var<workgroup> partial: array<Tree, WG·RW>. With RW > 1 (workgroup form, short
rows: gpu.rowForm) a workgroup of WG·RW threads takes RW rows, WG threads each: lid is the
thread's index within its row (lidw the workgroup's), rbase its row's first slot of partial,
and a slot past Count repeats row Count − 1 instead of returning (every thread meets the
barriers), so its writes repeat that row's: only kernels whose writes are overwrites take it.
Declares lane0 (lid, or sl: the first element of the invocation in an elementwise loop over
the row, whose stride is the constant RSTEP: WG, or S) and lane_first (true in one
invocation of the row).
Keys: Lanes, WG, S, RW, R, Count, Tree (f32, or vec2<f32> for two sums). */ -}}
{{define "red_row_open"}}
{{- if not .Lanes}}
var<workgroup> partial: array<{{.Tree}}, {{mul .WG .RW}}>; // the workgroup form's trees
{{- end}}
{{- if and (not .Lanes) (gt .RW 1)}}
@compute @workgroup_size({{mul .WG .RW}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lidw: u32) {
    let lid = lidw % {{.WG}}u;
    let rbase = lidw - lid;
    let {{.R}} = min((wid.x + wid.y * nwg.x) * {{.RW}}u + lidw / {{.WG}}u, {{.Count}} - 1u);
{{- else}}
{{- $wg := .WG}}{{if .Lanes}}{{$wg = .S}}{{end}}
{{- template "ew_entry_form" (dict "WG" $wg "Lanes" .Lanes)}}
{{- template "red_row" (dict "R" .R "Count" .Count)}}
{{- end}}
{{- if .Lanes}}
    let lane0 = sl;
    const RSTEP = {{.S}}u;
{{- else}}
    let lane0 = lid;
    const RSTEP = {{.WG}}u;
{{- end}}
    let lane_first = lane0 == 0u;
{{- end}}

{{- /* red_l: the first element of the invocation's partial sum q (its thread index in the
workgroup form): lid, or sl + S·q. Keys: P (Lanes, S), Q (q). */ -}}
{{define "red_l"}}{{if .P.Lanes}}sl + {{mul .Q .P.S}}u{{else}}lid{{end}}{{end}}

{{- /* red_row_sum: the tree sum of the partial sums U0 … U{Q−1} (red_sum over Buf, or
red_lanes_sum), declaring Out (the row's sum, in every invocation). Keys: P (Lanes, WG, S),
Buf (the workgroup array of the workgroup form), U, Out. */ -}}
{{define "red_row_sum"}}
{{- if .P.Lanes}}
{{- template "red_lanes_sum" (dict "WG" .P.WG "S" .P.S "U" .U "Out" .Out)}}
{{- else if gt .P.RW 1}}
    // red_sum's tree over the row's WG slots rbase … rbase + WG − 1: the same pairs.
    {{.Buf}}[lidw] = {{.U}}0;
    workgroupBarrier();
    for (var h = {{.P.WG}}u / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            {{.Buf}}[lidw] += {{.Buf}}[lidw + h];
        }
        workgroupBarrier();
    }
    let {{.Out}} = {{.Buf}}[rbase];
{{- else}}
{{- template "red_sum" (dict "WG" .P.WG "Buf" .Buf "Val" (printf "%s0" .U))}}
    let {{.Out}} = {{.Buf}}[0];
{{- end}}
{{- end}}

{{- /* red_lanes_sum: red_sum's tree over WG slots in the lanes form, bit for bit: lane sl
holds slots sl + S·q in the variables U0 … U{WG/S − 1} (declared by the kernel); the levels
h ≥ S add within each lane, the levels h < S across the lanes (subgroupShuffle), each add the
same pair as red_sum's. Declares Out (the sum, in every lane). Keys: WG, S, U (the variable
prefix), Out. */ -}}
{{define "red_lanes_sum"}}
{{- $U := .U}}
{{- range $h := halves (div .WG .S)}}{{range $q := seq $h}}
    {{$U}}{{$q}} = {{$U}}{{$q}} + {{$U}}{{add $q $h}};
{{- end}}{{end}}
    var {{.Out}}_t = {{$U}}0;
{{- range $h := halves .S}}
    {{$.Out}}_t = {{$.Out}}_t + subgroupShuffle({{$.Out}}_t, min(sl + {{$h}}u, {{sub $.S 1}}u));
{{- end}}
    let {{.Out}} = subgroupBroadcast({{.Out}}_t, 0u);
{{- end}}
