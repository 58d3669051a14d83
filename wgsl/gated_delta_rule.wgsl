// GatedDeltaRule: the gated delta-rule recurrence of the GatedDeltaNet, token by token
// (DESIGN.md §3, host.GatedDeltaRule). Per window b and value head j (key head
// kh = j / (hv/hk)), with S ∈ R^{DK×DV} in f32 from zero at the window's first token:
//   S ← e^{g_t}·S;   u = β_t (v_t − Sᵀk_t);   S ← S + k_t ⊗ u;   o_t = Sᵀq_t.
// Layouts (row-major f32): q, k [nb·t, hk, DK]; v, o [nb·t, hv, DV]; g, beta [nb·t, hv];
// state (only when WantState) [nb, hv, DK, DV], the state after the window's last token.
//
// One workgroup per (window, value head, slice of COLS value columns); invocation c owns
// column c of S (DK floats in private memory as DK/4 vec4s: every column's update needs only
// its own column, k_t, q_t, v_t[c] and the two gates). k_t and q_t are staged in workgroup
// memory, double-buffered: step τ+1's vectors are loaded while step τ computes, so one
// barrier per step suffices (a buffer is rewritten only after the barrier that ends the step
// that last read it).
// Template parameters: DK (multiple of 4), DV, COLS (workgroup size), WantState (bool),
// Idx (for a < DK/4: [a, a mod 4], the unrolled register index and its partial sum).

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
{{- if .WantState}}
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
{{- end}}

struct Params {
    nb: u32,
    t: u32,
    hk: u32,
    hv: u32,
};
@group(0) @binding({{if .WantState}}7{{else}}6{{end}}) var<uniform> p: Params;

const D4: u32 = {{.DK}}u / 4u;
const NSLICE: u32 = ({{.DV}}u + {{.COLS}}u - 1u) / {{.COLS}}u;

// kq[buf][0..D4) = k_t, kq[buf][D4..2·D4) = q_t, as vec4s.
var<workgroup> kq: array<array<vec4<f32>, {{.DK}} / 2>, 2>;

// load stages k and q of token row (key head kh) into buffer buf.
fn load(buf: u32, row: u32, kh: u32, lid: u32) {
    let src = (row * p.hk + kh) * D4;
    for (var i = lid; i < D4; i += {{.COLS}}u) {
        kq[buf][i] = k[src + i];
        kq[buf][D4 + i] = q[src + i];
    }
}

@compute @workgroup_size({{.COLS}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    // wg is uniform across the workgroup, so this early exit keeps barriers uniform.
    if (wg >= p.nb * p.hv * NSLICE) {
        return;
    }
    let slice = wg % NSLICE;
    let bj = wg / NSLICE;
    let j = bj % p.hv;
    let b = bj / p.hv;
    let kh = j / (p.hv / p.hk);
    let c = slice * {{.COLS}}u + lid;
    let live = c < {{.DV}}u;

    // The column as D4 named vec4 registers (the template unrolls every loop over it, so no
    // compiler has to promote a dynamically indexed private array).
{{- range .Idx}}
    var s{{index . 0}} = vec4<f32>(0.0);
{{- end}}
    let row0 = b * p.t;
    load(0u, row0, kh, lid);
    workgroupBarrier();
    for (var tau = 0u; tau < p.t; tau++) {
        let row = row0 + tau;
        let buf = tau & 1u;
        if (tau + 1u < p.t) {
            load(buf ^ 1u, row + 1u, kh, lid);
        }
        if (live) {
            let gi = row * p.hv + j;
            let decay = exp(g[gi]);
            let bt = beta[gi];
            let vi = gi * {{.DV}}u + c;
            // S ← e^g·S and u = β(v − Sᵀk) in one pass over the column; four independent
            // partial sums keep the dependent chains short.
            var u0 = vec4<f32>(0.0);
            var u1 = vec4<f32>(0.0);
            var u2 = vec4<f32>(0.0);
            var u3 = vec4<f32>(0.0);
{{- range .Idx}}
            s{{index . 0}} *= decay;
            u{{index . 1}} += kq[buf][{{index . 0}}] * s{{index . 0}};
{{- end}}
            let u4 = (u0 + u1) + (u2 + u3);
            let u = bt * (v[vi] - ((u4.x + u4.y) + (u4.z + u4.w)));
            // S += k ⊗ u and o = Sᵀq in one pass.
            var o0 = vec4<f32>(0.0);
            var o1 = vec4<f32>(0.0);
            var o2 = vec4<f32>(0.0);
            var o3 = vec4<f32>(0.0);
{{- range .Idx}}
            s{{index . 0}} += kq[buf][{{index . 0}}] * u;
            o{{index . 1}} += kq[buf][D4 + {{index . 0}}] * s{{index . 0}};
{{- end}}
            let o4 = (o0 + o1) + (o2 + o3);
            o[vi] = (o4.x + o4.y) + (o4.z + o4.w);
        }
        workgroupBarrier();
    }
{{- if .WantState}}
    if (live) {
        let base = (b * p.hv + j) * {{.DK}}u * {{.DV}}u + c;
{{- range .Idx}}
        state[base + {{index . 0}}u * 4u * {{$.DV}}u] = s{{index . 0}}.x;
        state[base + ({{index . 0}}u * 4u + 1u) * {{$.DV}}u] = s{{index . 0}}.y;
        state[base + ({{index . 0}}u * 4u + 2u) * {{$.DV}}u] = s{{index . 0}}.z;
        state[base + ({{index . 0}}u * 4u + 3u) * {{$.DV}}u] = s{{index . 0}}.w;
{{- end}}
    }
{{- end}}
}
