// Column dot products, the row reduction of the backward kernels:
//   out[j] += Σ_rows a[row, j]·b[row, j] (·rs[row] with RowScale)
// and, with Side, the elementwise side output so[row, j] (+= with SideAccum) a[row, j]·s[j].
// With Mask, out[j] = 0 where mask[j] == 0 (a padded entry gets exactly zero gradient).
// a, b, so: f32 [rows, N] row-major; rs: f32 [rows]; s, out: f32 [N]; mask: u32 [N].
// Used by BLRBackward (dh, dℓ, dg, dx) and RMSNormBackward (dgain).
//
// Stage "dot": a workgroup of 64×4 threads owns 64 consecutive columns (wid.x) of one chunk
// of CHUNK rows (wid.y): thread (x, y) sums rows y, y+4, … of the chunk in column x
// (coalesced across x) and the 4 partial sums meet in workgroup memory (every slot written
// before the barrier), added in a fixed order. With Partial, the chunk's sums go to
// partial[wid.y, j] (f32 [chunks, N], binding Out) and stage "reduce" (one thread per
// column) adds the chunks in order into out; without, the single chunk updates out
// directly. Deterministic either way. Grid: (ceil(N/64), chunks) for "dot", ceil(N/64)
// for "reduce".
//
// Stage "dot4" (GPUs' default where N is a multiple of 4 and C2 is absent; "dot" stays its
// simple twin): the same sums over vec4 columns, with more loads in flight. A workgroup of
// 32×8 threads owns 128 consecutive columns (32 vec4s, wid.x) of one chunk of CHUNK rows
// (wid.y): thread (x, y) sums rows y, y+8, … of the chunk (a loop of CHUNK/8 steps, which the
// compilers unroll) and the 8 partial sums meet in workgroup memory, added in order. With
// Partial the chunk's sums go to partial[wid.y, j] and stage "reduce4" adds the chunks: a
// workgroup of 16×16 threads owns 64 columns, thread (x, y) adds chunks y, y+16, … in order
// and the 16 lane sums are added in order; one "reduce4" dispatch may serve several
// reductions (Segs, below). Deterministic; the order differs from stage
// "dot"'s, so the bits may too. Grid: (ceil(N/128), chunks) for "dot4", ceil(N/64) for
// "reduce4" (as gpu.Grid1D lays it out). The chunk is chosen per shape (gpu.colDot4Chunk) so that the grid fills a GPU.
//
// Two paths at once (C2 ≥ 0, CPU adapters' BLRBackward): out2[j] += Σ_rows a·c2 (SharedA:
// the paths share a, dh = Σ dy ⊙ c_p) or c2·b (the paths share b, dg = Σ dxg_p ⊙ x), each
// element of the shared operand loaded once, and the side output is both paths' at once,
// so = a·s + c2·s2 (dx = Σ_p dxg_p ⊙ g_p); every column's sums take the same order as two
// single calls (the second with SideAccum), so the bits are theirs
// (TestBLRPathPairsBitIdentical).
// Template parameters: Stage, Chunk, Partial, SideAccum, SharedA (bools) and the binding
// index of each buffer (−1 when absent): RS, Mask, S, Out, SO, C2, S2, Out2, Uni (the
// uniform); stage "windows" (CPU adapters, below) also NW, NV4, W, Last and Two; stage
// "reduce4" only Segs and NSegs (each segment's Part, Mask and Out binding indices: SegList)
// and Uni.

struct Params {
    rows: u32,
    n: u32,
    chunks: u32,
};

{{- /* side_scales: sj = s[j] and s2j = s2[j], the side output's scales, where bound. Keys:
P (the parameters), I (the indentation). */ -}}
{{- define "side_scales"}}
{{- if ge .P.S 0}}
{{.I}}let sj = s[j];
{{- end}}
{{- if ge .P.S2 0}}
{{.I}}let s2j = s2[j];
{{- end}}
{{- end}}

{{- /* two_dots: both paths' products of element e (av in scope): bv = b[e], cv = c2[e],
acc += av·bv and acc2 += av·cv (SharedA) or cv·bv. Keys: P, W (the window's suffix of b and
c2; "" in stage "dot"). */ -}}
{{- define "two_dots"}}
            let bv = b{{.W}}[e];
            let cv = c2{{.W}}[e];
            acc = fma(av, bv, acc);
{{- if .P.SharedA}}
            acc2 = fma(av, cv, acc2);
{{- else}}
            acc2 = fma(cv, bv, acc2);
{{- end}}
{{- end}}

