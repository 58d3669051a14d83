{{- /* Sub-steps shared with the other chunked kernels: gated_delta_rule_chunk_lib.wgsl. */ -}}
{{- if .Intra}}
// GatedDeltaRuleChunked, intra-chunk part (the WY/UT representation of flash-linear-attention,
// fla/ops/gated_delta_rule/wy_fast.py and chunk.py; DESIGN.md §3). One workgroup of 256
// invocations per (window b, value head j, chunk ci of C = 64 tokens; the last one has
// L = t − 64·ci ≤ 64 tokens), key head kh = j / (hv/hk). With γ_i = Σ_{s ≤ i} g_s the
// chunk-local cumulative log-decay (i, s < L):
//   A[i, s]   = β_i·e^{γ_i − γ_s}·(k_i·k_s)   for s < i   (strictly lower)
//   Aqk[i, s] = e^{γ_i − γ_s}·(q_i·k_s)       for s ≤ i   (0 above the diagonal)
//   W = (I + A)⁻¹·diag(β·e^{γ})·K,  U = (I + A)⁻¹·diag(β)·V   (forward substitution, per column)
// Only differences γ_i − γ_s ≤ 0 are exponentiated (no division by an underflowing e^{γ}).
// γ sums max(g, GMIN) (gated_delta_rule_chunk_lib.wgsl): a g of −∞ or far below any f32
// decay forgets the state as e^g = 0 does, with γ finite.
// Outputs (scratch, row sr = (b·hv + j)·t + τ for token τ of the window): w [sr, DK],
// u [sr, DV], aqk [sr, 64] (column s − 64·ci), gc [sr] = γ.
// Layouts: q, k [nb·t, hk, DK] (vec4s); v [nb·t, hv, DV]; g, beta [nb·t, hv]; all f32.
// Template parameters: DK (multiple of 4), DV, Intra (true).

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> w: array<f32>;
@group(0) @binding(6) var<storage, read_write> u: array<f32>;
@group(0) @binding(7) var<storage, read_write> aqk: array<f32>;
@group(0) @binding(8) var<storage, read_write> gc: array<f32>;

{{template "gdrc_params" (dict "U" 9 "Note" true "P" .)}}
const WG: u32 = 256u;

var<workgroup> gcw: array<f32, 64>;
var<workgroup> bw: array<f32, 64>;
var<workgroup> aw: array<f32, 4096>; // A, row-major [64, 64]

fn dots(a: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(a, b0), dot(a, b1), dot(a, b2), dot(a, b3));
}

