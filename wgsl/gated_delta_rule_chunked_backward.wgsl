{{- /* Sub-steps shared with the other chunked kernels: gated_delta_rule_chunk_lib.wgsl. */ -}}
// GatedDeltaRuleChunkedBackward: the backward of the chunked gated delta rule
// (gated_delta_rule_chunked.wgsl; flash-linear-attention's chunk backward:
// fla/ops/gated_delta_rule/chunk.py, wy_fast.py, fla/ops/common/chunk_delta_h.py, chunk_o.py).
// Per window b, value head j (key head kh = j / (hv/hk)) and chunk ci of L ≤ 64 tokens, with
// the forward's γ (chunk-local cumulative log-decay, γ_L its last), D_is = e^{γ_i − γ_s},
// S = h[ci] the state before the chunk, V' = U − W·S, and dH = h'[ci] the gradient of the
// state after the chunk (zero after the last):
//   dV'  = Aqkᵀ·dO + diag(e^{γ_L − γ})·K·dH                         (stage Dhu, reverse)
//   dS   = e^{γ_L}·dH + (diag(e^{γ})·Q)ᵀ·dO − Wᵀ·dV'  = dH of the previous chunk
//   dq   = diag(e^{γ})·dO·Sᵀ + dM·K,  dM = D ⊙ tril(dO·V'ᵀ)          (stages State, QK)
//   dk  += diag(e^{γ_L − γ})·V'·dHᵀ + dMᵀ·Q,  dW = −dV'·Sᵀ,  dU = dV'
//   dR   = (I + A)⁻ᵀ·[dW dU]  (backward substitution; R = [diag(β e^{γ}) K, diag(β) V])  (Wy)
//   F    = −D ⊙ tril(dR·[W U]ᵀ, −1),  G = F·K,  H = Fᵀ·diag(β)·K                     (F)
//   dk  += β e^{γ}·dK̂ + β·G + H;  dv = β·dV̂;  dβ = v·dV̂ + e^{γ} k·dK̂ + k·G          (Final)
//   dγ_i = q·dq − k·dk_{state+qk} + β e^{γ} k·dK̂ + β k·G − k·H  (+ ⟨h[ci+1], dH⟩ at i = L − 1)
//   dg_s = Σ_{i ≥ s} dγ_i within the chunk.
// Scratch rows sr = (b·hv + j)·t + τ; token rows row = b·t + τ. dqv, dkv are per value head
// [nb·t, hv, DK]. Template parameters: DK, DV (multiples of 4), CS (Dhu), Stage.

{{template "gdrc_params" (dict "U" 0 "Note" false "P" .)}}
const V4: u32 = DV / 4u;
const WG: u32 = 256u;

fn dots(a: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(a, b0), dot(a, b1), dot(a, b2), dot(a, b3));
}

{{- if eq .Stage "dhu"}}
// Stage Dhu: one workgroup per (window, value head, slice of CS value columns), the chunks in
// reverse with the slice of dS [DK, CS] in workgroup memory (as the forward's inter kernel).
// Writes dh [nb·hv, nck, DK, DV] (the gradient of the state after each chunk) and
// dvp [sr, DV] (dV').
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> aqk: array<f32>;
@group(0) @binding(4) var<storage, read> gc: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> dh: array<f32>;
@group(0) @binding(7) var<storage, read_write> dvp: array<vec4<f32>>;
@group(0) @binding(8) var<uniform> p: Params;

const CS: u32 = {{.CS}}u;
const C4: u32 = CS / 4u;
const NS: u32 = (DV + CS - 1u) / CS;

var<workgroup> sw: array<vec4<f32>, {{.DK}} * {{.CS}} / 4>;
var<workgroup> vp: array<vec4<f32>, 64 * {{.CS}} / 4>;
var<workgroup> gq: array<f32, 64>;
var<workgroup> gk: array<f32, 64>;

