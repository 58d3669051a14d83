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

const HD: u32 = {{.HD}}u;
const NS: u32 = {{.NS}}u;
const BR: u32 = {{.BR}}u;
const BC: u32 = {{.BC}}u;
const D4: u32 = {{.D4}}u;
const R4: u32 = {{.D4}}u * {{.NS}}u; // vec4s per padded row
const WG: u32 = {{.WG}}u;

struct Params {
    nb: u32,
    t: u32,
    nh: u32,
    nkv: u32,
    scale: f32,
};

var<workgroup> tile: array<vec4<f32>, {{.BC}} * {{.D4}} * {{.NS}}>; // staged rows [BC, R4]
var<workgroup> part: array<f32, {{.BC}} * {{.WG}}>;                 // partial dots [BC, WG]

{{- define "row4"}}

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

// hsum is the sum of a vec4's lanes.
fn hsum(x: vec4<f32>) -> f32 {
    return (x.x + x.y) + (x.z + x.w);
}

{{- if eq .Pass 0}}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> out: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<f32>;
@group(0) @binding(7) var<storage, read_write> delta: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;
{{template "row4" "q"}}
{{template "row4" "k"}}
{{template "row4" "v"}}
{{template "row4" "out"}}
{{template "row4" "dout"}}

// loadKV stages rows j0..j0+BC−1 of k (which = 0) or v (which = 1), KV head kh, window b,
// into tile; rows past the window are zero (every slot written: workgroup memory is not
// zero-initialised).
fn loadKV(which: u32, b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BC * R4; e += WG) {
        let jj = e / R4;
        let c4 = e - jj * R4;
        let j = j0 + jj;
        var val = vec4<f32>(0.0);
        if (j < p.t) {
            let base = ((b * p.t + j) * p.nkv + kh) * HD;
            if (which == 0u) {
                val = row4_k(base, c4);
            } else {
                val = row4_v(base, c4);
            }
        }
        tile[e] = val;
    }
}

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    let nqb = (p.t + BR - 1u) / BR;
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
    if (wg >= p.nb * p.nh * nqb) {
        return;
    }
    let qb = wg % nqb;
    let bh = wg / nqb;
    let h = bh % p.nh;
    let b = bh / p.nh;
    let kh = h / (p.nh / p.nkv);
    let r = lid / NS;
    let sl = lid - r * NS;
    let i0 = qb * BR;
    let i = i0 + r;
    let live = i < p.t;

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
    part[lid] = hsum(dpart);
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
        workgroupBarrier(); // previous K tile and partials (or D's partials) no longer read
        loadKV(1u, b, kh, j0, lid);
        workgroupBarrier();
        for (var jj = 0u; jj < BC; jj++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += gr[m] * tile[jj * R4 + sl + NS * m];
            }
            part[jj * WG + lid] = hsum(s4);
        }
        workgroupBarrier(); // dp partials complete, V tile no longer read
        var dp: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[jj * WG + r * NS + x];
            }
            dp[jj] = s;
        }
        loadKV(0u, b, kh, j0, lid);
        workgroupBarrier(); // K tile staged, dp partials read
        for (var jj = 0u; jj < BC; jj++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += qr[m] * tile[jj * R4 + sl + NS * m];
            }
            part[jj * WG + lid] = hsum(s4);
        }
        workgroupBarrier(); // score partials complete
        var ds: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[jj * WG + r * NS + x];
            }
            var g = 0.0;
            if (live && j0 + jj <= i) {
                g = exp(s - li) * (dp[jj] - di);
            }
            ds[jj] = g;
        }
        for (var m = 0u; m < D4; m++) {
            var a = acc[m];
            for (var jj = 0u; jj < BC; jj++) {
                a += ds[jj] * tile[jj * R4 + sl + NS * m];
            }
            acc[m] = a;
        }
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

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dkh: array<f32>;
@group(0) @binding(7) var<storage, read_write> dvh: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;
{{template "row4" "q"}}
{{template "row4" "k"}}
{{template "row4" "v"}}
{{template "row4" "dout"}}