{{template "gdrc_main" (dict "WG" 256 "Slices" false "Notes" true)}}
    let kh = j / (p.hv / p.hk);
{{- template "gdrc_chunk" (dict "I" "" "Let" true "Notes" true)}}
    if (lid < C) {
        var gv = 0.0;
        var bv = 0.0;
        if (lid < L) {
            gv = max(g[(row0 + lid) * p.hv + j], GMIN); // GMIN: the lib's comment
            bv = beta[(row0 + lid) * p.hv + j];
        }
        gcw[lid] = gv;
        bw[lid] = bv;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var s = 0.0;
        for (var i = 0u; i < C; i++) {
            s += gcw[i];
            gcw[i] = s;
        }
    }
    workgroupBarrier();
    if (lid < L) {
        gc[sr0 + lid] = gcw[lid];
    }
    // A and Aqk in 4×4 tiles: invocation (ti, tj) = (lid / 16, lid mod 16) owns rows
    // 4ti..4ti+3 and columns 4tj..4tj+3; tiles above the diagonal are zero.
    let ti = lid / 16u;
    let tj = lid % 16u;
    var kk: array<vec4<f32>, 4>;
    var qk: array<vec4<f32>, 4>;
    for (var a = 0u; a < 4u; a++) {
        kk[a] = vec4<f32>(0.0);
        qk[a] = vec4<f32>(0.0);
    }
    if (tj <= ti && 4u * ti < L) {
        // Rows past L read row L − 1 (in bounds) and are masked below.
        let i0 = ((row0 + min(4u * ti, L - 1u)) * p.hk + kh) * D4;
        let i1 = ((row0 + min(4u * ti + 1u, L - 1u)) * p.hk + kh) * D4;
        let i2 = ((row0 + min(4u * ti + 2u, L - 1u)) * p.hk + kh) * D4;
        let i3 = ((row0 + min(4u * ti + 3u, L - 1u)) * p.hk + kh) * D4;
        let j0 = ((row0 + min(4u * tj, L - 1u)) * p.hk + kh) * D4;
        let j1 = ((row0 + min(4u * tj + 1u, L - 1u)) * p.hk + kh) * D4;
        let j2 = ((row0 + min(4u * tj + 2u, L - 1u)) * p.hk + kh) * D4;
        let j3 = ((row0 + min(4u * tj + 3u, L - 1u)) * p.hk + kh) * D4;
        var kk0 = vec4<f32>(0.0);
        var kk1 = vec4<f32>(0.0);
        var kk2 = vec4<f32>(0.0);
        var kk3 = vec4<f32>(0.0);
        var qk0 = vec4<f32>(0.0);
        var qk1 = vec4<f32>(0.0);
        var qk2 = vec4<f32>(0.0);
        var qk3 = vec4<f32>(0.0);
        for (var d = 0u; d < D4; d++) {
            let b0 = k[j0 + d];
            let b1 = k[j1 + d];
            let b2 = k[j2 + d];
            let b3 = k[j3 + d];
            kk0 += dots(k[i0 + d], b0, b1, b2, b3);
            kk1 += dots(k[i1 + d], b0, b1, b2, b3);
            kk2 += dots(k[i2 + d], b0, b1, b2, b3);
            kk3 += dots(k[i3 + d], b0, b1, b2, b3);
            qk0 += dots(q[i0 + d], b0, b1, b2, b3);
            qk1 += dots(q[i1 + d], b0, b1, b2, b3);
            qk2 += dots(q[i2 + d], b0, b1, b2, b3);
            qk3 += dots(q[i3 + d], b0, b1, b2, b3);
        }
        kk[0] = kk0;
        kk[1] = kk1;
        kk[2] = kk2;
        kk[3] = kk3;
        qk[0] = qk0;
        qk[1] = qk1;
        qk[2] = qk2;
        qk[3] = qk3;
    }
    for (var a = 0u; a < 4u; a++) {
        let i = 4u * ti + a;
        for (var c = 0u; c < 4u; c++) {
            let s = 4u * tj + c;
            let on = i < L && s <= i;
            // γ_i − γ_s ≤ 0 where used; select keeps a possible inf elsewhere unused.
            let dec = select(0.0, exp(min(gcw[i] - gcw[s], 0.0)), on);
            aw[i * C + s] = select(0.0, bw[i] * dec * kk[a][c], on && s < i);
            if (i < L) {
                aqk[(sr0 + i) * C + s] = dec * qk[a][c];
            }
        }
    }
    workgroupBarrier();
    // Forward substitution, one column of [W | U] per invocation:
    // x_i = rhs_i − Σ_{s<i} A[i, s]·x_s (even s summed into a0, odd s into a1, each in
    // increasing s; both forms below add in this order).
    for (var col = lid; col < DK + DV; col += WG) {
{{- if .Unroll}}
        // Unrolled over the 64 rows (Unroll: GPUs), so that x lives in registers x0 … x63:
        // the loop form's array<f32, 64>, dynamically indexed, went to local memory (64 KiB
        // per workgroup, out of L1) and made this the kernel's cost (3.4 TFLOP/s on an H100).
        // Rows i ≥ L (the last, shorter chunk) are skipped; their x stay 0, never read.
{{- range $i := seq 64}}
        var x{{$i}} = 0.0;
        if ({{$i}}u < L) {
            let rhs = rhsWU(col, {{$i}}u, row0, kh, j);
            var a0 = 0.0;
            var a1 = 0.0;
{{- range $s := seq $i}}
{{- if eq (mod $s 2) 0}}
            a0 = fma(aw[{{add (mul $i 64) $s}}], x{{$s}}, a0);
{{- else}}
            a1 = fma(aw[{{add (mul $i 64) $s}}], x{{$s}}, a1);
{{- end}}
{{- end}}
            x{{$i}} = rhs - (a0 + a1);
            storeWU(col, sr0 + {{$i}}u, x{{$i}});
        }
{{- end}}
{{- else}}
        var x: array<f32, 64>;
        for (var i = 0u; i < L; i++) {
            let rhs = rhsWU(col, i, row0, kh, j);
            var a0 = 0.0;
            var a1 = 0.0;
            var s = 0u;
            for (; s + 1u < i; s += 2u) {
                a0 = fma(aw[i * C + s], x[s], a0);
                a1 = fma(aw[i * C + s + 1u], x[s + 1u], a1);
            }
            if (s < i) {
                a0 = fma(aw[i * C + s], x[s], a0);
            }
            let xi = rhs - (a0 + a1);
            x[i] = xi;
            storeWU(col, sr0 + i, xi);
        }
{{- end}}
    }
}