{{template "gdrc_main" (dict "WG" 256 "Slices" true "Notes" false)}}
    let busy = lid < 32u * C4;
    let i0 = lid / C4;
    let i1 = i0 + 32u;
    let c4 = lid % C4;
    let cb = slice * CS + 4u * c4;
    let live = cb < DV; // DV is a multiple of 4: the four columns are all live or all not
    for (var cc = 0u; cc < p.nck; cc++) {
        let ci = p.nck - 1u - cc;
{{- template "gdrc_chunk" (dict "I" "    " "Let" true "Notes" false)}}
        workgroupBarrier(); // the previous chunk's phase c is done
{{- template "gdrc_gates"}}
{{- template "gdrc_save_s" (dict "I" "    " "Dst" "dh[((bj * p.nck + ci) * DK + d) * DV + c]")}}
        workgroupBarrier();
        if (busy) {
            // Phase a: dV'_i = e^{γ_L − γ_i}·k_i·dS + Σ_{s ≥ i} Aqk[s, i]·dO_s.
            let r0 = min(i0, L - 1u);
            let r1 = min(i1, L - 1u);
            let kb0 = ((row0 + r0) * p.hk + kh) * D4;
            let kb1 = ((row0 + r1) * p.hk + kh) * D4;
            var x0 = vec4<f32>(0.0);
            var x1 = vec4<f32>(0.0);
            for (var d = 0u; d < D4; d++) {
{{- template "gdrc_s4"}}
                let k0 = k[kb0 + d];
                let k1 = k[kb1 + d];
                x0 += k0.x * s0 + k0.y * s1 + k0.z * s2 + k0.w * s3;
                x1 += k1.x * s0 + k1.y * s1 + k1.z * s2 + k1.w * s3;
            }
            x0 *= gk[i0];
            x1 *= gk[i1];
            if (live) {
                for (var s = i0; s < L; s++) {
                    x0 += aqk[(sr0 + s) * C + i0] * dout[((row0 + s) * p.hv + j) * V4 + cb / 4u];
                }
                for (var s = i1; s < L; s++) {
                    x1 += aqk[(sr0 + s) * C + i1] * dout[((row0 + s) * p.hv + j) * V4 + cb / 4u];
                }
                if (i0 < L) {
                    dvp[(sr0 + i0) * V4 + cb / 4u] = x0;
                }
                if (i1 < L) {
                    dvp[(sr0 + i1) * V4 + cb / 4u] = x1;
                }
            }
            vp[i0 * C4 + c4] = x0;
            vp[i1 * C4 + c4] = x1;
        }
        workgroupBarrier(); // dV' complete; every read of dS done
        // Phase c: dS ← e^{γ_L}·dS + Σ_i e^{γ_i} q_i ⊗ dO_i − w_i ⊗ dV'_i.
        let gl = gq[L - 1u];
        for (var e = lid; e < D4 * C4; e += WG) {
            let d = e / C4;
            let cl = e % C4;
            let col = slice * CS + 4u * cl;
            var a0 = gl * sw[(4u * d) * C4 + cl];
            var a1 = gl * sw[(4u * d + 1u) * C4 + cl];
            var a2 = gl * sw[(4u * d + 2u) * C4 + cl];
            var a3 = gl * sw[(4u * d + 3u) * C4 + cl];
            if (col < DV) {
                for (var i = 0u; i < L; i++) {
                    let qv = q[((row0 + i) * p.hk + kh) * D4 + d] * gq[i];
                    let wv = w[(sr0 + i) * D4 + d];
                    let dov = dout[((row0 + i) * p.hv + j) * V4 + col / 4u];
                    let x = vp[i * C4 + cl];
                    a0 += qv.x * dov - wv.x * x;
                    a1 += qv.y * dov - wv.y * x;
                    a2 += qv.z * dov - wv.z * x;
                    a3 += qv.w * dov - wv.w * x;
                }
            }
            sw[(4u * d) * C4 + cl] = a0;
            sw[(4u * d + 1u) * C4 + cl] = a1;
            sw[(4u * d + 2u) * C4 + cl] = a2;
            sw[(4u * d + 3u) * C4 + cl] = a3;
        }
    }
}
{{- else if eq .Stage "state"}}
// Stage State, tiled: one workgroup per (window, value head, chunk):
// dqv_i = e^{γ_i}·S·dO_i, dkv_i = e^{γ_L − γ_i}·dH·V'_i, dwt_i = −S·dV'_i (S = h[ci],
// dH = dh[ci]), and dgl[bj·nck + ci] = ⟨h[ci+1], dH⟩ (0 for the last chunk). The value
// dimension is contracted in slices of BC columns staged transposed in workgroup memory
// (S, dH as [c, d]; dO, V', dV' as [c, row]); invocation (rg, dg) = (lid / 32, lid mod 32)
// computes rows 8rg..8rg+7 and keys 4dg'..4dg'+3 (dg' = dg + 32n) of the three products.
// Template parameters (besides DK, DV): BC (dividing DV, BC·(2·DK + 192) ≤ 7168).
@group(0) @binding(0) var<storage, read> h: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> dh: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vnew: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> dvp: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> gc: array<f32>;
@group(0) @binding(6) var<storage, read_write> dqv: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> dkv: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> dwt: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> dgl: array<f32>;
@group(0) @binding(10) var<uniform> p: Params;