{{- /* vec4_sides: the bindings stages "windows" and "dot4" read 16 bytes at a time besides their
operands, each where bound: rs (f32), s, s2, mask, out, out2 (Two), so. Keys: the parameters. */ -}}
{{- define "vec4_sides"}}
{{- if ge .RS 0}}
@group(0) @binding({{.RS}}) var<storage, read> rs: array<f32>;
{{- end}}
{{- if ge .S 0}}
@group(0) @binding({{.S}}) var<storage, read> s: array<vec4<f32>>;
{{- end}}
{{- if ge .S2 0}}
@group(0) @binding({{.S2}}) var<storage, read> s2: array<vec4<f32>>;
{{- end}}
{{- if ge .Mask 0}}
@group(0) @binding({{.Mask}}) var<storage, read> mask: array<vec4<u32>>;
{{- end}}
@group(0) @binding({{.Out}}) var<storage, read_write> out: array<vec4<f32>>;
{{- if .Two}}
@group(0) @binding({{.Out2}}) var<storage, read_write> out2: array<vec4<f32>>;
{{- end}}
{{- if ge .SO 0}}
@group(0) @binding({{.SO}}) var<storage, read_write> so: array<vec4<f32>>;
{{- end}}
{{- end}}

{{- if eq .Stage "dot"}}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
{{- if ge .RS 0}}
@group(0) @binding({{.RS}}) var<storage, read> rs: array<f32>;
{{- end}}
{{- if ge .Mask 0}}
@group(0) @binding({{.Mask}}) var<storage, read> mask: array<u32>;
{{- end}}
{{- if ge .S 0}}
@group(0) @binding({{.S}}) var<storage, read> s: array<f32>;
{{- end}}
@group(0) @binding({{.Out}}) var<storage, read_write> out: array<f32>;
{{- if ge .SO 0}}
@group(0) @binding({{.SO}}) var<storage, read_write> so: array<f32>;
{{- end}}
{{- if ge .C2 0}}
@group(0) @binding({{.C2}}) var<storage, read> c2: array<f32>;
@group(0) @binding({{.Out2}}) var<storage, read_write> out2: array<f32>;
{{- if ge .S2 0}}
@group(0) @binding({{.S2}}) var<storage, read> s2: array<f32>;
{{- end}}
{{- end}}
@group(0) @binding({{.Uni}}) var<uniform> p: Params;

var<workgroup> red: array<f32, 256>;
{{- if ge .C2 0}}
var<workgroup> red2: array<f32, 256>;
{{- end}}

@compute @workgroup_size(64, 4)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = wid.x * 64u + lid.x;
    let r0 = wid.y * {{.Chunk}}u;
    let r1 = min(p.rows, r0 + {{.Chunk}}u);
    var acc = 0.0;
{{- if ge .C2 0}}
    var acc2 = 0.0;
{{- end}}
    if (j < p.n) {
{{- template "side_scales" (dict "P" . "I" "        ")}}
        for (var row = r0 + lid.y; row < r1; row += 4u) {
            let e = row * p.n + j;
            let av = a[e];
{{- if ge .C2 0}}
{{- template "two_dots" (dict "P" . "W" "")}}
{{- if ge .SO 0}}
            let t0 = av * sj;
            so[e] = t0 + cv * s2j;
{{- end}}
{{- else}}
{{- if ge .RS 0}}
            acc = fma(av * b[e], rs[row], acc);
{{- else}}
            acc = fma(av, b[e], acc);
{{- end}}
{{- if ge .SO 0}}
{{- if .SideAccum}}
            so[e] = so[e] + av * sj;
{{- else}}
            so[e] = av * sj;
{{- end}}
{{- end}}
{{- end}}
        }
    }
    red[lid.y * 64u + lid.x] = acc;
{{- if ge .C2 0}}
    red2[lid.y * 64u + lid.x] = acc2;
{{- end}}
    workgroupBarrier();
    if (lid.y == 0u && j < p.n) {
        let t = (red[lid.x] + red[64u + lid.x]) + (red[128u + lid.x] + red[192u + lid.x]);
{{- if ge .C2 0}}
        let t2 = (red2[lid.x] + red2[64u + lid.x]) + (red2[128u + lid.x] + red2[192u + lid.x]);
{{- if .Partial}}
        out2[wid.y * p.n + j] = t2;
{{- else}}
        out2[j] = out2[j] + t2;
{{- end}}
{{- end}}
{{- if .Partial}}
        out[wid.y * p.n + j] = t;
{{- else if ge .Mask 0}}
        out[j] = select(0.0, out[j] + t, mask[j] != 0u);
{{- else}}
        out[j] = out[j] + t;
{{- end}}
    }
}
{{- else if eq .Stage "windows"}}

