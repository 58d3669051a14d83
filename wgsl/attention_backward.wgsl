// AttentionBackward: the backward of causal GQA softmax attention (DESIGN.md §3,
// host.AttentionBackward) from the forward's kept log-sum-exp, FlashAttention-2 style (no
// score matrix is stored; scores are recomputed per tile):
//   s_ij = scale·q_i·k_j, p_ij = exp(s_ij − lse_i) for j ≤ i in the same window,
//   D_i = dout_i·out_i,  dp_ij = dout_i·v_j,  ds_ij = p_ij·(dp_ij − D_i),
//   dq_i = scale·Σ_j ds_ij·k_j,  dk_j = scale·Σ_i ds_ij·q_i,  dv_j = Σ_i p_ij·dout_i,
// dk and dv summed over the nh/nkv query heads h that read KV head kh = h / (nh/nkv).
// Layouts (row-major f32): q, out, dout, dq [nb·t, nh, HD]; k, v, dk, dv [nb·t, nkv, HD];
// lse, delta [nb·t, nh].
//
// Three passes, rendered from this file by the template parameter Pass (each pass declares
// only the bindings it uses); no atomics, so every sum is deterministic.
//
// Pass 0 (dq): one workgroup of BR·NS invocations per (window, query head, block of BR
// query rows): invocation (r, sl) owns query row i0 + r and the D4 vec4 groups of dims
// c4 = sl + NS·m (m < D4; dims 4·c4..4·c4+3, zero past HD), keeping scale·q_i, dout_i and
// the dq accumulator in registers. It first forms D_i (written to delta for pass 1), then
// per block of BC keys up to the block's last row: the V tile is staged in workgroup memory
// and the NS partial dots dout_i·v_j are summed through workgroup memory; the K tile replaces it, the scores are formed the same way, p
// and ds follow in registers and dq takes ds·K from the tile.
//
// Pass 1 (dk, dv of one query head): one workgroup of BR·NS invocations per (window, query
// head h, block of BR key rows of KV head h / group); invocation (r, sl) owns key row
// j0 + r (dims as above), keeping k_j, v_j and the dk, dv accumulators in registers. For
// each block of BC query rows that can see the block's keys (i ≥ j0): the (pre-scaled) Q
// tile gives the scores, the dout tile gives dp and dv += p·dout, the Q tile is staged again
// for dk += ds·(scale·q). D_i and lse_i are read from global memory. The results go to
// dkh, dvh [nb·t, nh, HD] (per query head; when nh = nkv these are dk and dv themselves).
//
// Pass 2 (group sum): dk[row, kh, c] = Σ_{g < group} dkh[row, kh·group + g, c] in order of
// g, and dv likewise; one invocation per (row, kh, c).
//
// Tiles hold rows of R4 = D4·NS vec4s (HD padded with zeros); the partial dots of a tile
// row jj are part[jj·WG + lid], so the NS partials of row r are part[jj·WG + r·NS + x].
// Template parameters: Pass, HD (head dim), NS (dim slices per row), BR (rows per
// workgroup), BC (rows per staged tile), D4 = ceil(HD/(4·NS)), WG (invocations per
// workgroup: BR·NS in passes 0 and 1).
// Grid: linear workgroup index wid.x + wid.y·nwg.x, bounds-checked.

{{- template "attn_consts" .}}
const BR: u32 = {{.BR}}u;
const BC: u32 = {{.BC}}u;
const WG: u32 = {{.WG}}u;
{{template "attn_params"}}

var<workgroup> tile: array<vec4<f32>, {{.BC}} * {{.D4}} * {{.NS}}>; // staged rows [BC, R4]
var<workgroup> part: array<f32, {{.BC}} * {{.WG}}>;                 // partial dots [BC, WG]

{{- /* load_tile: fn Fn(which, b, hd, r0, lid) stages rows r0..r0+BC−1 of window b, head hd
(of Heads) into tile: First (which = 0) or Second (which = 1), an expression in base and c4;
rows past the window are zero (every slot written: workgroup memory is not
zero-initialised). Keys: Fn, Heads, First, Second. */ -}}
{{- define "load_tile"}}
fn {{.Fn}}(which: u32, b: u32, hd: u32, r0: u32, lid: u32) {
    for (var e = lid; e < BC * R4; e += WG) {
        let rr = e / R4;
        let c4 = e - rr * R4;
        let row = r0 + rr;
        var val = vec4<f32>(0.0);
        if (row < p.t) {
            let base = ((b * p.t + row) * {{.Heads}} + hd) * HD;
            if (which == 0u) {
                val = {{.First}};
            } else {
                val = {{.Second}};
            }
        }
        tile[e] = val;
    }
}
{{- end}}