// rhsWU is row i of the substitution's right-hand side at column col of [W | U]:
// β_i·e^{γ_i}·k_i (col < DK) or β_i·v_i (col − DK).
fn rhsWU(col: u32, i: u32, row0: u32, kh: u32, j: u32) -> f32 {
    if (col < DK) {
        let e = ((row0 + i) * p.hk + kh) * DK + col;
        return bw[i] * exp(gcw[i]) * k[e / 4u][e % 4u];
    }
    return bw[i] * v[((row0 + i) * p.hv + j) * DV + col - DK];
}

// storeWU stores x at scratch row sr, column col of [W | U].
fn storeWU(col: u32, sr: u32, x: f32) {
    if (col < DK) {
        w[sr * DK + col] = x;
    } else {
        u[sr * DV + col - DK] = x;
    }
}
{{- else if .Tiled}}
// GatedDeltaRuleChunked, inter-chunk part, tiled: the state recurrence over the chunks of a
// window, from S = 0 (fla/ops/common/chunk_delta_h.py and chunk_o.py in one pass). One
// workgroup of 8·CS invocations per (window b, value head j, slice of CS value columns); the
// slice of the state S [DK, CS] lives in workgroup memory. Per chunk (L tokens; the intra
// part's W, U, Aqk, γ; e^{γ_i} and e^{γ_{L−1} − γ_i} staged in workgroup memory):
//   V' = U − W·S                       (the delta rule's u_i = β_i(v_i − Ŝ_{i}ᵀk_i))
//   O  = diag(e^{γ})·Q·S + Aqk·V'
//   S  ← e^{γ_{L−1}}·S + (diag(e^{γ_{L−1} − γ})·K)ᵀ·V'
// Every operand read from memory is first staged in workgroup memory by coalesced vec4
// loads (tile tl, reused: [W; Q] in BK-column slices, then Aqk, then K in IT-row slices),
// and each invocation computes a 4×4 block (4 rows, 4 value columns) with the unrolled
// inner loops reading vec4s: phase a gives invocation rg = lid / (CS/4) rows 4rg..4rg+3 of
// [W; Q] (rg < 16: W, so V'; else Q), phase b the Q invocations add Aqk·V', phase c gives
// rows 4dg..4dg+3 of S (dg = rg, rg + 32, …).
// Used for the forward; the backward's pass that saves the per-chunk states (SaveH) takes
// the untiled kernel below, which the H200 measured faster there (DESIGN.md §9).
// Layouts: q, k [nb·t, hk, DK] (vec4s); w [sr, DK] (vec4s), u [sr, DV], aqk [sr, 64] (vec4s),
// gc [sr] (the intra part's outputs); o [nb·t, hv, DV]; state [nb, hv, DK, DV] when
// WantState.
// Template parameters: DK (multiple of 4), DV, CS (multiple of 4, 8 ≤ CS ≤ 32; 8·CS
// invocations), BK (32, 16, 8 or 4, dividing DK), IT (a power of 2 ≤ 64, IT·DK ≤ 4608),
// ND = ⌈DK/128⌉, WantState.
{{- $C4 := div .CS 4}}{{$BK4 := div .BK 4}}{{$RS4 := add $BK4 1}}

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> u: array<f32>;
@group(0) @binding(4) var<storage, read> aqk: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> gc: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;
{{- if .WantState}}
@group(0) @binding(7) var<storage, read_write> state: array<f32>;
{{- end}}


