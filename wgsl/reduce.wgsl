{{- /*
reduce.wgsl: the workgroup reductions shared by the row kernels (defines only, parsed with
every shader; names prefixed red_). Each define is instantiated with dict; every key it
names must be given (templates run with missingkey=error). They expect the entry point's
builtins to be named wid, nwg (the 2-D grid) and lid (local_invocation_index).

The order of the float operations is fixed by the text: a strided partial sum per
invocation (c = lid, lid + WG, …), then a tree over the WG slots, h = WG/2, WG/4, …, 1,
each level behind a barrier, so a result is deterministic and the same in every kernel that
instantiates the define. Every slot is written before the first barrier (workgroup memory
is not zero-initialised on wgpu-native 27).
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

{{- /* red_sum_squares: Σ_c X[Base + c]² for c < N, left in partial[0] (the kernel declares
var<workgroup> partial: array<f32, WG>): the sum of squares of one row of a norm. Keys: WG,
X (a storage array), Base, N (expressions). */ -}}
{{define "red_sum_squares"}}
    var s = 0.0;
    for (var c = lid; c < {{.N}}; c += {{.WG}}u) {
        let v = {{.X}}[{{.Base}} + c];
        s += v * v;
    }
{{- template "red_sum" (dict "WG" .WG "Buf" "partial" "Val" "s")}}
{{- end}}

{{- /* red_slice_lse: one step of the streamed log-sum-exp of a row over vocabulary slices:
the slice maximum mslice of logits[base + c], c < p.cols; the running (mold, sold) read from
state[2·row], state[2·row + 1] unless p.first ≠ 0 (then (−∞, 0)); mnew = max(mold, mslice);
and Σ_c exp(logits[base + c] − mnew) left in Buf[0]. The kernel declares logits, state,
p.cols, p.first, row, base and neg_inf(). Keys: WG, Buf (a workgroup array<f32, WG>). */ -}}
{{define "red_slice_lse"}}
    var mx = neg_inf();
    for (var c = lid; c < p.cols; c += {{.WG}}u) {
        mx = max(mx, logits[base + c]);
    }
{{- template "red_max" (dict "WG" .WG "Buf" .Buf "Val" "mx")}}
    let mslice = {{.Buf}}[0];
    workgroupBarrier();
    var mold = neg_inf();
    var sold = 0.0;
    if (p.first == 0u) {
        mold = state[2u * row];
        sold = state[2u * row + 1u];
    }
    let mnew = max(mold, mslice);
    var s = 0.0;
    for (var c = lid; c < p.cols; c += {{.WG}}u) {
        s += exp(logits[base + c] - mnew);
    }
{{- template "red_sum" (dict "WG" .WG "Buf" .Buf "Val" "s")}}
{{- end}}