// loadQG stages query rows i0..i0+BC−1 of scale·q (which = 0) or dout (which = 1), query
// head h, window b, into tile; rows past the window are zero (every slot written).
fn loadQG(which: u32, b: u32, h: u32, i0: u32, lid: u32) {
    for (var e = lid; e < BC * R4; e += WG) {
        let ii = e / R4;
        let c4 = e - ii * R4;
        let i = i0 + ii;
        var val = vec4<f32>(0.0);
        if (i < p.t) {
            let base = ((b * p.t + i) * p.nh + h) * HD;
            if (which == 0u) {
                val = row4_q(base, c4) * p.scale;
            } else {
                val = row4_dout(base, c4);
            }
        }
        tile[e] = val;
    }
}

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    let nkb = (p.t + BR - 1u) / BR;
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
    if (wg >= p.nb * p.nh * nkb) {
        return;
    }
    let kb = wg % nkb;
    let bh = wg / nkb;
    let h = bh % p.nh;
    let b = bh / p.nh;
    let kh = h / (p.nh / p.nkv);
    let r = lid / NS;
    let sl = lid - r * NS;
    let j0 = kb * BR;
    let j = j0 + r;
    let live = j < p.t;

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
        workgroupBarrier(); // previous tile and partials no longer read
        loadQG(0u, b, h, i0, lid);
        workgroupBarrier();
        for (var ii = 0u; ii < BC; ii++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += kr[m] * tile[ii * R4 + sl + NS * m];
            }
            part[ii * WG + lid] = hsum(s4);
        }
        workgroupBarrier(); // score partials complete, Q tile no longer read
        var pr: array<f32, BC>;
        for (var ii = 0u; ii < BC; ii++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[ii * WG + r * NS + x];
            }
            let i = i0 + ii;
            var pv = 0.0;
            if (live && j <= i && i < p.t) {
                pv = exp(s - lse[(b * p.t + i) * p.nh + h]);
            }
            pr[ii] = pv;
        }
        loadQG(1u, b, h, i0, lid);
        workgroupBarrier(); // dout tile staged, score partials read
        for (var ii = 0u; ii < BC; ii++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += vr[m] * tile[ii * R4 + sl + NS * m];
            }
            part[ii * WG + lid] = hsum(s4);
        }
        workgroupBarrier(); // dp partials complete
        var ds: array<f32, BC>;
        for (var ii = 0u; ii < BC; ii++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[ii * WG + r * NS + x];
            }
            let i = i0 + ii;
            var g = 0.0;
            if (live && j <= i && i < p.t) {
                g = pr[ii] * (s - delta[(b * p.t + i) * p.nh + h]);
            }
            ds[ii] = g;
        }
        for (var m = 0u; m < D4; m++) {
            var a = dva[m];
            for (var ii = 0u; ii < BC; ii++) {
                a += pr[ii] * tile[ii * R4 + sl + NS * m];
            }
            dva[m] = a;
        }
        workgroupBarrier(); // dout tile no longer read
        loadQG(0u, b, h, i0, lid);
        workgroupBarrier();
        for (var m = 0u; m < D4; m++) {
            var a = dka[m];
            for (var ii = 0u; ii < BC; ii++) {
                a += ds[ii] * tile[ii * R4 + sl + NS * m];
            }
            dka[m] = a;
        }
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

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (e >= p.n) {
        return;
    }
    let rk = e / HD; // (row, kh)
    let c = e - rk * HD;
    let src = rk * p.group * HD + c; // (row, kh·group, c)
    var sk = 0.0;
    var sv = 0.0;
    for (var g = 0u; g < p.group; g++) {
        sk += dkh[src + g * HD];
        sv += dvh[src + g * HD];
    }
    dk[e] = sk;
    dv[e] = sv;
}

{{- end}}
