{{- /*
attention_lib.wgsl: the pieces the causal GQA attention kernels share (defines only, parsed
with every shader; names prefixed attn_): the uniform sizes, the entry point and the
workgroup's (window, query head, row block), and, for the workgroup-memory forms (attention.wgsl,
attention_backward.wgsl), the head-dim slicing, its row reader and the tile loops. Each is
instantiated with dict (or the template's own parameters where it says so); every key a
define names must be given (templates run with missingkey=error).

The tile forms (attention.wgsl, attention_backward.wgsl): a workgroup of Rows·NS invocations
serves a block of Rows rows; invocation (row r, slice sl) holds dims 4·c4..4·c4+3 of its row
for c4 = sl + NS·m, m < D4, as D4 vec4 registers; a staged tile holds rows of R4 = D4·NS
vec4s (HD padded with zeros), and the NS partial dots of tile row jj are part[jj·WG + r·NS +
x], x < NS. The float operations keep one fixed order, so each kernel computes the bits of
the text it replaced.
*/ -}}

{{- /* attn_params: struct Params, the runtime sizes of every attention kernel: nb windows of
t tokens, nh query heads, nkv KV heads, scale the score scale (HD^−½). The kernel declares
its binding. */ -}}
{{define "attn_params"}}
struct Params {
    nb: u32,
    t: u32,
    nh: u32,
    nkv: u32,
    scale: f32,
};
{{- end}}

{{- /* attn_consts: the head-dim slicing of the tile forms, from the template parameters HD,
NS, D4 (pass the kernel's parameters): HD, NS, D4 and R4 = D4·NS, the vec4s of a padded
row. */ -}}
{{define "attn_consts"}}
const HD: u32 = {{.HD}}u;
const NS: u32 = {{.NS}}u;
const D4: u32 = {{.D4}}u;
const R4: u32 = {{.D4}}u * {{.NS}}u; // vec4s per padded row
{{- end}}

{{- /* attn_row4: fn row4_X(base, c4), dims 4·c4..4·c4+3 of the HD-vector of the storage
array X (f32) at base, zero past HD. Instantiate with the array's name: {{template
"attn_row4" "q"}}. */ -}}
{{define "attn_row4"}}

// row4_{{.}} reads dims 4·c4..4·c4+3 of the HD-vector of {{.}} at base, zero past HD.
fn row4_{{.}}(base: u32, c4: u32) -> vec4<f32> {
    var r = vec4<f32>(0.0);
    let d = 4u * c4;
    if (d + 3u < HD) {
        r = vec4<f32>({{.}}[base + d], {{.}}[base + d + 1u], {{.}}[base + d + 2u], {{.}}[base + d + 3u]);
    } else {
        for (var e = 0u; e < 4u; e++) {
            if (d + e < HD) {
                r[e] = {{.}}[base + d + e];
            }
        }
    }
    return r;
}
{{- end}}

{{- /* attn_query_main: the entry point (WG invocations, or WG lanes when Lanes) and the
workgroup's place (elementwise.wgsl's ew_blocks): Blk, the block of Rows rows among
N = ⌈t/Rows⌉, of query head h (bh = b·nh + h) of window b, with its KV head
kh = h / (nh/nkv); then the invocation's row R = R0 + its row in the block, R0 = Blk·Rows,
live when R < t: in the tile forms the row is Lane = lid / NS, sl = lid mod NS its dim
slice; in the lanes form it is the lane sl. The kernel writes the body and the closing
brace. Keys: WG, Lanes, Rows (an expression), N, Blk, Lane (unused in the lanes form), R0,
R. */ -}}
{{define "attn_query_main"}}
{{- template "ew_blocks" (dict "WG" .WG "Lanes" .Lanes "Count" (printf "(p.t + %s - 1u) / %s" .Rows .Rows) "N" .N "Heads" "p.nh" "I" .Blk "BH" "bh" "H" "h" "Notes" true)}}
    let kh = h / (p.nh / p.nkv);
{{- if not .Lanes}}
    let {{.Lane}} = lid / NS;
    let sl = lid - {{.Lane}} * NS;
{{- end}}
    let {{.R0}} = {{.Blk}} * {{.Rows}};
    let {{.R}} = {{.R0}} + {{if .Lanes}}sl{{else}}{{.Lane}}{{end}};
    let live = {{.R}} < p.t;
{{- end}}

{{- /* attn_stage_dots: stages a tile (the call Load, after a barrier when Fresh: the
previous tile or partials may still be read), then the partial dot products of the
invocation's registers Reg (array of D4 vec4s) with its slice of every staged tile row Row <
Rows, into part[Row·WG + lid], then a barrier; the kernel follows with attn_row_dot. Keys:
Fresh, Load, Reg, Row (the loop variable), Rows. */ -}}
{{define "attn_stage_dots"}}
{{- if .Fresh}}
        workgroupBarrier(); // the previous tile and partials are no longer read
{{- end}}
        {{.Load}};
        workgroupBarrier(); // the tile is staged
        for (var {{.Row}} = 0u; {{.Row}} < {{.Rows}}; {{.Row}}++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += {{.Reg}}[m] * tile[{{.Row}} * R4 + sl + NS * m];
            }
            part[{{.Row}} * WG + lid] = (s4.x + s4.y) + (s4.z + s4.w);
        }
        workgroupBarrier(); // the partials are complete, the tile is no longer read
{{- end}}

{{- /* attn_row_dot: declares s, the full dot product of tile row Row with the invocation's
row Lane: the sum of its NS partials in order. Keys: Row, Lane. */ -}}
{{define "attn_row_dot"}}
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[{{.Row}} * WG + {{.Lane}} * NS + x];
            }
{{- end}}

{{- /* attn_tile_acc: Acc[m] = Acc[m]·Scale + Σ_Row W[Row]·(the invocation's slice of staged
tile row Row), Row < Rows in order, for each of its D4 vec4 registers. Keys: Acc, Scale
(an expression, e.g. "alpha", or "" for none), W (an array of Rows weights), Row, Rows. */ -}}
{{define "attn_tile_acc"}}
        for (var m = 0u; m < D4; m++) {
            var a = {{.Acc}}[m]{{if .Scale}} * {{.Scale}}{{end}};
            for (var {{.Row}} = 0u; {{.Row}} < {{.Rows}}; {{.Row}}++) {
                a += {{.W}}[{{.Row}}] * tile[{{.Row}} * R4 + sl + NS * m];
            }
            {{.Acc}}[m] = a;
        }
{{- end}}