// Stage "windows" (CPU adapters, gpu.colDotWindows): the rows in windows, NW per dispatch;
// window w's rows of a, b (and c2) are uniform views a{w}, b{w} (c2{w}) of NV4 vec4s, its
// first element base{w}; thread j owns columns 4j … 4j+3, sums each window's rows in order,
// adds the windows' sums in order and that to out (and out2), masked as in stage "dot".
// Successive dispatches add their windows in row order. The side output and row scale are
// those of stage "dot". Grid: ceil(N/32).
struct WParams {
    n4: u32,
{{- range $w := seq .NW}}
    base{{$w}}: u32,
    row{{$w}}: u32,
{{- end}}
};
{{- $k := 2}}{{if .Two}}{{$k = 3}}{{end}}
{{- range $w := seq .NW}}
@group(0) @binding({{mul $w $k}}) var<uniform> a{{$w}}: array<vec4<f32>, {{$.NV4}}>;
@group(0) @binding({{add (mul $w $k) 1}}) var<uniform> b{{$w}}: array<vec4<f32>, {{$.NV4}}>;
{{- if $.Two}}
@group(0) @binding({{add (mul $w $k) 2}}) var<uniform> c2{{$w}}: array<vec4<f32>, {{$.NV4}}>;
{{- end}}
{{- end}}
{{- template "vec4_sides" .}}
@group(0) @binding({{.Uni}}) var<uniform> p: WParams;

@compute @workgroup_size(8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    if (j >= p.n4) {
        return;
    }
{{- template "side_scales" (dict "P" . "I" "    ")}}
    var tot = vec4<f32>(0.0);
{{- if .Two}}
    var tot2 = vec4<f32>(0.0);
{{- end}}
{{- range $w := seq .NW}}
    {
        var acc = vec4<f32>(0.0);
{{- if $.Two}}
        var acc2 = vec4<f32>(0.0);
{{- end}}
        for (var t = 0u; t < {{if eq (add $w 1) $.NW}}{{$.Last}}{{else}}{{$.W}}{{end}}u; t++) {
            let e = p.base{{$w}} + t * p.n4 + j;
            let av = a{{$w}}[e];
{{- if $.Two}}
{{- template "two_dots" (dict "P" $ "W" $w)}}
{{- if ge $.SO 0}}
            let t0 = av * sj;
            so[(p.row{{$w}} + t) * p.n4 + j] = t0 + cv * s2j;
{{- end}}
{{- else}}
{{- if ge $.RS 0}}
            acc = fma(av * b{{$w}}[e], vec4<f32>(rs[p.row{{$w}} + t]), acc);
{{- else}}
            acc = fma(av, b{{$w}}[e], acc);
{{- end}}
{{- if ge $.SO 0}}
            let o = (p.row{{$w}} + t) * p.n4 + j;
{{- if $.SideAccum}}
            so[o] = so[o] + av * sj;
{{- else}}
            so[o] = av * sj;
{{- end}}
{{- end}}
{{- end}}
        }
{{- if eq $w 0}}
        tot = acc;
{{- if $.Two}}
        tot2 = acc2;
{{- end}}
{{- else}}
        tot += acc;
{{- if $.Two}}
        tot2 += acc2;
{{- end}}
{{- end}}
    }
{{- end}}
{{- if ge .Mask 0}}
    out[j] = select(vec4<f32>(0.0), out[j] + tot, mask[j] != vec4<u32>(0u));
{{- else}}
    out[j] = out[j] + tot;
{{- end}}
{{- if .Two}}
    out2[j] = out2[j] + tot2;
{{- end}}
}
{{- else if eq .Stage "dot4"}}

@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
{{- template "vec4_sides" .}}
@group(0) @binding({{.Uni}}) var<uniform> p: Params;

var<workgroup> red: array<vec4<f32>, 256>;