const BC: u32 = {{.BC}}u;
const BC4: u32 = BC / 4u;
const ET: u32 = BC * D4;          // dHᵀ's offset in st (vec4s)
const VT: u32 = 16u * BC;         // V'ᵀ's offset in rt (vec4s)
const DT: u32 = 32u * BC;         // dV'ᵀ's offset in rt (vec4s)

var<workgroup> st: array<vec4<f32>, {{mul 2 (mul .BC (div .DK 4))}}>; // Sᵀ, dHᵀ slices [c, d]
var<workgroup> rt: array<vec4<f32>, {{mul 48 .BC}}>;                 // dOᵀ, V'ᵀ, dV'ᵀ slices [c, row]
var<workgroup> red: array<f32, 256>;

{{template "gdrc_main" (dict "WG" 256 "Slices" false "Notes" false)}}
{{- template "gdrc_chunk" (dict "I" "" "Let" true "Notes" false)}}
    let gl = gc[sr0 + L - 1u];
    let hb = (bj * p.nck + ci) * DK * V4; // vec4 index of h[ci] and dh[ci]
    let rg = lid / 32u;
    for (var dg0 = 0u; dg0 < D4; dg0 += 32u) {
        let dg = dg0 + lid % 32u;
        let dgc = min(dg, D4 - 1u);
{{- range $r := seq 8}}
        var xa{{$r}} = vec4<f32>(0.0);
        var xb{{$r}} = vec4<f32>(0.0);
        var xc{{$r}} = vec4<f32>(0.0);
{{- end}}
        for (var c0 = 0u; c0 < V4; c0 += BC4) {
            workgroupBarrier(); // the previous slices consumed
            for (var e = lid; e < DK * BC4; e += WG) {
                let d = e / BC4;
                let cq = e % BC4;
                let x = h[hb + d * V4 + c0 + cq];
                let y = dh[hb + d * V4 + c0 + cq];
                for (var m = 0u; m < 4u; m++) {
                    let f = (4u * cq + m) * DK + d;
                    st[f >> 2u][f & 3u] = x[m];
                    st[ET + (f >> 2u)][f & 3u] = y[m];
                }
            }
            for (var e = lid; e < 64u * BC4; e += WG) {
                let i = e / BC4;
                let cq = e % BC4;
                let r = min(i, L - 1u);
                var x = vec4<f32>(0.0);
                var y = vec4<f32>(0.0);
                var z = vec4<f32>(0.0);
                if (i < L) {
                    x = dout[((row0 + r) * p.hv + j) * V4 + c0 + cq];
                    y = vnew[(sr0 + r) * V4 + c0 + cq];
                    z = dvp[(sr0 + r) * V4 + c0 + cq];
                }
                for (var m = 0u; m < 4u; m++) {
                    let f = (4u * cq + m) * 64u + i;
                    rt[f >> 2u][f & 3u] = x[m];
                    rt[VT + (f >> 2u)][f & 3u] = y[m];
                    rt[DT + (f >> 2u)][f & 3u] = z[m];
                }
            }
            workgroupBarrier(); // slices staged
{{- range $c := seq .BC}}
            {
                let s4 = st[{{$c}}u * D4 + dgc];
                let e4 = st[ET + {{$c}}u * D4 + dgc];
{{- range $h := seq 2}}
                let o{{$h}} = rt[{{mul $c 16}}u + 2u * rg + {{$h}}u];
                let v{{$h}} = rt[VT + {{mul $c 16}}u + 2u * rg + {{$h}}u];
                let w{{$h}} = rt[DT + {{mul $c 16}}u + 2u * rg + {{$h}}u];
{{- end}}
{{- range $r := seq 8}}{{$h := div $r 4}}{{$x := index "xyzw" (mod $r 4) | printf "%c"}}
                xa{{$r}} = fma(vec4<f32>(o{{$h}}.{{$x}}), s4, xa{{$r}});
                xb{{$r}} = fma(vec4<f32>(v{{$h}}.{{$x}}), e4, xb{{$r}});
                xc{{$r}} = fma(vec4<f32>(w{{$h}}.{{$x}}), s4, xc{{$r}});
{{- end}}
            }
{{- end}}
        }
{{- template "gdrc_rows8" .}}
    }
    var part = 0.0;
    if (ci + 1u < p.nck) {
        for (var e = lid; e < DK * V4; e += WG) {
            part += dot(h[hb + DK * V4 + e], dh[hb + e]);
        }
    }
    red[lid] = part;
    workgroupBarrier();
    if (lid == 0u) {
        var s = 0.0;
        for (var m = 0u; m < WG; m++) {
            s += red[m];
        }
        dgl[bj * p.nck + ci] = s;
    }
}
{{- else if or (eq .Stage "qk") (eq .Stage "f")}}
{{- if eq .Stage "qk"}}
// Stage QK, tiled: one workgroup per (window, value head, chunk): dM = D ⊙ tril(dO·V'ᵀ) in
// workgroup memory (mw), then dqv += dM·K and dkv += dMᵀ·Q.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vnew: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> gc: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqv: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> dkv: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> p: Params;