{{template "gdrc_params" (dict "U" .UBinding "Note" false "P" .)}}
const CS: u32 = {{.CS}}u;
const C4: u32 = {{$C4}}u;
const NS: u32 = (DV + CS - 1u) / CS;
const WG: u32 = {{mul 8 .CS}}u;
const BK: u32 = {{.BK}}u;
const BK4: u32 = {{$BK4}}u;
const RS4: u32 = {{$RS4}}u; // row stride of the [W; Q] tile in vec4s (one of padding)
const IT: u32 = {{.IT}}u;

var<workgroup> sw: array<vec4<f32>, {{.DK}} * {{.CS}} / 4>; // S[d, 4c4..4c4+3] at d·C4 + c4
var<workgroup> vp: array<vec4<f32>, 64 * {{.CS}} / 4>;      // V'[i, 4c4..] at i·C4 + c4
var<workgroup> tl: array<vec4<f32>, 1152>; // [W; Q] [128, BK] (row stride RS4), Aqk [64, 64] (row stride 17), K [IT, DK]
var<workgroup> gq: array<f32, 64>; // e^{γ_i}
var<workgroup> gk: array<f32, 64>; // e^{γ_{L−1} − γ_i}

{{template "gdrc_col4"}}

// put4o writes x to o at row base, columns c..c+3 below DV.
fn put4o(base: u32, c: u32, x: vec4<f32>) {
    for (var m = 0u; m < 4u; m++) {
        if (c + m < DV) {
            o[base + c + m] = x[m];
        }
    }
}

