{{- /* Two entries (the checkpoint sweep, Ckpt, and the backward), described below, with
the same runtime sizes and DK, DV. */ -}}
struct Params {
    nb: u32,
    t: u32,
    hk: u32,
    hv: u32,
    chunk: u32, // C
    nck: u32,   // ⌈t / C⌉
};

const DK: u32 = {{.DK}}u;
const DV: u32 = {{.DV}}u;

{{- /* load_tile: fn Fn(base, rb, cb) reads the invocation's live entries of a [DK, DV]
state (row-major) from scr at base into the tile T (zero for the padding). Keys: Fn, T. */ -}}
{{- define "load_tile"}}
fn {{.Fn}}(base: u32, rb: u32, cb: u32) {
{{- range $i := seq $.P.TR}}
{{- range $jj := seq $.P.TC}}
    {{$.T}}[{{add (mul $i $.P.TC) $jj}}] = 0.0;
    if (rb + {{mul 16 $i}}u < DK && cb + {{mul 16 $jj}}u < DV) {
        {{$.T}}[{{add (mul $i $.P.TC) $jj}}] = scr[base + (rb + {{mul 16 $i}}u) * DV + cb + {{mul 16 $jj}}u];
    }
{{- end}}
{{- end}}
}
{{- end}}

{{- /* rowred_store: Dst[gi·DK + l] = Σ_m rowred[m·DKP + l], m < 16 in order (invocation l
< DK: the row sums over the 16 column blocks). Keys: Dst. */ -}}
{{- define "rowred_store"}}
            if (l < DKP) {
                var sr = 0.0;
                for (var m = 0u; m < 16u; m++) {
                    sr += rowred[m * DKP + l];
                }
                if (l < DK) {
                    {{.Dst}}[gi * DK + l] = sr;
                }
            }
{{- end}}

{{- if .Ckpt}}
// GatedDeltaRuleBackward, checkpoint sweep: the forward recurrence (as gated_delta_rule.wgsl)
// from S = 0 at each window start, writing the state before each chunk of C tokens,
// S_{ci·C−1}, to the checkpoints of the scratch (layout as the main entry below:
// ((b·hv + j)·SH + ci·DK·DV + a·DV + c), SH = (nck + C)·DK·DV + 2·C·DV). The last chunk's
// tokens are not needed. One workgroup per (window, value head, slice of COLS value
// columns); invocation c owns column c of S in private memory (every column's update needs
// only its own column, k_t, v_t[c] and the two gates), k_t is staged in workgroup memory.
// Layouts: k [nb·t, hk, DK], v [nb·t, hv, DV], g, beta [nb·t, hv], all f32.
// Template parameters: DK, DV, COLS, Ckpt (true).

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> scr: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const NSLICE: u32 = (DV + {{.COLS}}u - 1u) / {{.COLS}}u;

var<workgroup> kS: array<f32, DK>;

