// The gated delta rule in the lane-blocked form of CPU adapters (gemm_lanes.wgsl says why):
// GatedDeltaRuleLanes (the forward, token by token as gated_delta_rule.wgsl) and
// GatedDeltaRuleBackwardLanes (Backward; its partial sums go through gated_delta_rule_sum.wgsl).
// Per window b and value head j (key head kh = j / (hv/hk)), from S = 0,
//   S ← e^{g_t}·S;   u = β_t (v_t − Sᵀk_t);   S ← S + k_t ⊗ u;   o_t = Sᵀq_t.
// One workgroup = one subgroup of S lanes per (window, value head, slice of S·C value
// columns); lane l owns columns cl + cc, cl = slice·S·C + l·C, cc < C, each as D4 = DK/4
// named vec4 registers of its rows. No workgroup memory, no barrier: per token each lane
// loads KL = ⌈D4/S⌉ vec4s of k_t (and q_t), groups l + S·i, and every lane reads every group
// through subgroupBroadcast. Each column's Sᵀk and Sᵀq is one vec4 fma chain over the D4
// groups in order, summed (x + y) + (z + w). A lane whose column cl + cc is past DV computes
// the last column's values again (same inputs, same bits) and stores no output.
// Layouts (row-major f32): q, k [nb·t, hk, DK]; v, o, do, dv [nb·t, hv, DV]; g, beta
// [nb·t, hv]; state [nb, hv, DK, DV] (the forward's final state, WantState).
// Template parameters: S, C, DK (multiple of 4), DV, D4, KL, NSLICE (⌈DV/(S·C)⌉);
// forward: WantState; Backward: CL.
{{- if .Backward}}

// Backward. Everything a lane stores in the scratch is its own columns', so the lanes never
// wait for each other:
//  1. a forward sweep over the window writes the state before each chunk of CL tokens (chunk
//     ci ≥ 1: the state after token ci·CL − 1);
//  2. chunk by chunk in reverse: from its checkpoint (zero for chunk 0) the chunk's forward
//     is recomputed, keeping per token i < CL the decayed state S̃_t = e^{g_t}·S_{t−1} and
//     w_t = v_t − S̃_tᵀk_t in private variables st{i}_…, w{i}_… (so S_t = S̃_t + k_t ⊗ β_t w_t
//     is re-formed exactly, as the forward's fma), then its tokens are stepped back (dS is
//     the gradient of S_t):
//       dS += q_t ⊗ do_t;   dq_t = S_t·do_t;   du = dSᵀk_t;   dv_t = β_t du;
//       dβ_t = Σ_c du_c w_c;   dk_t = dS·(β_t w) − S̃_t·(β_t du);
//       dS̃ = dS − k_t ⊗ β_t du;   dg_t = Σ dS̃ ⊙ S̃_t;   dS ← e^{g_t}·dS̃.
//     The column sums (dq, dk, dβ, dg) are added over the subgroup's lanes (subgroupAdd) and
//     written per slice to part; gated_delta_rule_sum.wgsl sums them over slices and value heads.
// The chunk's tokens are unrolled (CL copies) so that its states stay in private variables:
// on lavapipe those are the stack (one vector load or store per S lanes), where a storage
// access is a loop over the lanes with a bounds check per component (gemm_lanes.wgsl), and
// storing every token's state dominated this kernel (~85 % of its memory accesses).
// Scratch per (window, value head): the checkpoints, vec4s [NCK][DV][D4]. part: dq and dk
// [NSLICE][nb·t][hv][D4] vec4s; part1: dβ and dg [NSLICE][nb·t][hv].

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read_write> dval: array<f32>;
@group(0) @binding(7) var<storage, read_write> scr: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> part1: array<f32>;

struct Params {
    nb: u32,
    t: u32,
    hk: u32,
    hv: u32,
    nck: u32, // ⌈t / CL⌉
};
@group(0) @binding(10) var<uniform> p: Params;