{{template "gdrc_main" (dict "WG" (mul 8 .CS) "Slices" true "Notes" true)}}
    let rg = lid / C4;
    let c4 = lid % C4;
    let cb = slice * CS + 4u * c4; // first value column of this invocation
    for (var ci = 0u; ci < p.nck; ci++) {
{{- template "gdrc_chunk" (dict "I" "    " "Let" true "Notes" false)}}
        workgroupBarrier(); // the previous chunk is done with gq, gk, vp, sw, tl
{{- template "gdrc_gates"}}

        // Phase a: [W; Q]·S, the tile holding columns dt·BK.. of rows 0..63 of W and of Q
        // (rows ≥ L read row L − 1; masked below).
{{- range $m := seq 4}}
        var a{{$m}} = vec4<f32>(0.0);
{{- end}}
        for (var dt = 0u; dt < DK / BK; dt++) {
            for (var e = lid; e < 128u * BK4; e += WG) {
                let r = e / BK4;
                let dq = e % BK4;
                let rr = min(r % 64u, L - 1u);
                var x: vec4<f32>;
                if (r < 64u) {
                    x = w[(sr0 + rr) * D4 + dt * BK4 + dq];
                } else {
                    x = q[((row0 + rr) * p.hk + kh) * D4 + dt * BK4 + dq];
                }
                tl[r * RS4 + dq] = x;
            }
            workgroupBarrier(); // tile staged (and, at dt = 0, gates)
{{- range $d4 := seq $BK4}}
            {
                let d = dt * BK + {{mul $d4 4}}u;
                let s0 = sw[d * C4 + c4];
                let s1 = sw[(d + 1u) * C4 + c4];
                let s2 = sw[(d + 2u) * C4 + c4];
                let s3 = sw[(d + 3u) * C4 + c4];
{{- range $m := seq 4}}
                let x{{$m}} = tl[(4u * rg + {{$m}}u) * RS4 + {{$d4}}u];
                a{{$m}} = fma(vec4<f32>(x{{$m}}.x), s0, a{{$m}});
                a{{$m}} = fma(vec4<f32>(x{{$m}}.y), s1, a{{$m}});
                a{{$m}} = fma(vec4<f32>(x{{$m}}.z), s2, a{{$m}});
                a{{$m}} = fma(vec4<f32>(x{{$m}}.w), s3, a{{$m}});
{{- end}}
            }
{{- end}}
            workgroupBarrier(); // tile consumed
        }
        if (rg < 16u) {
            // V' = U − W·S for rows 4rg..4rg+3 (0 at rows ≥ L).
{{- range $m := seq 4}}
            {
                let i = 4u * rg + {{$m}}u;
                var x = vec4<f32>(0.0);
                if (i < L) {
                    x = col4((sr0 + i) * DV, cb) - a{{$m}};

                }
                vp[i * C4 + c4] = x;
            }
{{- end}}
        }
        // Aqk [64, 64] into the tile (rows ≥ L read row L − 1; their outputs are not stored).
        for (var e = lid; e < 1024u; e += WG) {
            let r = e / 16u;
            let sq = e % 16u;
            tl[r * 17u + sq] = aqk[(sr0 + min(r, L - 1u)) * 16u + sq];
        }
        workgroupBarrier(); // V', Aqk staged; every read of S done
        if (rg >= 16u) {
            // Phase b: O = e^{γ}·Q·S + Aqk·V' for rows 4rq..4rq+3 (Aqk is zero above the
            // diagonal and at columns ≥ L).
            let rq = rg - 16u;
{{- range $m := seq 4}}
            var o{{$m}} = gq[4u * rq + {{$m}}u] * a{{$m}};
{{- end}}
            for (var s4 = 0u; s4 <= rq; s4++) {
                let v0 = vp[(4u * s4) * C4 + c4];
                let v1 = vp[(4u * s4 + 1u) * C4 + c4];
                let v2 = vp[(4u * s4 + 2u) * C4 + c4];
                let v3 = vp[(4u * s4 + 3u) * C4 + c4];
{{- range $m := seq 4}}
                let x{{$m}} = tl[(4u * rq + {{$m}}u) * 17u + s4];
                o{{$m}} = fma(vec4<f32>(x{{$m}}.x), v0, o{{$m}});
                o{{$m}} = fma(vec4<f32>(x{{$m}}.y), v1, o{{$m}});
                o{{$m}} = fma(vec4<f32>(x{{$m}}.z), v2, o{{$m}});
                o{{$m}} = fma(vec4<f32>(x{{$m}}.w), v3, o{{$m}});
{{- end}}
            }
{{- range $m := seq 4}}
            if (4u * rq + {{$m}}u < L) {
                put4o(((row0 + 4u * rq + {{$m}}u) * p.hv + j) * DV, cb, o{{$m}});
            }
{{- end}}
        }
        // Phase c: S ← e^{γ_{L−1}}·S + Σ_i e^{γ_{L−1} − γ_i}·k_i ⊗ V'_i; invocation rg owns
        // rows 4dg..4dg+3 of S, dg = rg + 32n (n < ND), columns 4c4..4c4+3.
        let gl = gq[L - 1u];
{{- range $n := seq .ND}}
        let dg{{$n}} = rg + {{mul $n 32}}u;
        let on{{$n}} = dg{{$n}} < D4;
{{- range $m := seq 4}}
        var c{{$n}}{{$m}} = vec4<f32>(0.0);
        if (on{{$n}}) {
            c{{$n}}{{$m}} = gl * sw[(4u * dg{{$n}} + {{$m}}u) * C4 + c4];
        }
{{- end}}
{{- end}}
        for (var i0 = 0u; i0 < L; i0 += IT) {
            workgroupBarrier(); // the tile's previous contents consumed
            for (var e = lid; e < IT * D4; e += WG) {
                let ii = e / D4;
                let i = min(i0 + ii, L - 1u);
                // Rows ≥ L have gk = 0.
                tl[e] = gk[i0 + ii] * k[((row0 + i) * p.hk + kh) * D4 + e % D4];
            }
            workgroupBarrier(); // K slice staged
{{- range $ii := seq .IT}}
            {
                let x = vp[(i0 + {{$ii}}u) * C4 + c4];
{{- range $n := seq $.ND}}
                let k{{$n}} = tl[{{$ii}}u * D4 + min(dg{{$n}}, D4 - 1u)];
{{- range $m := seq 4}}
                c{{$n}}{{$m}} = fma(vec4<f32>(k{{$n}}.{{index "xyzw" $m | printf "%c"}}), x, c{{$n}}{{$m}});
{{- end}}
{{- end}}
            }
{{- end}}
        }
{{- range $n := seq .ND}}
        if (on{{$n}}) {
{{- range $m := seq 4}}
            sw[(4u * dg{{$n}} + {{$m}}u) * C4 + c4] = c{{$n}}{{$m}};
{{- end}}
        }
{{- end}}
    }
{{- if .WantState}}
    workgroupBarrier(); // the last chunk's S complete
{{- template "gdrc_save_s" (dict "I" "" "Dst" "state[(bj * DK + d) * DV + c]")}}
{{- end}}
}
{{- else}}
// GatedDeltaRuleChunked, inter-chunk part: the state recurrence over the chunks of a window,
// from S = 0 (fla/ops/common/chunk_delta_h.py and chunk_o.py in one pass). One workgroup of
// 256 invocations per (window b, value head j, slice of CS value columns); the slice of the
// state S [DK, CS] lives in workgroup memory. Per chunk (L tokens, the intra part's W, U,
// Aqk, γ; e^{γ_i} and e^{γ_{L−1} − γ_i} staged in workgroup memory):
//   V' = U − W·S                       (the delta rule's u_i = β_i(v_i − Ŝ_{i}ᵀk_i))
//   O  = diag(e^{γ})·Q·S + Aqk·V'
//   S  ← e^{γ_{L−1}}·S + (diag(e^{γ_{L−1} − γ})·K)ᵀ·V'
// Phases a (V', and Q·S kept in registers) and b (O) give invocation lid < 32·CS/4 rows
// i0 = lid / (CS/4) and i0 + 32 and the four columns 4·(lid mod CS/4)..+3; phase c gives
// each invocation 4×4 blocks of S. Barriers: chunk start (gates staged, the previous chunk's
// reads of V' done), after phase a (V' complete, reads of S done).
// Layouts: q, k [nb·t, hk, DK] (vec4s); w [sr, DK] (vec4s), u [sr, DV], aqk [sr, 64],
// gc [sr] (the intra part's outputs); o [nb·t, hv, DV]; state [nb, hv, DK, DV] when
// WantState; when SaveH, h [nb·hv, nck, DK, DV], the state before each chunk, and
// vnew [sr, DV], V'.
// Template parameters: DK (multiple of 4), DV, CS (multiple of 4, ≤ 32), WantState, SaveH.

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> u: array<f32>;
@group(0) @binding(4) var<storage, read> aqk: array<f32>;
@group(0) @binding(5) var<storage, read> gc: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;
{{- if .WantState}}
@group(0) @binding(7) var<storage, read_write> state: array<f32>;
{{- end}}
{{- if .SaveH}}
@group(0) @binding({{.HBinding}}) var<storage, read_write> h: array<f32>;
@group(0) @binding({{add .HBinding 1}}) var<storage, read_write> vnew: array<f32>;
{{- end}}