{{template "gdr_main" (dict "WG" .COLS "Lanes" false "N" "NSLICE" "I" "slice" "Notes" true "KH" true)}}
    let c = slice * {{.COLS}}u + lid;
    let live = c < DV;
    let C = p.chunk;
    let SZ = DK * DV;
    let hb = bj * ((p.nck + C) * SZ + 2u * C * DV);
    // The column lives in registers: every loop over a is unrolled with literal indices
    // (a dynamically indexed private array would be spilled to local memory).
    var s: array<f32, DK>;
{{- range $a := seq $.DK}}
    s[{{$a}}] = 0.0;
{{- end}}
    let row0 = b * p.t;
    let tEnd = (p.nck - 1u) * C;
    for (var tau = 0u; tau <= tEnd; tau++) {
        if (tau % C == 0u && live) {
            let at = hb + (tau / C) * SZ + c;
{{- range $a := seq $.DK}}
            scr[at + {{mul $a $.DV}}u] = s[{{$a}}];
{{- end}}
        }
        if (tau == tEnd) {
            break; // uniform: the last checkpoint is written
        }
        let row = row0 + tau;
        for (var a = lid; a < DK; a += {{.COLS}}u) {
            kS[a] = k[(row * p.hk + kh) * DK + a];
        }
        workgroupBarrier();
        if (live) {
            let gi = row * p.hv + j;
            let decay = exp(g[gi]);
            // S ← e^g·S and Sᵀk, then u = β(v − Sᵀk) and S += k⊗u (column c).
            var sk = vec4<f32>(0.0);
{{- range $a := seq $.DK}}
            s[{{$a}}] = s[{{$a}}] * decay;
            sk[{{mod $a 4}}] = fma(kS[{{$a}}], s[{{$a}}], sk[{{mod $a 4}}]);
{{- end}}
            let u = beta[gi] * (v[gi * DV + c] - ((sk.x + sk.y) + (sk.z + sk.w)));
{{- range $a := seq $.DK}}
            s[{{$a}}] = fma(kS[{{$a}}], u, s[{{$a}}]);
{{- end}}
        }
        workgroupBarrier();
    }
}
{{- else}}
// GatedDeltaRuleBackward: the backward of the gated delta rule (host.GatedDeltaRuleBackward,
// DESIGN.md §3), token by token in reverse time. Per window b and value head j (key head
// kh = j / (hv/hk)), with S_{τ−1} the state before token τ, Ŝ = e^{g}·S_{τ−1},
// w = v − Ŝᵀk, u = β·w, S_τ = Ŝ + k⊗u, o = S_τᵀq, and dS the gradient carried into S_τ
// (zero after the window's last token):
//   dS += q⊗do;  dq = S_τ·do;  du = dSᵀk;  dk = dS·u − Ŝ·(β·du);  dβ = du·w;  dv = β·du;
//   dŜ = dS − k⊗(β·du);  dg = Σ Ŝ⊙dŜ;  dS ← e^{g}·dŜ.
//
// One workgroup of 256 invocations per (window, value head) (linear index
// wid.x + wid.y·nwg.x); invocation l = 16·rb + cb owns the DK×DV state entries
// (a, c) = (rb + 16·i, cb + 16·jj), i < TR, jj < TC, of S (forward) and dS (backward) in
// private memory (vectors are padded with zeros to DKP = 16·TR and DVP = 16·TC, so the
// padding entries stay zero). Sums over a (Ŝᵀk, dSᵀk) go through colred[rb][c], sums over
// c (S_τ·do, dS·u − Ŝ·βdu) through rowred[cb][a], dg and dβ through part[l] and red2; every
// reduction adds its partials in a fixed order, so results are deterministic.
//
// For each chunk of C tokens in reverse: reload its checkpoint (the state before the chunk,
// written by the Ckpt sweep), recompute the chunk forward writing S_{τ−1}, u and w of every
// token to the chunk scratch, then run the backward steps of the chunk's tokens in reverse. Scratch (f32, per window and value
// head, stride SH = (nck + C)·DK·DV + 2·C·DV): nck checkpoints [DK, DV], C chunk states
// [DK, DV], u [C, DV], w [C, DV]. Every scratch value is read back by the invocation that
// wrote it, so program order makes it visible.
//
// Layouts (row-major f32): q, k [nb·t, hk, DK]; v, dout, dv [nb·t, hv, DV]; g, beta, dg,
// dbeta [nb·t, hv]; dq, dk [nb·t, hv, DK] (per value head; the launcher adds them over the
// heads of a key head when hv > hk). Template parameters: DK, DV (≤ 256), TR = ⌈DK/16⌉,
// TC = ⌈DV/16⌉.

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<f32>;
@group(0) @binding(7) var<storage, read_write> dkey: array<f32>;
@group(0) @binding(8) var<storage, read_write> dval: array<f32>;
@group(0) @binding(9) var<storage, read_write> dg: array<f32>;
@group(0) @binding(10) var<storage, read_write> dbeta: array<f32>;
@group(0) @binding(11) var<storage, read_write> scr: array<f32>;
@group(0) @binding(12) var<uniform> p: Params;