const N4: u32 = V4; // the contraction of the first product, in vec4s

fn loadX(r: u32, c: u32) -> vec4<f32> {
    return dout[((row0 + r) * p.hv + hj) * V4 + c];
}

fn loadY(r: u32, c: u32) -> vec4<f32> {
    return vnew[(sr0 + r) * V4 + c];
}

fn loadA(s: u32, g: u32) -> vec4<f32> {
    return k[((row0 + s) * p.hk + kh) * D4 + g];
}

fn loadB(s: u32, g: u32) -> vec4<f32> {
    return q[((row0 + s) * p.hk + kh) * D4 + g];
}
{{- else}}
// Stage F, tiled: one workgroup per (window, value head, chunk): F = −D ⊙ tril(dR·[W U]ᵀ, −1)
// in workgroup memory (mw), then G = F·K and H = Fᵀ·diag(β)·K into wyb[sr, DK + DV ..)
// (G, then H).
@group(0) @binding(0) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> u: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> gc: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> wyb: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;

const W4: u32 = (3u * DK + DV) / 4u; // wyb row stride in vec4s
const N4: u32 = D4 + V4;             // the contraction of the first product, in vec4s

fn loadX(r: u32, c: u32) -> vec4<f32> {
    return wyb[(sr0 + r) * W4 + c];
}

