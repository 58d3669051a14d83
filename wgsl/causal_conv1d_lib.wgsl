{{- /*
causal_conv1d_lib.wgsl: the pieces CausalConv1dSiLU and its backward share (defines only,
parsed with every shader; names prefixed cc_): x and the per-element tensors are f32
[nb·t, C] row-major (token-major), w is f32 [C, 1, K] flattened to [C·K], one invocation per
element i (ew_main) — or, in the run form that every device takes (cc_run_*, below), per
channel and run of RB tokens.
*/ -}}

{{- /* cc_params: the uniform Params { n = nb·t·C, c = C, t, c0, c1 } at binding B, read as p:
c0 and c1 are the column counts of the first two column blocks (cc_blocks). */ -}}
{{define "cc_params"}}
struct Params {
    n: u32,  // nb·t·C
    c: u32,  // channels
    t: u32,  // window length
    c0: u32, // columns of block 0 (cc_blocks; C with one block)
    c1: u32, // columns of block 1 (C − c0 with two blocks)
};
@group(0) @binding({{.B}}) var<uniform> p: Params;
{{- end}}

{{- /* cc_blocks: a [nb·t, C] tensor Name held as Blocks (1 to 3) column blocks in separate
row-major buffers Name0 … (bindings B, B+1, …): block 0 holds channels [0, c0), block 1
[c0, c0 + c1), block 2 the rest (gpu.ColumnBlock; the q, k and v channels of a GatedDeltaNet
go straight to, or come straight from, their own buffers). Declares them and either
store_Name(row, ch, v) (Store) or load_Name(row, ch). Keys: Name, B, Blocks, Store. */ -}}
{{define "cc_blocks"}}
{{- range $b := seq .Blocks}}
@group(0) @binding({{add $.B $b}}) var<storage, {{if $.Store}}read_write{{else}}read{{end}}> {{$.Name}}{{$b}}: array<f32>;
{{- end}}
{{- $c2 := "(p.c - p.c0 - p.c1)"}}{{if eq .Blocks 2}}{{$c2 = "(p.c - p.c0)"}}{{end}}
{{- if .Store}}

fn store_{{.Name}}(row: u32, ch: u32, v: f32) {
{{- if eq .Blocks 1}}
    {{.Name}}0[row * p.c + ch] = v;
{{- else}}
    if (ch < p.c0) {
        {{.Name}}0[row * p.c0 + ch] = v;
{{- if eq .Blocks 3}}
    } else if (ch < p.c0 + p.c1) {
        {{.Name}}1[row * p.c1 + ch - p.c0] = v;
    } else {
        {{.Name}}2[row * {{$c2}} + ch - p.c0 - p.c1] = v;
{{- else}}
    } else {
        {{.Name}}1[row * {{$c2}} + ch - p.c0] = v;
{{- end}}
    }
{{- end}}
}
{{- else}}

fn load_{{.Name}}(row: u32, ch: u32) -> f32 {
{{- if gt .Blocks 1}}
    if (ch < p.c0) {
        return {{.Name}}0[row * p.c0 + ch];
    }
{{- end}}
{{- if eq .Blocks 1}}
    return {{.Name}}0[row * p.c + ch];
{{- else if eq .Blocks 2}}
    return {{.Name}}1[row * {{$c2}} + ch - p.c0];
{{- else}}
    if (ch < p.c0 + p.c1) {
        return {{.Name}}1[row * p.c1 + ch - p.c0];
    }
    return {{.Name}}2[row * {{$c2}} + ch - p.c0 - p.c1];
{{- end}}
}
{{- end}}
{{- end}}

{{- /* cc_pos: element i's token row, channel ch and window position tau = row mod t. */ -}}
{{define "cc_pos"}}
    let row = i / p.c;
    let ch = i - row * p.c;
    let tau = row % p.t;
{{- end}}

{{- /* cc_preact: cc_pos and the pre-activation s = Σ_{k<K} w[ch·K + k]·x[i − (K−1−k)·C] of the
forward, a tap skipped when its time τ − (K−1) + k is before the window start (x = 0 there).
Keys: K (the taps). */ -}}
{{define "cc_preact"}}
{{- template "cc_pos"}}
    var s = 0.0;
    for (var k = 0u; k < {{.K}}u; k++) {
        let back = {{.K}}u - 1u - k;
        if (back <= tau) {
            s += w[ch * {{.K}}u + k] * x[i - back * p.c];
        }
    }
{{- end}}

{{- /* The run form (RB > 0, every device's; the per-element form is its simple twin): one
invocation per channel and run of RB tokens of one window, taps by a sliding register
window, so each element of x (or ds) is loaded once and w once per run, where the
per-element form loads K of each per element (on lavapipe every load is a loop over the
lanes; on an H100 the run form takes half the time). Every sum takes the per-element form's taps in its
order and skips the same ones, so the bits are the same (TestCausalConvRunsBitIdentical). */ -}}

{{- /* cc_run_open: ew_index, the invocation's channel ch, window row base, tokens tau0 …
tau1 − 1 and taps w0 … w{K−1}; returns past the runs. Keys: WG, K, RB. */ -}}
{{define "cc_run_open"}}
{{- template "ew_index" (dict "WG" .WG)}}
    let nrun = (p.t + {{.RB}}u - 1u) / {{.RB}}u;
    if (i >= (p.n / p.t) * nrun) {
        return;
    }
    let ch = i % p.c;
    let run = i / p.c;
    let base = (run / nrun) * p.t;
    let tau0 = (run % nrun) * {{.RB}}u;
    let tau1 = min(tau0 + {{.RB}}u, p.t);
{{- range $k := seq .K}}
    let w{{$k}} = w[ch * {{$.K}}u + {{$k}}u];
{{- end}}
{{- end}}

{{- /* cc_run_preact: cc_run_open and the loop over the run's tokens tau with cc_preact's
pre-activation s of element ei = (base + tau)·C + ch, from registers h{j} = x at tau − j;
the kernel writes the loop's body and closes it with cc_run_shift. Keys: WG, K, RB. */ -}}
{{define "cc_run_preact"}}
{{- template "cc_run_open" .}}
{{- range $j := seq .K}}{{if gt $j 0}}
    var h{{$j}} = select(0.0, x[(base + max(tau0, {{$j}}u) - {{$j}}u) * p.c + ch], tau0 >= {{$j}}u);
{{- end}}{{end}}
    for (var tau = tau0; tau < tau1; tau++) {
        let ei = (base + tau) * p.c + ch;
        let h0 = x[ei];
        var s = 0.0;
{{- range $k := seq .K}}{{$back := sub (sub $.K 1) $k}}
        if ({{$back}}u <= tau) {
            s += w{{$k}} * h{{$back}};
        }
{{- end}}
{{- end}}

{{- /* cc_run_shift: the end of cc_run_preact's loop body: h{j} ← h{j−1}. Keys: K. */ -}}
{{define "cc_run_shift"}}
{{- range $r := seq (sub .K 1)}}{{$j := sub (sub $.K 1) $r}}
        h{{$j}} = h{{sub $j 1}};
{{- end}}
    }
{{- end}}