const TR: u32 = {{.TR}}u;
const TC: u32 = {{.TC}}u;
const DKP: u32 = 16u * TR;
const DVP: u32 = 16u * TC;
const NT: u32 = TR * TC;

var<workgroup> colred: array<f32, {{.TC}} * 256>; // [rb][c], DVP per rb
var<workgroup> rowred: array<f32, {{.TR}} * 256>; // [cb][a], DKP per cb
var<workgroup> kS: array<f32, DKP>;
var<workgroup> qS: array<f32, DKP>;
var<workgroup> vS: array<f32, DVP>; // v (forward) or do (backward)
var<workgroup> uS: array<f32, DVP>;
var<workgroup> wS: array<f32, DVP>;
var<workgroup> duS: array<f32, DVP>;
var<workgroup> part: array<vec2<f32>, 256>;
var<workgroup> red2: array<f32, 32>; // dg (0..15) and dβ (16..31) partial sums of part

// flush writes dg and dβ of row-head gi from red2 (l = 0: dg, l = 1: dβ), 16 terms in order.
fn flush(gi: u32, l: u32) {
    if (l < 2u) {
        var tot = 0.0;
        for (var m = 0u; m < 16u; m++) {
            tot += red2[16u * l + m];
        }
        if (l == 0u) {
            dg[gi] = tot;
        } else {
            dbeta[gi] = tot;
        }
    }
}

// The tile loops below are unrolled by the template with literal indices, so the tiles
// s (the state, forward recompute), ds (dS) and sv (S_{τ−1} of the current token) live in
// registers and the scratch loads of one token are independent (issued together).
var<private> s: array<f32, NT>;
var<private> ds: array<f32, NT>;
var<private> sv: array<f32, NT>;

// stageK writes k (and q when withQ) of token row, key head kh, zero-padded, into kS/qS.
fn stageK(row: u32, kh: u32, l: u32, withQ: bool) {
    let src = (row * p.hk + kh) * DK;
    if (l < DKP) {
        var kv = 0.0;
        var qv = 0.0;
        if (l < DK) {
            kv = k[src + l];
            if (withQ) {
                qv = q[src + l];
            }
        }
        kS[l] = kv;
        qS[l] = qv;
    }
}

// fwdStep advances the state tile s by token row (value head j): S ← e^g·S,
// w = v − Sᵀk, u = β·w, S ← S + k⊗u; u and w go to the chunk scratch at uwAt (u) and
// uwAt + C·DV (w), written by invocation c (l = c).
fn fwdStep(row: u32, j: u32, kh: u32, l: u32, rb: u32, cb: u32, uwAt: u32) {
    stageK(row, kh, l, false);
    if (l < DVP) {
        var vv = 0.0;
        if (l < DV) {
            vv = v[(row * p.hv + j) * DV + l];
        }
        vS[l] = vv;
    }
    // The gates are loaded before the barrier, so their latency overlaps the staging.
    let gi = row * p.hv + j;
    let decay = exp(g[gi]);
    let bt = beta[gi];
    workgroupBarrier();
{{- range $jj := seq $.TC}}
    {
        var acc = 0.0;
{{- range $i := seq $.TR}}
        s[{{add (mul $i $.TC) $jj}}] = s[{{add (mul $i $.TC) $jj}}] * decay;
        acc = fma(kS[rb + {{mul 16 $i}}u], s[{{add (mul $i $.TC) $jj}}], acc);
{{- end}}
        colred[rb * DVP + cb + {{mul 16 $jj}}u] = acc;
    }
{{- end}}
    workgroupBarrier();
    if (l < DVP) {
        var sk = 0.0;
        for (var m = 0u; m < 16u; m++) {
            sk += colred[m * DVP + l];
        }
        let wv = vS[l] - sk;
        let uv = bt * wv;
        uS[l] = uv;
        if (l < DV) {
            scr[uwAt + l] = uv;
            scr[uwAt + p.chunk * DV + l] = wv;
        }
    }
    workgroupBarrier();
{{- range $i := seq $.TR}}
    {
        let ka = kS[rb + {{mul 16 $i}}u];
{{- range $jj := seq $.TC}}
        s[{{add (mul $i $.TC) $jj}}] = fma(ka, uS[cb + {{mul 16 $jj}}u], s[{{add (mul $i $.TC) $jj}}]);
{{- end}}
    }
{{- end}}
    workgroupBarrier();
}