fn loadY(r: u32, c: u32) -> vec4<f32> {
    if (c < D4) {
        return w[(sr0 + r) * D4 + c];
    }
    return u[(sr0 + r) * V4 + c - D4];
}

fn loadA(s: u32, g: u32) -> vec4<f32> {
    return k[((row0 + s) * p.hk + kh) * D4 + g];
}

fn loadB(s: u32, g: u32) -> vec4<f32> {
    return bw[s] * k[((row0 + s) * p.hk + kh) * D4 + g];
}
{{- end}}
// The first product M = X·Yᵀ (rows of X and Y over N4 vec4s) is staged in BC-column slices
// transposed into tw; invocation (ti, tj) computes the 4×4 block (4ti.., 4tj..) when
// tj ≤ ti. The second pair, P = M·A and Q = Mᵀ·B (A, B rows of DK), stages SR-row slices of
// A and B for 32 key groups at a time; invocation (rg, dg) = (lid / 32, lid mod 32) computes
// rows 8rg..8rg+7 and keys 4dg'..4dg'+3 (dg' = dg + 32n).
const BC4: u32 = 4u;
const YO: u32 = 256u; // Y's offset in tw (vec4s): BC4·4·64/4
const SR: u32 = 8u;

var<private> row0: u32;
var<private> sr0: u32;
var<private> kh: u32;
var<private> hj: u32;

var<workgroup> mw: array<f32, 4096>;
var<workgroup> tw: array<vec4<f32>, 512>;
var<workgroup> gcw: array<f32, 64>;
var<workgroup> bw: array<f32, 64>;

