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
// query rows): invocation (r, sl) owns query row i0 + r and the dims d = sl + NS·m (m < D),
// keeping scale·q_i, dout_i and the dq accumulator in registers. It first forms D_i
// (written to delta for pass 1), then per block of BC keys up to the block's last row: the
// V tile is staged in workgroup memory and the NS partial dots dout_i·v_j are summed
// through workgroup memory; the K tile replaces it, the scores are formed the same way, p
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
// Template parameters: Pass, HD (head dim), NS (dim slices per row), BR (rows per
// workgroup), BC (rows per staged tile), D = ceil(HD/NS), WG (pass 2's workgroup size).
// Grid: linear workgroup index wid.x + wid.y·nwg.x, bounds-checked.

const HD: u32 = {{.HD}}u;
const NS: u32 = {{.NS}}u;
const BR: u32 = {{.BR}}u;
const BC: u32 = {{.BC}}u;
const D: u32 = {{.D}}u;
const WG: u32 = BR * NS;

struct Params {
    nb: u32,
    t: u32,
    nh: u32,
    nkv: u32,
    scale: f32,
};

var<workgroup> tile: array<f32, {{.BC}} * {{.HD}}>;          // staged rows [BC, HD]
var<workgroup> part: array<f32, {{.BR}} * {{.NS}} * {{.BC}}>; // partial dots [BR, NS, BC]

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

// loadKV stages rows j0..j0+BC−1 of k (which = 0) or v (which = 1), KV head kh, window b,
// into tile; rows past the window are zero (every slot written: workgroup memory is not
// zero-initialised).
fn loadKV(which: u32, b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BC * HD; e += WG) {
        let jj = e / HD;
        let j = j0 + jj;
        var val = 0.0;
        if (j < p.t) {
            let src = ((b * p.t + j) * p.nkv + kh) * HD + e - jj * HD;
            if (which == 0u) {
                val = k[src];
            } else {
                val = v[src];
            }
        }
        tile[e] = val;
    }
}

// partials writes this invocation's partial dots of reg with the BC staged rows.
fn partials(reg: ptr<function, array<f32, D>>, r: u32, sl: u32) {
    for (var jj = 0u; jj < BC; jj++) {
        var s = 0.0;
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            if (d < HD) {
                s += (*reg)[m] * tile[jj * HD + d];
            }
        }
        part[(r * NS + sl) * BC + jj] = s;
    }
}