@compute @workgroup_size(32, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n4 = p.n / 4u;
    let j = wid.x * 32u + lid.x;
    let r0 = wid.y * {{.Chunk}}u;
    var acc = vec4<f32>(0.0);
    if (j < n4) {
{{- template "side_scales" (dict "P" . "I" "        ")}}
        for (var i = 0u; i < {{div .Chunk 8}}u; i++) {
            let row = r0 + lid.y + 8u * i;
            if (row < p.rows) {
                let e = row * n4 + j;
                let av = a[e];
{{- if ge .RS 0}}
                acc = fma(av * b[e], vec4<f32>(rs[row]), acc);
{{- else}}
                acc = fma(av, b[e], acc);
{{- end}}
{{- if ge .SO 0}}
{{- if .SideAccum}}
                so[e] = so[e] + av * sj;
{{- else}}
                so[e] = av * sj;
{{- end}}
{{- end}}
            }
        }
    }
    red[lid.y * 32u + lid.x] = acc;
    workgroupBarrier();
    if (lid.y == 0u && j < n4) {
        var t = red[lid.x];
        for (var y = 1u; y < 8u; y++) {
            t += red[y * 32u + lid.x];
        }
{{- if .Partial}}
        out[wid.y * n4 + j] = t;
{{- else if ge .Mask 0}}
        out[j] = select(vec4<f32>(0.0), out[j] + t, mask[j] != vec4<u32>(0u));
{{- else}}
        out[j] = out[j] + t;
{{- end}}
    }
}
{{- else if eq .Stage "reduce4"}}

// Stage "reduce4" adds the chunks of one or more column reductions (Segs: each its partial
// sums, optional mask and output), so that the second stages of several reductions run as
// one dispatch (gpu.colReduces): workgroup wg belongs to the last segment whose first block
// is ≤ wg, and reduces 64 of its columns exactly as a single-segment dispatch would.
struct Seg {
    n4: u32,
    chunks: u32,
    first: u32,
    pad: u32,
};

struct Segs {
    s: array<Seg, {{len .SegList}}>,
};
{{range $i, $g := .SegList}}
@group(0) @binding({{$g.Part}}) var<storage, read> part{{$i}}: array<vec4<f32>>;
{{- if ge $g.Mask 0}}
@group(0) @binding({{$g.Mask}}) var<storage, read> mask{{$i}}: array<vec4<u32>>;
{{- end}}
@group(0) @binding({{$g.Out}}) var<storage, read_write> out{{$i}}: array<vec4<f32>>;
{{- end}}
@group(0) @binding({{.Uni}}) var<uniform> u: Segs;

var<workgroup> red: array<vec4<f32>, 256>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let wg = wid.x + wid.y * nwg.x;
    var seg = 0u;
{{- range $i, $g := .SegList}}{{if $i}}
    if (wg >= u.s[{{$i}}].first) {
        seg = {{$i}}u;
    }
{{- end}}{{end}}
{{- range $i, $g := .SegList}}
    if (seg == {{$i}}u) {
        let n4 = u.s[{{$i}}].n4;
        let j = (wg - u.s[{{$i}}].first) * 16u + lid.x;
        var t = vec4<f32>(0.0);
        if (j < n4) {
            for (var c = lid.y; c < u.s[{{$i}}].chunks; c += 16u) {
                t += part{{$i}}[c * n4 + j];
            }
        }
        red[lid.y * 16u + lid.x] = t;
        workgroupBarrier();
        if (lid.y == 0u && j < n4) {
            var tot = red[lid.x];
            for (var y = 1u; y < 16u; y++) {
                tot += red[y * 16u + lid.x];
            }
{{- if ge $g.Mask 0}}
            out{{$i}}[j] = select(vec4<f32>(0.0), out{{$i}}[j] + tot, mask{{$i}}[j] != vec4<u32>(0u));
{{- else}}
            out{{$i}}[j] = out{{$i}}[j] + tot;
{{- end}}
        }
    }
{{- end}}
}
{{- else}}

@group(0) @binding(0) var<storage, read> partial: array<f32>;
{{- if ge .Mask 0}}
@group(0) @binding({{.Mask}}) var<storage, read> mask: array<u32>;
{{- end}}
@group(0) @binding({{.Out}}) var<storage, read_write> out: array<f32>;
@group(0) @binding({{.Uni}}) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let j = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (j >= p.n) {
        return;
    }
    var t = 0.0;
    for (var c = 0u; c < p.chunks; c++) {
        t += partial[c * p.n + j];
    }
{{- if ge .Mask 0}}
    out[j] = select(0.0, out[j] + t, mask[j] != 0u);
{{- else}}
    out[j] = out[j] + t;
{{- end}}
}
{{- end}}