{{template "gdrc_main" (dict "WG" 256 "Slices" false "Notes" false)}}
    hj = j;
    kh = j / (p.hv / p.hk);
{{- template "gdrc_chunk" (dict "I" "" "Let" false "Notes" false)}}
    if (lid < C) {
        gcw[lid] = gc[sr0 + min(lid, L - 1u)];
{{- if eq .Stage "f"}}
        bw[lid] = select(0.0, beta[(row0 + min(lid, L - 1u)) * p.hv + j], lid < L);
{{- else}}
        bw[lid] = 0.0;
{{- end}}
    }
    let ti = lid / 16u;
    let tj = lid % 16u;
    let act = tj <= ti && 4u * ti < L;
{{- range $m := seq 4}}
    var m{{$m}} = vec4<f32>(0.0);
{{- end}}
    for (var c0 = 0u; c0 < N4; c0 += BC4) {
        workgroupBarrier(); // the previous slice consumed (at c0 = 0: gates staged)
        for (var e = lid; e < 64u * BC4; e += WG) {
            let r = e / BC4;
            let cq = e % BC4;
            let rr = min(r, L - 1u);
            var x = vec4<f32>(0.0);
            var y = vec4<f32>(0.0);
            if (c0 + cq < N4) {
                x = loadX(rr, c0 + cq);
                y = loadY(rr, c0 + cq);
            }
            for (var m = 0u; m < 4u; m++) {
                let f = (4u * cq + m) * C + r;
                tw[f >> 2u][f & 3u] = x[m];
                tw[YO + (f >> 2u)][f & 3u] = y[m];
            }
        }
        workgroupBarrier(); // slice staged
        if (act) {
{{- range $c := seq 16}}
            {
                let xi = tw[{{mul $c 16}}u + ti];
                let yj = tw[YO + {{mul $c 16}}u + tj];
{{- range $m := seq 4}}
                m{{$m}} = fma(vec4<f32>(xi.{{index "xyzw" $m | printf "%c"}}), yj, m{{$m}});
{{- end}}
            }
{{- end}}
        }
    }
    let acc = array<vec4<f32>, 4>(m0, m1, m2, m3);
    for (var a = 0u; a < 4u; a++) {
        let i = 4u * ti + a;
        for (var m = 0u; m < 4u; m++) {
            let s = 4u * tj + m;
{{- if eq .Stage "qk"}}
            let on = i < L && s <= i;
            mw[i * C + s] = select(0.0, exp(min(gcw[i] - gcw[s], 0.0)) * acc[a][m], on);
{{- else}}
            let on = i < L && s < i;
            mw[i * C + s] = select(0.0, -exp(min(gcw[i] - gcw[s], 0.0)) * acc[a][m], on);
{{- end}}
        }
    }
    let rg = lid / 32u;
    for (var dg0 = 0u; dg0 < D4; dg0 += 32u) {
        let dg = dg0 + lid % 32u;
{{- range $r := seq 8}}
        var xp{{$r}} = vec4<f32>(0.0);
        var xq{{$r}} = vec4<f32>(0.0);
{{- end}}
        for (var s0 = 0u; s0 < L; s0 += SR) {
            workgroupBarrier(); // the previous slice consumed (at s0 = 0: M complete)
            for (var e = lid; e < 64u * SR; e += WG) {
                let ab = e / (32u * SR); // 0: A, 1: B
                let ss = (e / 32u) % SR;
                let g = dg0 + e % 32u;
                let s = s0 + ss;
                var x = vec4<f32>(0.0);
                if (s < L && g < D4) {
                    if (ab == 0u) {
                        x = loadA(s, g);
                    } else {
                        x = loadB(s, g);
                    }
                }
                tw[e] = x;
            }
            workgroupBarrier(); // slice staged
{{- range $ss := seq 8}}
            {
                let s = s0 + {{$ss}}u;
                let av = tw[{{mul $ss 32}}u + lid % 32u];
                let bv = tw[{{add 256 (mul $ss 32)}}u + lid % 32u];
{{- range $r := seq 8}}
                xp{{$r}} = fma(vec4<f32>(mw[(8u * rg + {{$r}}u) * C + s]), av, xp{{$r}});
                xq{{$r}} = fma(vec4<f32>(mw[s * C + 8u * rg + {{$r}}u]), bv, xq{{$r}});
{{- end}}
            }
{{- end}}
        }
{{- template "gdrc_rows8" .}}
    }
}
{{- else if eq .Stage "wy"}}
// Stage Wy: one workgroup per (window, value head, chunk): A = tril(diag(β)(K·Kᵀ ⊙ D), −1)
// recomputed in workgroup memory, then (I + A)ᵀ·dR = [dwt dvp] solved by backward
// substitution, one column per invocation; dR goes to wyb[sr, 0 .. DK + DV).
@group(0) @binding(0) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> gc: array<f32>;
@group(0) @binding(2) var<storage, read> beta: array<f32>;
@group(0) @binding(3) var<storage, read> dwt: array<f32>;
@group(0) @binding(4) var<storage, read> dvp: array<f32>;
@group(0) @binding(5) var<storage, read_write> wyb: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const WS: u32 = 3u * DK + DV; // wyb row stride: dR (DK + DV), G (DK), H (DK)

var<workgroup> aw: array<f32, 4096>;
var<workgroup> gcw: array<f32, 64>;
var<workgroup> bw: array<f32, 64>;

