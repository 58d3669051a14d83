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
const D4: u32 = {{.D4}}u;
const R4: u32 = {{.D4}}u * {{.NS}}u; // vec4s per padded row
const WG: u32 = {{.BQ}}u * {{.NS}}u;

var<workgroup> tile: array<vec4<f32>, {{.BK}} * {{.D4}} * {{.NS}}>; // K tile, then V tile
var<workgroup> part: array<f32, {{.BK}} * {{.BQ}} * {{.NS}}>;        // partial dots [BK, WG]

// row4 reads dims 4·c4..4·c4+3 of the HD-vector at base, zero past HD.
fn rowQ(base: u32, c4: u32) -> vec4<f32> {
    var r = vec4<f32>(0.0);
    let d = 4u * c4;
    if (d + 3u < HD) {
        r = vec4<f32>(q[base + d], q[base + d + 1u], q[base + d + 2u], q[base + d + 3u]);
    } else {
        for (var e = 0u; e < 4u; e++) {
            if (d + e < HD) {
                r[e] = q[base + d + e];
            }
        }
    }
    return r;
}

// loadK / loadV stage keys (values) j0..j0+BK−1 of KV head kh in window b into tile;
// entries past the window or past HD are zero (every slot is written: workgroup memory is
// not zero-initialised).
fn loadK(b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BK * R4; e += WG) {
        let jj = e / R4;
        let d = 4u * (e - jj * R4);
        let j = j0 + jj;
        var r = vec4<f32>(0.0);
        if (j < p.t) {
            let base = ((b * p.t + j) * p.nkv + kh) * HD;
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    r[x] = k[base + d + x];
                }
            }
        }
        tile[e] = r;
    }
}

fn loadV(b: u32, kh: u32, j0: u32, lid: u32) {
    for (var e = lid; e < BK * R4; e += WG) {
        let jj = e / R4;
        let d = 4u * (e - jj * R4);
        let j = j0 + jj;
        var r = vec4<f32>(0.0);
        if (j < p.t) {
            let base = ((b * p.t + j) * p.nkv + kh) * HD;
            for (var x = 0u; x < 4u; x++) {
                if (d + x < HD) {
                    r[x] = v[base + d + x];
                }
            }
        }
        tile[e] = r;
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

    var qr: array<vec4<f32>, D4>;
    var acc: array<vec4<f32>, D4>;
    let qbase = ((b * p.t + i) * p.nh + h) * HD;
    for (var m = 0u; m < D4; m++) {
        var x = vec4<f32>(0.0);
        if (live) {
            x = rowQ(qbase, sl + NS * m) * p.scale;
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
        workgroupBarrier(); // the previous block's V tile is no longer read
        loadK(b, kh, j0, lid);
        workgroupBarrier();
        for (var jj = 0u; jj < BK; jj++) {
            var s4 = vec4<f32>(0.0);
            for (var m = 0u; m < D4; m++) {
                s4 += qr[m] * tile[jj * R4 + sl + NS * m];
            }
            part[jj * WG + lid] = (s4.x + s4.y) + (s4.z + s4.w);
        }
        workgroupBarrier(); // partials complete, K tile no longer read
        loadV(b, kh, j0, lid);
        var sc: array<f32, BK>;
        var bmax = -3.0e38;
        for (var jj = 0u; jj < BK; jj++) {
            var s = 0.0;
            for (var r = 0u; r < NS; r++) {
                s += part[jj * WG + qi * NS + r];
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
        for (var m = 0u; m < D4; m++) {
            var a = acc[m] * alpha;
            for (var jj = 0u; jj < BK; jj++) {
                a += pr[jj] * tile[jj * R4 + sl + NS * m];
            }
            acc[m] = a;
        }
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