@compute @workgroup_size({{.BR}} * {{.NS}})
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

    var qr: array<f32, D>;
    var gr: array<f32, D>; // dout_i
    var acc: array<f32, D>;
    let base = ((b * p.t + i) * p.nh + h) * HD;
    var dpart = 0.0;
    for (var m = 0u; m < D; m++) {
        let d = sl + NS * m;
        var x = 0.0;
        var g = 0.0;
        if (live && d < HD) {
            x = q[base + d] * p.scale;
            g = dout[base + d];
            dpart += g * out[base + d];
        }
        qr[m] = x;
        gr[m] = g;
        acc[m] = 0.0;
    }
    part[lid] = dpart; // lid = r·NS + sl
    workgroupBarrier();
    var di = 0.0;
    for (var s = 0u; s < NS; s++) {
        di += part[r * NS + s];
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
        partials(&gr, r, sl);
        workgroupBarrier(); // dp partials complete, V tile no longer read
        var dp: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[(r * NS + x) * BC + jj];
            }
            dp[jj] = s;
        }
        loadKV(0u, b, kh, j0, lid);
        workgroupBarrier(); // K tile staged, dp partials read
        partials(&qr, r, sl);
        workgroupBarrier(); // score partials complete
        var ds: array<f32, BC>;
        for (var jj = 0u; jj < BC; jj++) {
            var s = 0.0;
            for (var x = 0u; x < NS; x++) {
                s += part[(r * NS + x) * BC + jj];
            }
            var g = 0.0;
            if (live && j0 + jj <= i) {
                g = exp(s - li) * (dp[jj] - di);
            }
            ds[jj] = g;
        }
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            var a = acc[m];
            if (d < HD) {
                for (var jj = 0u; jj < BC; jj++) {
                    a += ds[jj] * tile[jj * HD + d];
                }
            }
            acc[m] = a;
        }
    }
    if (live) {
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            if (d < HD) {
                dq[base + d] = acc[m] * p.scale;
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

// loadQG stages query rows i0..i0+BC−1 of scale·q (which = 0) or dout (which = 1), query
// head h, window b, into tile; rows past the window are zero (every slot written).
fn loadQG(which: u32, b: u32, h: u32, i0: u32, lid: u32) {
    for (var e = lid; e < BC * HD; e += WG) {
        let ii = e / HD;
        let i = i0 + ii;
        var val = 0.0;
        if (i < p.t) {
            let src = ((b * p.t + i) * p.nh + h) * HD + e - ii * HD;
            if (which == 0u) {
                val = q[src] * p.scale;
            } else {
                val = dout[src];
            }
        }
        tile[e] = val;
    }
}

// partials writes this invocation's partial dots of reg with the BC staged rows.
fn partials(reg: ptr<function, array<f32, D>>, r: u32, sl: u32) {
    for (var ii = 0u; ii < BC; ii++) {
        var s = 0.0;
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            if (d < HD) {
                s += (*reg)[m] * tile[ii * HD + d];
            }
        }
        part[(r * NS + sl) * BC + ii] = s;
    }
}

// axpy adds Σ_ii c[ii]·tile[ii] to acc over this invocation's dims.
fn axpy(acc: ptr<function, array<f32, D>>, c: ptr<function, array<f32, BC>>, sl: u32) {
    for (var m = 0u; m < D; m++) {
        let d = sl + NS * m;
        var a = (*acc)[m];
        if (d < HD) {
            for (var ii = 0u; ii < BC; ii++) {
                a += (*c)[ii] * tile[ii * HD + d];
            }
        }
        (*acc)[m] = a;
    }
}

@compute @workgroup_size({{.BR}} * {{.NS}})
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

    var kr: array<f32, D>;
    var vr: array<f32, D>;
    var dka: array<f32, D>;
    var dva: array<f32, D>;
    let base = ((b * p.t + j) * p.nkv + kh) * HD;
    for (var m = 0u; m < D; m++) {
        let d = sl + NS * m;
        var x = 0.0;
        var y = 0.0;
        if (live && d < HD) {
            x = k[base + d];
            y = v[base + d];
        }
        kr[m] = x;
        vr[m] = y;
        dka[m] = 0.0;
        dva[m] = 0.0;
    }
    let nqb = (p.t + BC - 1u) / BC;
    {
        for (var qb = j0 / BC; qb < nqb; qb++) {
            let i0 = qb * BC;
            workgroupBarrier(); // previous tile and partials no longer read
            loadQG(0u, b, h, i0, lid);
            workgroupBarrier();
            partials(&kr, r, sl);
            workgroupBarrier(); // score partials complete, Q tile no longer read
            var pr: array<f32, BC>;
            for (var ii = 0u; ii < BC; ii++) {
                var s = 0.0;
                for (var x = 0u; x < NS; x++) {
                    s += part[(r * NS + x) * BC + ii];
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
            partials(&vr, r, sl);
            workgroupBarrier(); // dp partials complete
            var ds: array<f32, BC>;
            for (var ii = 0u; ii < BC; ii++) {
                var s = 0.0;
                for (var x = 0u; x < NS; x++) {
                    s += part[(r * NS + x) * BC + ii];
                }
                let i = i0 + ii;
                var g = 0.0;
                if (live && j <= i && i < p.t) {
                    g = pr[ii] * (s - delta[(b * p.t + i) * p.nh + h]);
                }
                ds[ii] = g;
            }
            axpy(&dva, &pr, sl);
            workgroupBarrier(); // dout tile no longer read
            loadQG(0u, b, h, i0, lid);
            workgroupBarrier();
            axpy(&dka, &ds, sl);
        }
    }
    if (live) {
        let ob = ((b * p.t + j) * p.nh + h) * HD;
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            if (d < HD) {
                dkh[ob + d] = dka[m];
                dvh[ob + d] = dva[m];
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