{{template "gdrc_main" (dict "WG" 256 "Slices" false "Notes" false)}}
    let kh = j / (p.hv / p.hk);
{{- template "gdrc_chunk" (dict "I" "" "Let" true "Notes" false)}}
    if (lid < C) {
        gcw[lid] = gc[sr0 + min(lid, L - 1u)];
        bw[lid] = select(0.0, beta[(row0 + min(lid, L - 1u)) * p.hv + j], lid < L);
    }
    workgroupBarrier();
    let ti = lid / 16u;
    let tj = lid % 16u;
    var acc: array<vec4<f32>, 4>;
    for (var a = 0u; a < 4u; a++) {
        acc[a] = vec4<f32>(0.0);
    }
    if (tj <= ti && 4u * ti < L) {
        var ib: array<u32, 4>;
        var sb: array<u32, 4>;
        for (var a = 0u; a < 4u; a++) {
            ib[a] = ((row0 + min(4u * ti + a, L - 1u)) * p.hk + kh) * D4;
            sb[a] = ((row0 + min(4u * tj + a, L - 1u)) * p.hk + kh) * D4;
        }
        for (var d = 0u; d < D4; d++) {
            let b0 = k[sb[0] + d];
            let b1 = k[sb[1] + d];
            let b2 = k[sb[2] + d];
            let b3 = k[sb[3] + d];
            for (var a = 0u; a < 4u; a++) {
                acc[a] += dots(k[ib[a] + d], b0, b1, b2, b3);
            }
        }
    }
    for (var a = 0u; a < 4u; a++) {
        let i = 4u * ti + a;
        for (var m = 0u; m < 4u; m++) {
            let s = 4u * tj + m;
            let on = i < L && s < i;
            aw[i * C + s] = select(0.0, bw[i] * exp(min(gcw[i] - gcw[s], 0.0)) * acc[a][m], on);
        }
    }
    workgroupBarrier();
    // dR_i = dX_i − Σ_{s > i} A[s, i]·dR_s, i from L − 1 down.
    for (var col = lid; col < DK + DV; col += WG) {
        var x: array<f32, 64>;
        for (var ii = 0u; ii < L; ii++) {
            let i = L - 1u - ii;
            var rhs: f32;
            if (col < DK) {
                rhs = dwt[(sr0 + i) * DK + col];
            } else {
                rhs = dvp[(sr0 + i) * DV + col - DK];
            }
            var a0 = 0.0;
            var a1 = 0.0;
            var s = i + 1u;
            for (; s + 1u < L; s += 2u) {
                a0 = fma(aw[s * C + i], x[s], a0);
                a1 = fma(aw[(s + 1u) * C + i], x[s + 1u], a1);
            }
            if (s < L) {
                a0 = fma(aw[s * C + i], x[s], a0);
            }
            let xi = rhs - (a0 + a1);
            x[i] = xi;
            wyb[(sr0 + i) * WS + col] = xi;
        }
    }
}
{{- else if eq .Stage "final"}}
// Stage Final, coalesced: one workgroup of 64·LPR invocations per (window, value head,
// chunk), LPR (8, or 4 where the device allows fewer than 512 invocations) per token row
// (lane l takes the vec4s l, l + LPR, … of the row, so a row's reads are contiguous): dk (per value head), dv, then the row's dot products reduced in workgroup
// memory: dβ, dγ, and dg_s = Σ_{i ≥ s} dγ_i in order (0 where g_s < GMIN, the forward's
// floor of g).
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> gc: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<f32>;
@group(0) @binding(6) var<storage, read> dqv: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> wyb: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> dgl: array<f32>;
@group(0) @binding(9) var<storage, read_write> dkv: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read_write> dval: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read_write> dg: array<f32>;
@group(0) @binding(12) var<storage, read_write> dbeta: array<f32>;
@group(0) @binding(13) var<uniform> p: Params;

const W4: u32 = (3u * DK + DV) / 4u;

const LPR: u32 = {{.LPR}}u;

var<workgroup> red: array<vec4<f32>, {{mul 128 .LPR}}>; // per invocation: (q·dq, k·dk, k·dK̂, k·G), (k·H, v·dV̂, 0, 0)
var<workgroup> dgam: array<f32, 64>;

