// Attention: causal softmax attention with grouped-query heads (DESIGN.md §3,
// host.Attention), streaming ("online") softmax over key blocks:
//   s_ij = (q_i · k_j)·scale for j ≤ i in the same window, lse_i = log Σ_j exp(s_ij),
//   out_i = Σ_j exp(s_ij − lse_i)·v_j,   query head h reads KV head h / (nh/nkv).
// Layouts (row-major f32): q, out [nb·t, nh, HD]; k, v [nb·t, nkv, HD]; lse [nb·t, nh]
// (natural log, kept for the backward).
//
// One workgroup of BQ·NS = 64 invocations per (window, query head, block of BQ query rows).
// Invocation (qi, sl) owns query row i0 + qi and the D = ceil(HD/NS) dims d = sl + NS·m
// (m < D): it keeps q (pre-scaled) and the output accumulator in registers. Per block of BK
// keys: the K tile is staged in workgroup memory, every invocation forms its partial dot
// products, the NS partials of a row are summed through workgroup memory, the running max m,
// sum l and accumulator are rescaled (online softmax), then the V tile replaces the K tile
// and the accumulator takes the block's weighted values. Only key blocks up to the block's
// last query row are visited (causality).
// Template parameters: HD (head dim), NS (dim slices per row), BQ (rows per workgroup),
// BK (keys per block), D = ceil(HD/NS).

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;

struct Params {
    nb: u32,
    t: u32,
    nh: u32,
    nkv: u32,
    scale: f32,
};
@group(0) @binding(5) var<uniform> p: Params;

const HD: u32 = {{.HD}}u;
const NS: u32 = {{.NS}}u;
const BQ: u32 = {{.BQ}}u;
const BK: u32 = {{.BK}}u;
const D: u32 = {{.D}}u;
const WG: u32 = BQ * NS;

var<workgroup> tile: array<f32, {{.BK}} * {{.HD}}>;          // K tile, then V tile: [BK, HD]
var<workgroup> part: array<f32, {{.BQ}} * {{.NS}} * {{.BK}}>; // partial dots [BQ, NS, BK]

// loadK / loadV stage rows j0..j0+BK−1 of k or v (KV head kh, window b) into tile; rows
// past the window are zero (every slot written: workgroup memory is not zero-initialised).
fn loadK(b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BK * HD; e += WG) {
        let jj = e / HD;
        let j = j0 + jj;
        var val = 0.0;
        if (j < p.t) {
            val = k[((b * p.t + j) * p.nkv + kh) * HD + e - jj * HD];
        }
        tile[e] = val;
    }
}

fn loadV(b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BK * HD; e += WG) {
        let jj = e / HD;
        let j = j0 + jj;
        var val = 0.0;
        if (j < p.t) {
            val = v[((b * p.t + j) * p.nkv + kh) * HD + e - jj * HD];
        }
        tile[e] = val;
    }
}

@compute @workgroup_size({{.BQ}} * {{.NS}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    let nqb = (p.t + BQ - 1u) / BQ;
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
    if (wg >= p.nb * p.nh * nqb) {
        return;
    }
    let qb = wg % nqb;
    let bh = wg / nqb;
    let h = bh % p.nh;
    let b = bh / p.nh;
    let kh = h / (p.nh / p.nkv);
    let qi = lid / NS;
    let sl = lid - qi * NS;
    let i0 = qb * BQ;
    let i = i0 + qi;
    let live = i < p.t;

    var qr: array<f32, D>;
    var acc: array<f32, D>;
    let qbase = ((b * p.t + i) * p.nh + h) * HD;
    for (var m = 0u; m < D; m++) {
        let d = sl + NS * m;
        var x = 0.0;
        if (live && d < HD) {
            x = q[qbase + d] * p.scale;
        }
        qr[m] = x;
        acc[m] = 0.0;
    }
    var mx = 0.0;   // running max (valid once seen is true)
    var l = 0.0;    // running Σ exp(s − mx)
    var seen = false;

    let iend = min(i0 + BQ, p.t); // keys 0..iend−1 can be attended by this block
    let nkb = (iend + BK - 1u) / BK;
    for (var kb = 0u; kb < nkb; kb++) {
        let j0 = kb * BK;
        workgroupBarrier(); // the previous block's V tile is no longer read
        loadK(b, kh, j0, lid);
        workgroupBarrier();
        for (var jj = 0u; jj < BK; jj++) {
            var s = 0.0;
            for (var m = 0u; m < D; m++) {
                let d = sl + NS * m;
                if (d < HD) {
                    s += qr[m] * tile[jj * HD + d];
                }
            }
            part[(qi * NS + sl) * BK + jj] = s;
        }
        workgroupBarrier(); // partials complete, K tile no longer read
        loadV(b, kh, j0, lid);
        var sc: array<f32, BK>;
        var bmax = -3.0e38;
        for (var jj = 0u; jj < BK; jj++) {
            var s = 0.0;
            for (var r = 0u; r < NS; r++) {
                s += part[(qi * NS + r) * BK + jj];
            }
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
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            var a = acc[m] * alpha;
            if (d < HD) {
                for (var jj = 0u; jj < BK; jj++) {
                    a += pr[jj] * tile[jj * HD + d];
                }
            }
            acc[m] = a;
        }
    }
    if (live) {
        let inv = 1.0 / l;
        for (var m = 0u; m < D; m++) {
            let d = sl + NS * m;
            if (d < HD) {
                out[qbase + d] = acc[m] * inv;
            }
        }
        if (sl == 0u) {
            lse[(b * p.t + i) * p.nh + h] = mx + log(l);
        }
    }
}