{{- if le .Pass 1}}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
{{- if eq .Pass 0}}
@group(0) @binding(3) var<storage, read> out: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<f32>;
@group(0) @binding(7) var<storage, read_write> delta: array<f32>;
{{- else}}
@group(0) @binding(3) var<storage, read> dout: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dkh: array<f32>;
@group(0) @binding(7) var<storage, read_write> dvh: array<f32>;
{{- end}}
@group(0) @binding(8) var<uniform> p: Params;
{{template "attn_row4" "q"}}
{{template "attn_row4" "k"}}
{{template "attn_row4" "v"}}
{{template "attn_row4" "dout"}}
{{- end}}

{{- if eq .Pass 0}}
{{template "attn_row4" "out"}}

// loadKV stages rows j0..j0+BC−1 of k (which = 0) or v (which = 1), KV head kh, window b.
{{- template "load_tile" (dict "Fn" "loadKV" "Heads" "p.nkv" "First" "row4_k(base, c4)" "Second" "row4_v(base, c4)")}}
{{template "attn_query_main" (dict "WG" .WG "Lanes" false "Rows" "BR" "N" "nqb" "Blk" "qb" "Lane" "r" "R0" "i0" "R" "i")}}

    var qr: array<vec4<f32>, D4>;
    var gr: array<vec4<f32>, D4>; // dout_i
    var acc: array<vec4<f32>, D4>;
    let base = ((b * p.t + i) * p.nh + h) * HD;
    var dpart = vec4<f32>(0.0);
    for (var m = 0u; m < D4; m++) {
        var x = vec4<f32>(0.0);
        var g = vec4<f32>(0.0);
        if (live) {
            let c4 = sl + NS * m;
            x = row4_q(base, c4) * p.scale;
            g = row4_dout(base, c4);
            dpart += g * row4_out(base, c4);
        }
        qr[m] = x;
        gr[m] = g;
        acc[m] = vec4<f32>(0.0);
    }
    part[lid] = (dpart.x + dpart.y) + (dpart.z + dpart.w);
    workgroupBarrier();
    var di = 0.0;
    for (var x = 0u; x < NS; x++) {
        di += part[r * NS + x];
    }
    var li = 0.0;
    if (live) {
        li = lse[(b * p.t + i) * p.nh + h];
        if (sl == 0u) {
            delta[(b * p.t + i) * p.nh + h] = di;
        }
    }

    let iend = min(i0 + BR, p.t); // keys 0..iend−1 can be attended by this block
    let nkb = (iend + BC - 1u) / BC;
    for (var kb = 0u; kb < nkb; kb++) {
        let j0 = kb * BC;
        // dp_ij = dout_i·v_j (the first barrier: D's partials, or the previous K tile, read).
{{- template "attn_stage_dots" (dict "Fresh" true "Load" "loadKV(1u, b, kh, j0, lid)" "Reg" "gr" "Row" "jj" "Rows" "BC")}}
        var dp: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
{{- template "attn_row_dot" (dict "Row" "jj" "Lane" "r")}}
            dp[jj] = s;
        }
        // The scores (dp's partials are read: the K tile may replace the V tile).
{{- template "attn_stage_dots" (dict "Fresh" false "Load" "loadKV(0u, b, kh, j0, lid)" "Reg" "qr" "Row" "jj" "Rows" "BC")}}
        var ds: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
{{- template "attn_row_dot" (dict "Row" "jj" "Lane" "r")}}
            var g = 0.0;
            if (live && j0 + jj <= i) {
                g = exp(s - li) * (dp[jj] - di);
            }
            ds[jj] = g;
        }
{{- template "attn_tile_acc" (dict "Acc" "acc" "Scale" "" "W" "ds" "Row" "jj" "Rows" "BC")}}
    }
    if (live) {
        for (var m = 0u; m < D4; m++) {
            let d = 4u * (sl + NS * m);
            let a = acc[m] * p.scale;
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    dq[base + d + x] = a[x];
                }
            }
        }
    }
}

{{- else if eq .Pass 1}}

