// GatedDeltaRule: the gated delta-rule recurrence of the GatedDeltaNet, token by token
// (DESIGN.md §3, host.GatedDeltaRule). Per window b and value head j (key head
// kh = j / (hv/hk)), with S ∈ R^{DK×DV} in f32 from zero at the window's first token:
//   S ← e^{g_t}·S;   u = β_t (v_t − Sᵀk_t);   S ← S + k_t ⊗ u;   o_t = Sᵀq_t.
// Layouts (row-major f32): q, k [nb·t, hk, DK]; v, o [nb·t, hv, DV]; g, beta [nb·t, hv];
// state (only when WantState) [nb, hv, DK, DV], the state after the window's last token.
//
// One workgroup of COLS·P invocations per (window, value head, slice of COLS value
// columns). Invocation (cl, ps) = (lid / P, lid mod P) owns rows 4·(ps + P·m)..+3 of column
// c = slice·COLS + cl of S, m < M = DK/(4P), as M named vec4 registers (the template unrolls
// every loop over them). The P partial sums of Sᵀk (for u) and of Sᵀq (for o) of a column
// are combined through workgroup memory. Per step, with k_t and q_t double-buffered in
// workgroup memory (step τ+1's loaded while step τ computes):
//   barrier A (k_τ, q_τ staged; o partials of step τ−1 complete) → the ps = 0 invocation of
//   each column writes o_{τ−1}; all decay their rows and write their Sᵀk partial;
//   barrier B → each forms u from the P partials, updates its rows, writes its Sᵀq partial.
// A buffer is rewritten only after a barrier that follows every read of it.
// Template parameters: DK (multiple of 4), DV, COLS, P (divides DK/4), WantState (bool),
// Idx (for m < M: [m, m mod 4], the register index and its partial-sum slot).

{{template "gdr_forward_io" .}}

const D4: u32 = {{.DK}}u / 4u;
const P: u32 = {{.P}}u;
const WG: u32 = {{.COLS}}u * {{.P}}u;
const NSLICE: u32 = ({{.DV}}u + {{.COLS}}u - 1u) / {{.COLS}}u;

// kq[buf][0..D4) = k_t, kq[buf][D4..2·D4) = q_t, as vec4s.
var<workgroup> kq: array<array<vec4<f32>, {{.DK}} / 2>, 2>;
// upart[lid]: partial Sᵀk of the step; opart[buf][lid]: partial Sᵀq of the step.
var<workgroup> upart: array<f32, {{.COLS}} * {{.P}}>;
var<workgroup> opart: array<array<f32, {{.COLS}} * {{.P}}>, 2>;

// load stages k and q of token row (key head kh) into buffer buf.
fn load(buf: u32, row: u32, kh: u32, lid: u32) {
    let src = (row * p.hk + kh) * D4;
    for (var i = lid; i < D4; i += WG) {
        kq[buf][i] = k[src + i];
        kq[buf][D4 + i] = q[src + i];
    }
}

{{template "gdr_main" (dict "WG" (printf "%d * %d" .COLS .P) "Lanes" false "N" "NSLICE" "I" "slice" "Notes" true "KH" true)}}
    let cl = lid / P;
    let ps = lid - cl * P;
    let c = slice * {{.COLS}}u + cl;
    let live = c < {{.DV}}u;
    let pbase = cl * P; // this column's partials: [pbase, pbase + P)

{{- range .Idx}}
    var s{{index . 0}} = vec4<f32>(0.0);
{{- end}}
    let row0 = b * p.t;
    load(0u, row0, kh, lid);
    for (var tau = 0u; tau < p.t; tau++) {
        let row = row0 + tau;
        let buf = tau & 1u;
        workgroupBarrier(); // A: k_τ, q_τ staged; step τ−1's o partials written
        if (tau + 1u < p.t) {
            load(buf ^ 1u, row + 1u, kh, lid);
        }
        let gi = row * p.hv + j;
        if (tau > 0u && ps == 0u && live) {
            var os = 0.0;
            for (var r = 0u; r < P; r++) {
                os += opart[buf ^ 1u][pbase + r];
            }
            o[(gi - p.hv) * {{.DV}}u + c] = os;
        }
        let decay = exp(g[gi]);
        // S ← e^g·S and this slice's part of Sᵀk; four independent partial sums.
        var u0 = vec4<f32>(0.0);
        var u1 = vec4<f32>(0.0);
        var u2 = vec4<f32>(0.0);
        var u3 = vec4<f32>(0.0);
{{- range .Idx}}
        s{{index . 0}} *= decay;
        u{{index . 1}} += kq[buf][ps + P * {{index . 0}}u] * s{{index . 0}};
{{- end}}
        let u4 = (u0 + u1) + (u2 + u3);
        upart[lid] = (u4.x + u4.y) + (u4.z + u4.w);
        workgroupBarrier(); // B: the Sᵀk partials are complete
        var sk = 0.0;
        for (var r = 0u; r < P; r++) {
            sk += upart[pbase + r];
        }
        var vc = 0.0;
        if (live) {
            vc = v[gi * {{.DV}}u + c];
        }
        let u = beta[gi] * (vc - sk);
        // S += k ⊗ u and this slice's part of o = Sᵀq.
        var o0 = vec4<f32>(0.0);
        var o1 = vec4<f32>(0.0);
        var o2 = vec4<f32>(0.0);
        var o3 = vec4<f32>(0.0);
{{- range .Idx}}
        s{{index . 0}} += kq[buf][ps + P * {{index . 0}}u] * u;
        o{{index . 1}} += kq[buf][D4 + ps + P * {{index . 0}}u] * s{{index . 0}};
{{- end}}
        let o4 = (o0 + o1) + (o2 + o3);
        opart[buf][lid] = (o4.x + o4.y) + (o4.z + o4.w);
    }
    workgroupBarrier(); // the last step's o partials are complete
    if (ps == 0u && live) {
        var os = 0.0;
        for (var r = 0u; r < P; r++) {
            os += opart[(p.t - 1u) & 1u][pbase + r];
        }
        o[((row0 + p.t - 1u) * p.hv + j) * {{.DV}}u + c] = os;
    }
{{- if .WantState}}
    if (live) {
        let base = (b * p.hv + j) * {{.DK}}u * {{.DV}}u + c;
{{- range .Idx}}
        {
            let r4 = 4u * (ps + P * {{index . 0}}u);
            state[base + r4 * {{$.DV}}u] = s{{index . 0}}.x;
            state[base + (r4 + 1u) * {{$.DV}}u] = s{{index . 0}}.y;
            state[base + (r4 + 2u) * {{$.DV}}u] = s{{index . 0}}.z;
            state[base + (r4 + 3u) * {{$.DV}}u] = s{{index . 0}}.w;
        }
{{- end}}
    }
{{- end}}
}