// saveTile writes the live entries of s to scr at base (row-major [DK, DV]).
fn saveTile(base: u32, rb: u32, cb: u32) {
{{- range $i := seq $.TR}}
{{- range $jj := seq $.TC}}
    if (rb + {{mul 16 $i}}u < DK && cb + {{mul 16 $jj}}u < DV) {
        scr[base + (rb + {{mul 16 $i}}u) * DV + cb + {{mul 16 $jj}}u] = s[{{add (mul $i $.TC) $jj}}];
    }
{{- end}}
{{- end}}
}

// loadTile reads the live entries of tile s from scr at base (zero for the padding).
{{- template "load_tile" (dict "Fn" "loadTile" "T" "s" "P" .)}}

// loadPrev reads S_{τ−1} of the current token from the chunk scratch at base into sv.
{{- template "load_tile" (dict "Fn" "loadPrev" "T" "sv" "P" .)}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) l: u32) {
    let wg = wid.x + wid.y * nwg.x;
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
    if (wg >= p.nb * p.hv) {
        return;
    }
    let j = wg % p.hv;
    let b = wg / p.hv;
    let kh = j / (p.hv / p.hk);
    let rb = l / 16u;
    let cb = l % 16u;
    let C = p.chunk;
    let SZ = DK * DV;
    let hb = wg * ((p.nck + C) * SZ + 2u * C * DV); // this head's scratch
    let statesAt = hb + p.nck * SZ;                 // chunk states
    let uwAt = statesAt + C * SZ;                   // u [C, DV], then w [C, DV]
    let row0 = b * p.t;
    var pend = false; // dg, dβ of row-head pendGi wait in red2 for their second level
    var pendGi = 0u;

    // The checkpoints were written by the sweep (the Ckpt entry) before this dispatch.
    // Chunks in reverse: recompute, then the backward steps.
{{- range $e := seq (mul $.TR $.TC)}}
    ds[{{$e}}] = 0.0;
{{- end}}
    for (var cc = 0u; cc < p.nck; cc++) {
        let ci = p.nck - 1u - cc;
        let t0 = ci * C;
        let t1 = min(p.t, t0 + C);
        loadTile(hb + ci * SZ, rb, cb);
        for (var tau = t0; tau < t1; tau++) {
            let i = tau - t0;
            saveTile(statesAt + i * SZ, rb, cb);
            fwdStep(row0 + tau, j, kh, l, rb, cb, uwAt + i * DV);
        }
        for (var tt = t0; tt < t1; tt++) {
            let tau = t1 - 1u - (tt - t0);
            let i = tau - t0;
            let row = row0 + tau;
            let gi = row * p.hv + j;
            let vb = gi * DV;
            // Stage k, q, do, u, w (u and w read back by the invocation that wrote them).
            stageK(row, kh, l, true);
            if (l < DVP) {
                var dov = 0.0;
                var uv = 0.0;
                var wv = 0.0;
                if (l < DV) {
                    dov = dout[vb + l];
                    uv = scr[uwAt + i * DV + l];
                    wv = scr[uwAt + C * DV + i * DV + l];
                }
                vS[l] = dov;
                uS[l] = uv;
                wS[l] = wv;
            }
            loadPrev(statesAt + i * SZ, rb, cb);
            let decay = exp(g[gi]);
            let bt = beta[gi];
            workgroupBarrier();
            // The previous step's dg and dβ: red2 was written before the barrier above.
            if (pend) {
                flush(pendGi, l);
            }
            // dS += q⊗do; partial du = dSᵀk over my rows, partial dq = S_τ·do over my columns.
{{- range $jj := seq $.TC}}
            var cp{{$jj}} = 0.0;
{{- end}}
{{- range $i := seq $.TR}}
            {
                let a = rb + {{mul 16 $i}}u;
                let ka = kS[a];
                let qa = qS[a];
                var rp = 0.0;
{{- range $jj := seq $.TC}}
                {
                    let c = cb + {{mul 16 $jj}}u;
                    let sn = fma(ka, uS[c], decay * sv[{{add (mul $i $.TC) $jj}}]);
                    let d = fma(qa, vS[c], ds[{{add (mul $i $.TC) $jj}}]);
                    ds[{{add (mul $i $.TC) $jj}}] = d;
                    cp{{$jj}} = fma(ka, d, cp{{$jj}});
                    rp = fma(sn, vS[c], rp);
                }
{{- end}}
                rowred[cb * DKP + a] = rp;
            }
{{- end}}
{{- range $jj := seq $.TC}}
            colred[rb * DVP + cb + {{mul 16 $jj}}u] = cp{{$jj}};
{{- end}}
            workgroupBarrier();
            var dbp = 0.0;
            if (l < DVP) {
                var du = 0.0;
                for (var m = 0u; m < 16u; m++) {
                    du += colred[m * DVP + l];
                }
                duS[l] = du;
                dbp = du * wS[l];
                if (l < DV) {
                    dval[vb + l] = bt * du;
                }
            }
{{- template "rowred_store" (dict "Dst" "dq")}}
            workgroupBarrier();
            // dk = dS·u − Ŝ·(β du); dŜ = dS − k⊗(β du); dg = Σ Ŝ⊙dŜ; dS ← e^g·dŜ.
            var dgp = 0.0;
{{- range $i := seq $.TR}}
            {
                let a = rb + {{mul 16 $i}}u;
                let ka = kS[a];
                var rp = 0.0;
{{- range $jj := seq $.TC}}
                {
                    let c = cb + {{mul 16 $jj}}u;
                    let sh = decay * sv[{{add (mul $i $.TC) $jj}}];
                    let bdu = bt * duS[c];
                    let d = ds[{{add (mul $i $.TC) $jj}}];
                    rp = fma(d, uS[c], rp);
                    rp = fma(-sh, bdu, rp);
                    let dsh = fma(-ka, bdu, d);
                    dgp = fma(sh, dsh, dgp);
                    ds[{{add (mul $i $.TC) $jj}}] = decay * dsh;
                }
{{- end}}
                rowred[cb * DKP + a] = rp;
            }
{{- end}}
            part[l] = vec2<f32>(dgp, dbp);
            workgroupBarrier();
{{- template "rowred_store" (dict "Dst" "dkey")}}
            // dg and dβ, first level: 16 consecutive partials each (l < 16: dg, 16 ≤ l < 32:
            // dβ); the second level (flush) runs after the next barrier.
            if (l < 32u) {
                let comp = l / 16u;
                let base = (l % 16u) * 16u;
                var sum = 0.0;
                for (var m = 0u; m < 16u; m++) {
                    sum += part[base + m][comp];
                }
                red2[l] = sum;
            }
            pend = true;
            pendGi = gi;
            // No barrier needed here: the next writes to rowred, part and red2 follow a barrier.
        }
        // Chunk boundary: the recompute's first stage writes kS, qS and vS only, which the
        // step above read before its last barrier; colred and uS follow a barrier.
    }
    workgroupBarrier();
    if (pend) {
        flush(pendGi, l);
    }
}
{{- end}}
