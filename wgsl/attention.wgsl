// Attention: causal softmax attention with grouped-query heads (DESIGN.md §3,
// host.Attention), streaming ("online") softmax over key blocks:
//   s_ij = (q_i · k_j)·scale for j ≤ i in the same window, lse_i = log Σ_j exp(s_ij),
//   out_i = Σ_j exp(s_ij − lse_i)·v_j,   query head h reads KV head h / (nh/nkv).
// Layouts (row-major f32): q, out [nb·t, nh, HD]; k, v [nb·t, nkv, HD]; lse [nb·t, nh]
// (natural log, kept for the backward).
//
// One workgroup of BQ·NS invocations per (window, query head, block of BQ query rows), so a
// K/V tile staged in workgroup memory serves BQ rows. Invocation (qi, sl) owns query row
// i0 + qi and the D4 vec4 groups of dims c4 = sl + NS·m (m < D4; dims 4·c4..4·c4+3, zero
// past HD): it keeps its slice of q (pre-scaled) and of the output accumulator in registers.
// Per block of BK keys: stage the K tile; form partial dot products (vec4 FMAs); sum the NS
// partials of each row through workgroup memory; rescale the running max m, sum l and
// accumulator (online softmax); stage the V tile in the same memory and add the block's
// weighted values. Only key blocks up to the block's last query row are visited.
// Template parameters: HD, NS, BQ, BK, D4 = ceil(HD / (4·NS)).

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;

{{template "attn_params"}}
@group(0) @binding(5) var<uniform> p: Params;
{{template "attn_consts" .}}
const BQ: u32 = {{.BQ}}u;
const BK: u32 = {{.BK}}u;
const WG: u32 = {{.BQ}}u * {{.NS}}u;

var<workgroup> tile: array<vec4<f32>, {{.BK}} * {{.D4}} * {{.NS}}>; // K tile, then V tile
var<workgroup> part: array<f32, {{.BK}} * {{.BQ}} * {{.NS}}>;        // partial dots [BK, WG]
{{template "attn_row4" "q"}}

// loadK / loadV stage keys (values) j0..j0+BK−1 of KV head kh in window b into tile;
// entries past the window or past HD are zero (every slot is written: workgroup memory is
// not zero-initialised).
{{- define "load_tile"}}
fn {{.Fn}}(b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BK * R4; e += WG) {
        let jj = e / R4;
        let d = 4u * (e - jj * R4);
        let j = j0 + jj;
        var r = vec4<f32>(0.0);
        if (j < p.t) {
            let base = ((b * p.t + j) * p.nkv + kh) * HD;
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    r[x] = {{.Buf}}[base + d + x];
                }
            }
        }
        tile[e] = r;
    }
}
{{- end}}
{{- template "load_tile" (dict "Fn" "loadK" "Buf" "k")}}
{{template "load_tile" (dict "Fn" "loadV" "Buf" "v")}}

{{- template "attn_query_main" (dict "WG" (mul .BQ .NS) "Lanes" false "Rows" "BQ" "N" "nqb" "Blk" "qb" "Lane" "qi" "R0" "i0" "R" "i")}}

    var qr: array<vec4<f32>, D4>;
    var acc: array<vec4<f32>, D4>;
    let qbase = ((b * p.t + i) * p.nh + h) * HD;
    for (var m = 0u; m < D4; m++) {
        var x = vec4<f32>(0.0);
        if (live) {
            x = row4_q(qbase, sl + NS * m) * p.scale;
        }
        qr[m] = x;
        acc[m] = vec4<f32>(0.0);
    }
    var mx = 0.0;   // running max (valid once seen is true)
    var l = 0.0;    // running Σ exp(s − mx)
    var seen = false;

    let iend = min(i0 + BQ, p.t); // keys 0..iend−1 can be attended by this block
    let nkb = (iend + BK - 1u) / BK;
    for (var kb = 0u; kb < nkb; kb++) {
        let j0 = kb * BK;
{{- template "attn_stage_dots" (dict "Fresh" true "Load" "loadK(b, kh, j0, lid)" "Reg" "qr" "Row" "jj" "Rows" "BK")}}
        loadV(b, kh, j0, lid);
        var sc: array<f32, BK>;
        var bmax = -3.0e38;
        for (var jj = 0u; jj < BK; jj++) {
{{- template "attn_row_dot" (dict "Row" "jj" "Lane" "qi")}}
            sc[jj] = s;
            if (j0 + jj <= i) {
                bmax = max(bmax, s);
            }
        }
        // Rows whose keys in this block are all in the future skip the update (p = 0).
        let upd = live && j0 <= i;
        var mnew = mx;
        var alpha = 1.0;
        if (upd) {
            mnew = select(bmax, max(mx, bmax), seen);
            alpha = select(0.0, exp(mx - mnew), seen);
            seen = true;
        }
        var pr: array<f32, BK>;
        var psum = 0.0;
        for (var jj = 0u; jj < BK; jj++) {
            var pj = 0.0;
            if (upd && j0 + jj <= i) {
                pj = exp(sc[jj] - mnew);
            }
            pr[jj] = pj;
            psum += pj;
        }
        l = l * alpha + psum;
        mx = mnew;
        workgroupBarrier(); // V tile staged
{{- template "attn_tile_acc" (dict "Acc" "acc" "Scale" "alpha" "W" "pr" "Row" "jj" "Rows" "BK")}}
    }
    if (live) {
        let inv = 1.0 / l;
        for (var m = 0u; m < D4; m++) {
            let d = 4u * (sl + NS * m);
            let a = acc[m] * inv;
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    out[qbase + d + x] = a[x];
                }
            }
        }
        if (sl == 0u) {
            lse[(b * p.t + i) * p.nh + h] = mx + log(l);
        }
    }
}