{{template "gdrc_params" (dict "U" .UBinding "Note" false "P" .)}}
const CS: u32 = {{.CS}}u;
const C4: u32 = CS / 4u;
const NS: u32 = (DV + CS - 1u) / CS;
const WG: u32 = 256u;

var<workgroup> sw: array<vec4<f32>, {{.DK}} * {{.CS}} / 4>; // S[d, 4c4..4c4+3] at d·C4 + c4
var<workgroup> vp: array<vec4<f32>, 64 * {{.CS}} / 4>;      // V'[i, 4c4..] at i·C4 + c4
var<workgroup> gq: array<f32, 64>; // e^{γ_i}
var<workgroup> gk: array<f32, 64>; // e^{γ_{L−1} − γ_i}

{{template "gdrc_col4"}}

{{template "gdrc_main" (dict "WG" 256 "Slices" true "Notes" true)}}
    let busy = lid < 32u * C4;
    let i0 = lid / C4;
    let i1 = i0 + 32u;
    let c4 = lid % C4;
    let cb = slice * CS + 4u * c4; // first value column of this invocation (phases a, b)
    for (var ci = 0u; ci < p.nck; ci++) {
{{- template "gdrc_chunk" (dict "I" "    " "Let" true "Notes" false)}}
        workgroupBarrier(); // the previous chunk's phase c is done with gq, gk, vp, sw
{{- template "gdrc_gates"}}
{{- if .SaveH}}
{{- template "gdrc_save_s" (dict "I" "    " "Dst" "h[((bj * p.nck + ci) * DK + d) * DV + c]")}}
{{- end}}
        workgroupBarrier(); // gates staged
        var o0 = vec4<f32>(0.0);
        var o1 = vec4<f32>(0.0);
        if (busy) {
            // Phase a: W·S and Q·S for rows i0, i1 (rows ≥ L read row L − 1, masked).
            let r0 = min(i0, L - 1u);
            let r1 = min(i1, L - 1u);
            let wb0 = (sr0 + r0) * D4;
            let wb1 = (sr0 + r1) * D4;
            let qb0 = ((row0 + r0) * p.hk + kh) * D4;
            let qb1 = ((row0 + r1) * p.hk + kh) * D4;
            var ws0 = vec4<f32>(0.0);
            var ws1 = vec4<f32>(0.0);
            var qs0 = vec4<f32>(0.0);
            var qs1 = vec4<f32>(0.0);
            for (var d = 0u; d < D4; d++) {
{{- template "gdrc_s4"}}
                let w0 = w[wb0 + d];
                let w1 = w[wb1 + d];
                let q0 = q[qb0 + d];
                let q1 = q[qb1 + d];
                ws0 += w0.x * s0 + w0.y * s1 + w0.z * s2 + w0.w * s3;
                ws1 += w1.x * s0 + w1.y * s1 + w1.z * s2 + w1.w * s3;
                qs0 += q0.x * s0 + q0.y * s1 + q0.z * s2 + q0.w * s3;
                qs1 += q1.x * s0 + q1.y * s1 + q1.z * s2 + q1.w * s3;
            }
            var v0 = vec4<f32>(0.0);
            var v1 = vec4<f32>(0.0);
            if (i0 < L) {
                v0 = col4((sr0 + i0) * DV, cb) - ws0;
            }
            if (i1 < L) {
                v1 = col4((sr0 + i1) * DV, cb) - ws1;
            }
            vp[i0 * C4 + c4] = v0;
            vp[i1 * C4 + c4] = v1;
{{- if .SaveH}}
            for (var m = 0u; m < 4u; m++) {
                if (cb + m < DV) {
                    if (i0 < L) {
                        vnew[(sr0 + i0) * DV + cb + m] = v0[m];
                    }
                    if (i1 < L) {
                        vnew[(sr0 + i1) * DV + cb + m] = v1[m];
                    }
                }
            }
{{- end}}
            o0 = gq[i0] * qs0;
            o1 = gq[i1] * qs1;
        }
        workgroupBarrier(); // V' complete; every read of S done
        if (busy) {
            // Phase b: O = e^{γ}·Q·S + Aqk·V' (Aqk is zero above the diagonal).
{{- range $r := seq 2}}
            if (i{{$r}} < L) {
                let ab = (sr0 + i{{$r}}) * C;
                for (var s = 0u; s <= i{{$r}}; s++) {
                    o{{$r}} += aqk[ab + s] * vp[s * C4 + c4];
                }
                let ob = ((row0 + i{{$r}}) * p.hv + j) * DV + cb;
                for (var m = 0u; m < 4u; m++) {
                    if (cb + m < DV) {
                        o[ob + m] = o{{$r}}[m];
                    }
                }
            }
{{- end}}
        }
        // Phase c: S ← e^{γ_{L−1}}·S + Σ_i e^{γ_{L−1} − γ_i}·k_i ⊗ V'_i, 4×4 blocks.
        let gl = gq[L - 1u];
        for (var e = lid; e < D4 * C4; e += WG) {
            let d = e / C4;
            let cc = e % C4;
            var a0 = gl * sw[(4u * d) * C4 + cc];
            var a1 = gl * sw[(4u * d + 1u) * C4 + cc];
            var a2 = gl * sw[(4u * d + 2u) * C4 + cc];
            var a3 = gl * sw[(4u * d + 3u) * C4 + cc];
            let kb = (row0 * p.hk + kh) * D4 + d;
            for (var i = 0u; i < L; i++) {
                let kv = k[kb + i * p.hk * D4] * gk[i];
                let x = vp[i * C4 + cc];
                a0 += kv.x * x;
                a1 += kv.y * x;
                a2 += kv.z * x;
                a3 += kv.w * x;
            }
            sw[(4u * d) * C4 + cc] = a0;
            sw[(4u * d + 1u) * C4 + cc] = a1;
            sw[(4u * d + 2u) * C4 + cc] = a2;
            sw[(4u * d + 3u) * C4 + cc] = a3;
        }
    }
{{- if .WantState}}
    workgroupBarrier(); // the last chunk's S complete
{{- template "gdrc_save_s" (dict "I" "" "Dst" "state[(bj * DK + d) * DV + c]")}}
{{- end}}
}
{{- end}}