{{template "gdrc_main" (dict "WG" (mul 64 .LPR) "Slices" false "Notes" false)}}
    let kh = j / (p.hv / p.hk);
    let t0 = ci * C;
    let L = min(C, p.t - t0);
    let i = lid / LPR;
    let l = lid % LPR;
    var r0 = vec4<f32>(0.0);
    var r1 = vec4<f32>(0.0);
    let row = b * p.t + t0 + i;
    let sr = bj * p.t + t0 + i;
    var e = 0.0;
    var bt = 0.0;
    if (i < L) {
        e = exp(gc[sr]);
        bt = beta[row * p.hv + j];
        let qb = (row * p.hk + kh) * D4;
        let vb = (row * p.hv + j) * D4;
        let wb = sr * W4;
        var qdq = vec4<f32>(0.0);
        var kdk = vec4<f32>(0.0);
        var kdkh = vec4<f32>(0.0);
        var kg = vec4<f32>(0.0);
        var khh = vec4<f32>(0.0);
        for (var d = l; d < D4; d += LPR) {
            let kv = k[qb + d];
            let dk0 = dkv[vb + d];
            let dkh = wyb[wb + d];
            let gg = wyb[wb + D4 + V4 + d];
            let hh = wyb[wb + 2u * D4 + V4 + d];
            qdq += q[qb + d] * dqv[vb + d];
            kdk += kv * dk0;
            kdkh += kv * dkh;
            kg += kv * gg;
            khh += kv * hh;
            dkv[vb + d] = dk0 + (bt * e) * dkh + bt * gg + hh;
        }
        var vdv = vec4<f32>(0.0);
        let ob = (row * p.hv + j) * V4;
        for (var c = l; c < V4; c += LPR) {
            let dvh = wyb[wb + D4 + c];
            vdv += v[ob + c] * dvh;
            dval[ob + c] = bt * dvh;
        }
        let s4 = vec4<f32>(1.0);
        r0 = vec4<f32>(dot(qdq, s4), dot(kdk, s4), dot(kdkh, s4), dot(kg, s4));
        r1 = vec4<f32>(dot(khh, s4), dot(vdv, s4), 0.0, 0.0);
    }
    red[2u * lid] = r0;
    red[2u * lid + 1u] = r1;
    workgroupBarrier();
    if (l == 0u) {
        var dga = 0.0;
        if (i < L) {
            var a0 = vec4<f32>(0.0);
            var a1 = vec4<f32>(0.0);
            for (var m = 0u; m < LPR; m++) {
                a0 += red[2u * (lid + m)];
                a1 += red[2u * (lid + m) + 1u];
            }
            let sk = a0.z;
            let sg = a0.w;
            dbeta[row * p.hv + j] = a1.y + e * sk + sg;
            dga = a0.x - a0.y + bt * e * sk + bt * sg - a1.x;
            if (i == L - 1u) {
                dga += dgl[bj * p.nck + ci];
            }
        }
        dgam[i] = dga;
    }
    workgroupBarrier();
    if (l == 0u && i < L) {
        var s = 0.0;
        for (var m = i; m < L; m++) {
            s += dgam[m];
        }
        // Where g < GMIN the forward used GMIN, whose derivative is 0 there; the exact
        // gradient e^g·⟨…⟩ is 0 too (as the token-by-token backward's Σ Ŝ⊙dŜ with Ŝ = 0).
        let gi = (b * p.t + t0 + i) * p.hv + j;
        dg[gi] = select(s, 0.0, g[gi] < GMIN);
    }
}
{{- end}}
{{- /* gdrc_rows8's hook: the stores of row i (register r) of the State, QK and F stages. */}}
{{- define "gdrc_row_store"}}
{{- if eq .P.Stage "state"}}
                    let x = gc[sr0 + i];
                    dqv[((row0 + i) * p.hv + j) * D4 + dg] = exp(x) * xa{{.r}};
                    dkv[((row0 + i) * p.hv + j) * D4 + dg] = exp(gl - x) * xb{{.r}};
                    dwt[(sr0 + i) * D4 + dg] = -xc{{.r}};
{{- else if eq .P.Stage "qk"}}
                    let at = ((row0 + i) * p.hv + j) * D4 + dg;
                    dqv[at] += xp{{.r}};
                    dkv[at] += xq{{.r}};
{{- else}}
                    wyb[(sr0 + i) * W4 + D4 + V4 + dg] = xp{{.r}};
                    wyb[(sr0 + i) * W4 + 2u * D4 + V4 + dg] = xq{{.r}};
{{- end}}
{{- end}}