const CL: u32 = {{.CL}}u;
{{template "gdrl_head" .}}
    let rows = p.nb * p.t;
    let ckb = bj * p.nck * DV * D4;
{{- range $cc := seq .C}}
    let live{{$cc}} = cl + {{$cc}}u < DV;
{{- range $m := seq $.D4}}
    var ds{{$cc}}_{{$m}} = vec4<f32>(0.0);
{{- end}}
{{- end}}
    // The chunk's kept states and w, token i of the chunk.
{{- range $i := seq .CL}}{{range $cc := seq $.C}}
    var w{{$i}}_{{$cc}} = 0.0;
{{- range $m := seq $.D4}}
    var st{{$i}}_{{$cc}}_{{$m}} = vec4<f32>(0.0);
{{- end}}
{{- end}}{{end}}

    // 1. The forward sweep: the state before every chunk ci ≥ 1.
    for (var tau = 0u; tau < p.t; tau++) {
        if (tau > 0u && tau % CL == 0u) {
            let ci = tau / CL;
{{- range $cc := seq .C}}
{{- range $m := seq $.D4}}
            scr[ckb + (ci * DV + c{{$cc}}) * D4 + {{$m}}u] = s{{$cc}}_{{$m}};
{{- end}}
{{- end}}
        }
        let row = b * p.t + tau;
        let gi = row * p.hv + j;
        {{template "gdrl_kq" (dict "P" $ "Q" false)}}
        {{template "gdrl_step" (dict "P" $ "Keep" -1 "Out" false)}}
    }

    // 2. Chunk by chunk in reverse.
    for (var cr = 0u; cr < p.nck; cr++) {
        let ci = p.nck - 1u - cr;
        let t0 = ci * CL;
{{- range $cc := seq .C}}
{{- range $m := seq $.D4}}
        s{{$cc}}_{{$m}} = select(vec4<f32>(0.0), scr[ckb + (ci * DV + c{{$cc}}) * D4 + {{$m}}u], ci > 0u);
{{- end}}
{{- end}}
{{- range $i := seq .CL}}
        if (t0 + {{$i}}u < p.t) {
            let row = b * p.t + t0 + {{$i}}u;
            let gi = row * p.hv + j;
            {{template "gdrl_kq" (dict "P" $ "Q" false)}}
            {{template "gdrl_step" (dict "P" $ "Keep" $i "Out" false)}}
        }
{{- end}}
{{- range $r := seq .CL}}{{$i := sub (sub $.CL 1) $r}}
        if (t0 + {{$i}}u < p.t) {
            let row = b * p.t + t0 + {{$i}}u;
            let gi = row * p.hv + j;
            {{template "gdrl_kq" (dict "P" $ "Q" true)}}
            {{template "gdrl_back" (dict "P" $ "I" $i)}}
        }
{{- end}}
    }
}
{{- else}}

// Forward.

{{template "gdr_forward_io" .}}
{{template "gdrl_head" .}}
    for (var tau = 0u; tau < p.t; tau++) {
        let row = b * p.t + tau;
        let gi = row * p.hv + j;
        {{template "gdrl_kq" (dict "P" $ "Q" true)}}
        {{template "gdrl_step" (dict "P" $ "Keep" -1 "Out" true)}}
    }
{{- if .WantState}}
    let sbase = (b * p.hv + j) * {{.DK}}u * DV;
{{- range $cc := seq .C}}
    if (cl + {{$cc}}u < DV) {
{{- range $m := seq $.D4}}
        state[sbase + {{mul 4 $m}}u * DV + c{{$cc}}] = s{{$cc}}_{{$m}}.x;
        state[sbase + {{add (mul 4 $m) 1}}u * DV + c{{$cc}}] = s{{$cc}}_{{$m}}.y;
        state[sbase + {{add (mul 4 $m) 2}}u * DV + c{{$cc}}] = s{{$cc}}_{{$m}}.z;
        state[sbase + {{add (mul 4 $m) 3}}u * DV + c{{$cc}}] = s{{$cc}}_{{$m}}.w;
{{- end}}
    }
{{- end}}
{{- end}}
}
{{- end}}
{{- /* gdrl_head: the constants, the entry point and its first statements, shared by the
forward and the backward: the workgroup's (window b, value head j, key head kh, slice), the
lane's columns c{cc} (clamped to DV − 1) and state registers s{cc}_{m} = 0, and the k/q
groups gm{i} this lane loads (ok{i}: inside D4; gc{i}: clamped). */}}
{{- define "gdrl_head"}}
const D4: u32 = {{.D4}}u;
const DV: u32 = {{.DV}}u;