// loadQG stages query rows i0..i0+BC−1 of scale·q (which = 0) or dout (which = 1), query
// head h, window b.
{{- template "load_tile" (dict "Fn" "loadQG" "Heads" "p.nh" "First" "row4_q(base, c4) * p.scale" "Second" "row4_dout(base, c4)")}}
{{template "attn_query_main" (dict "WG" .WG "Lanes" false "Rows" "BR" "N" "nkb" "Blk" "kb" "Lane" "r" "R0" "j0" "R" "j")}}

    var kr: array<vec4<f32>, D4>;
    var vr: array<vec4<f32>, D4>;
    var dka: array<vec4<f32>, D4>;
    var dva: array<vec4<f32>, D4>;
    let base = ((b * p.t + j) * p.nkv + kh) * HD;
    for (var m = 0u; m < D4; m++) {
        var x = vec4<f32>(0.0);
        var y = vec4<f32>(0.0);
        if (live) {
            x = row4_k(base, sl + NS * m);
            y = row4_v(base, sl + NS * m);
        }
        kr[m] = x;
        vr[m] = y;
        dka[m] = vec4<f32>(0.0);
        dva[m] = vec4<f32>(0.0);
    }
    let nqb = (p.t + BC - 1u) / BC;
    for (var qb = j0 / BC; qb < nqb; qb++) {
        let i0 = qb * BC;
        // The scores, from the (pre-scaled) Q tile.
{{- template "attn_stage_dots" (dict "Fresh" true "Load" "loadQG(0u, b, h, i0, lid)" "Reg" "kr" "Row" "ii" "Rows" "BC")}}
        var pr: array<f32, BC>;
        for (var ii = 0u; ii < BC; ii++) {
{{- template "attn_row_dot" (dict "Row" "ii" "Lane" "r")}}
            let i = i0 + ii;
            var pv = 0.0;
            if (live && j <= i && i < p.t) {
                pv = exp(s - lse[(b * p.t + i) * p.nh + h]);
            }
            pr[ii] = pv;
        }
        // dp from the dout tile (the score partials are read).
{{- template "attn_stage_dots" (dict "Fresh" false "Load" "loadQG(1u, b, h, i0, lid)" "Reg" "vr" "Row" "ii" "Rows" "BC")}}
        var ds: array<f32, BC>;
        for (var ii = 0u; ii < BC; ii++) {
{{- template "attn_row_dot" (dict "Row" "ii" "Lane" "r")}}
            let i = i0 + ii;
            var g = 0.0;
            if (live && j <= i && i < p.t) {
                g = pr[ii] * (s - delta[(b * p.t + i) * p.nh + h]);
            }
            ds[ii] = g;
        }
{{- template "attn_tile_acc" (dict "Acc" "dva" "Scale" "" "W" "pr" "Row" "ii" "Rows" "BC")}}
        workgroupBarrier(); // dout tile no longer read
        loadQG(0u, b, h, i0, lid);
        workgroupBarrier();
{{- template "attn_tile_acc" (dict "Acc" "dka" "Scale" "" "W" "ds" "Row" "ii" "Rows" "BC")}}
    }
    if (live) {
        let ob = ((b * p.t + j) * p.nh + h) * HD;
        for (var m = 0u; m < D4; m++) {
            let d = 4u * (sl + NS * m);
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    dkh[ob + d + x] = dka[m][x];
                    dvh[ob + d + x] = dva[m][x];
                }
            }
        }
    }
}

{{- else}}

@group(0) @binding(0) var<storage, read> dkh: array<f32>;
@group(0) @binding(1) var<storage, read> dvh: array<f32>;
@group(0) @binding(2) var<storage, read_write> dk: array<f32>;
@group(0) @binding(3) var<storage, read_write> dv: array<f32>;

struct SumParams {
    n: u32,     // nb·t·nkv·HD
    group: u32, // nh / nkv
};
@group(0) @binding(4) var<uniform> p: SumParams;

{{template "ew_main_rc" (dict "WG" .WG "N" "p.n" "Cols" "HD" "R" "rk" "C" "c")}}
    // rk = (row, kh)
    let src = rk * p.group * HD + c; // (row, kh·group, c)
    var sk = 0.0;
    var sv = 0.0;
    for (var g = 0u; g < p.group; g++) {
        sk += dkh[src + g * HD];
        sv += dvh[src + g * HD];
    }
    dk[i] = sk;
    dv[i] = sv;
}

{{- end}}