{{template "gdr_main" (dict "WG" .S "Lanes" true "N" (printf "%du" .NSLICE) "I" "slice" "Notes" true "KH" true)}}
    let cl = slice * {{mul .S .C}}u + sl * {{.C}}u;
{{- range $cc := seq .C}}
    let c{{$cc}} = min(cl + {{$cc}}u, DV - 1u);
{{- range $m := seq $.D4}}
    var s{{$cc}}_{{$m}} = vec4<f32>(0.0);
{{- end}}
{{- end}}
{{- range $i := seq .KL}}
    let gm{{$i}} = sl + {{mul $.S $i}}u;
    let ok{{$i}} = gm{{$i}} < D4;
    let gc{{$i}} = min(gm{{$i}}, D4 - 1u);
{{- end}}
{{- end}}
{{- /* gdrl_kq: token row's gates (decay, bt) and k_t (with Q, q_t too) as broadcast vec4
groups k{m} (q{m}); row and gi in scope. */}}
{{- define "gdrl_kq"}}
{{- $P := .P}}
            let src = (row * p.hk + kh) * D4;
{{- range $i := seq $P.KL}}
            let kl{{$i}} = select(vec4<f32>(0.0), k[src + gc{{$i}}], ok{{$i}});
{{- if $.Q}}
            let ql{{$i}} = select(vec4<f32>(0.0), q[src + gc{{$i}}], ok{{$i}});
{{- end}}
{{- end}}
{{- range $m := seq $P.D4}}
            let k{{$m}} = subgroupBroadcast(kl{{div $m $P.S}}, {{mod $m $P.S}}u);
{{- if $.Q}}
            let q{{$m}} = subgroupBroadcast(ql{{div $m $P.S}}, {{mod $m $P.S}}u);
{{- end}}
{{- end}}
            let decay = exp(g[gi]);
            let bt = beta[gi];
{{- end}}
{{- /* gdrl_step: one forward token of the lane's columns after gdrl_kq: S̃ = e^g·S,
w = v − S̃ᵀk, S = S̃ + k ⊗ β·w; with Keep = i ≥ 0, S̃ and w are kept in st{i}_… and w{i}_…;
with Out, o_t = Sᵀq is written. */}}
{{- define "gdrl_step"}}
{{- $P := .P}}
{{- range $cc := seq $P.C}}
            {
                var a = vec4<f32>(0.0);
{{- range $m := seq $P.D4}}
                s{{$cc}}_{{$m}} = s{{$cc}}_{{$m}} * decay;
                a = fma(s{{$cc}}_{{$m}}, k{{$m}}, a);
{{- if ge $.Keep 0}}
                st{{$.Keep}}_{{$cc}}_{{$m}} = s{{$cc}}_{{$m}};
{{- end}}
{{- end}}
                let w = v[gi * DV + c{{$cc}}] - ((a.x + a.y) + (a.z + a.w));
{{- if ge $.Keep 0}}
                w{{$.Keep}}_{{$cc}} = w;
{{- end}}
                let u = bt * w;
{{- if $.Out}}
                var ov = vec4<f32>(0.0);
{{- end}}
{{- range $m := seq $P.D4}}
                s{{$cc}}_{{$m}} = fma(k{{$m}}, vec4<f32>(u), s{{$cc}}_{{$m}});
{{- if $.Out}}
                ov = fma(s{{$cc}}_{{$m}}, q{{$m}}, ov);
{{- end}}
{{- end}}
{{- if $.Out}}
                if (cl + {{$cc}}u < DV) {
                    o[gi * DV + c{{$cc}}] = (ov.x + ov.y) + (ov.z + ov.w);
                }
{{- end}}
            }
{{- end}}
{{- end}}
{{- /* gdrl_back: one token i of the chunk stepped back (after gdrl_kq with Q; row, gi in
scope): the gradients of the lane's columns from the kept st{i}, w{i} and the running dS, and
the slice's column sums of dq, dk, dβ, dg into part and part1. */}}
{{- define "gdrl_back"}}
{{- $P := .P}}{{$i := .I}}
{{- range $m := seq $P.D4}}
            var dq{{$m}} = vec4<f32>(0.0);
            var dk{{$m}} = vec4<f32>(0.0);
{{- end}}
            var dbs = 0.0;
            var dgv = vec4<f32>(0.0);
{{- range $cc := seq $P.C}}
            {
                let w = w{{$i}}_{{$cc}};
                let u = bt * w;
                let dov = select(0.0, dout[gi * DV + c{{$cc}}], live{{$cc}});
                var du4 = vec4<f32>(0.0);
{{- range $m := seq $P.D4}}
                let st{{$m}} = st{{$i}}_{{$cc}}_{{$m}};
                let sn{{$m}} = fma(k{{$m}}, vec4<f32>(u), st{{$m}});
                ds{{$cc}}_{{$m}} = fma(q{{$m}}, vec4<f32>(dov), ds{{$cc}}_{{$m}});
                dq{{$m}} = fma(sn{{$m}}, vec4<f32>(dov), dq{{$m}});
                du4 = fma(ds{{$cc}}_{{$m}}, k{{$m}}, du4);
{{- end}}
                let du = (du4.x + du4.y) + (du4.z + du4.w);
                if (live{{$cc}}) {
                    dval[gi * DV + c{{$cc}}] = bt * du;
                }
                dbs += du * w;
                let dsk = -bt * du;
{{- range $m := seq $P.D4}}
                dk{{$m}} = fma(ds{{$cc}}_{{$m}}, vec4<f32>(u), dk{{$m}});
                dk{{$m}} = fma(st{{$m}}, vec4<f32>(dsk), dk{{$m}});
                ds{{$cc}}_{{$m}} = fma(k{{$m}}, vec4<f32>(dsk), ds{{$cc}}_{{$m}});
                dgv = fma(ds{{$cc}}_{{$m}}, st{{$m}}, dgv);
                ds{{$cc}}_{{$m}} = ds{{$cc}}_{{$m}} * decay;
{{- end}}
            }
{{- end}}
            // The slice's column sums, added over the lanes; lane l writes vec4 groups l + S·i.
            let pb = (slice * rows + row) * p.hv + j;
{{- range $m := seq $P.D4}}
            let sq{{$m}} = subgroupAdd(dq{{$m}});
            let sk{{$m}} = subgroupAdd(dk{{$m}});
{{- end}}
{{- range $x := seq $P.KL}}
            if (ok{{$x}}) {
                var oq = sq{{mul $x $P.S}};
                var ok4 = sk{{mul $x $P.S}};
{{- range $l := seq $P.S}}{{$m := add (mul $x $P.S) $l}}{{if and (gt $l 0) (lt $m $P.D4)}}
                if (sl == {{$l}}u) {
                    oq = sq{{$m}};
                    ok4 = sk{{$m}};
                }
{{- end}}{{end}}
                part[pb * D4 + gm{{$x}}] = oq;
                part[(({{$P.NSLICE}}u * rows + slice * rows + row) * p.hv + j) * D4 + gm{{$x}}] = ok4;
            }
{{- end}}
            let db = subgroupAdd(dbs);
            let dgs = subgroupAdd((dgv.x + dgv.y) + (dgv.z + dgv.w));
            if (sl == 0u) {
                part1[pb] = db;
                part1[{{$P.NSLICE}}u * rows * p.hv + pb] = dgs;
            }
{{- end}}
