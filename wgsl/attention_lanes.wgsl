// Causal softmax attention with grouped-query heads in the lane-blocked form of CPU adapters
// (gemm_lanes.wgsl says why): AttentionLanes (Pass 0, the forward, as attention.wgsl) and
// AttentionBackwardLanes (Pass 1: D and dq; Pass 2: dk and dv), with scale = HD^−½,
//   s_ij = (scale·q_i)·k_j for j ≤ i in the same window, p_ij = exp(s_ij − lse_i),
//   out_i = Σ_j p_ij·v_j,   D_i = dout_i·out_i,   ds_ij = p_ij·(dout_i·v_j − D_i),
//   dq_i = scale·Σ_j ds_ij·k_j,   dk_j = Σ_i ds_ij·(scale·q_i),   dv_j = Σ_i p_ij·dout_i,
// query head h reading KV head h / (nh/nkv); dk and dv summed over the group's query heads in
// head order (deterministic). Layouts (row-major f32, HD a multiple of 4): q, out, dout, dq
// [nb·t, nh, HD]; k, v, dk, dv [nb·t, nkv, HD]; lse, D [nb·t, nh].
//
// One workgroup = one subgroup of S lanes. Passes 0 and 1: per (window, query head, block of
// S query rows), lane l owns row i0 + l (its q, accumulators in D4 = HD/4 named vec4
// registers) and goes through the keys j ≤ its block's last row S at a time: lane l loads
// key j0 + l's k (and v) row, every lane reads every key's row through subgroupBroadcast.
// Pass 2: per (window, KV head, block of S key rows), lane l owns key j0 + l and goes through
// the group's query heads and the query rows i ≥ its block's first key S at a time. No
// workgroup memory, no barrier. Template parameters: S, HD, D4, Pass.

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
{{- if eq .Pass 0}}
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
{{- else if eq .Pass 1}}
@group(0) @binding(3) var<storage, read> out: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> dd: array<f32>;
{{- else}}
@group(0) @binding(3) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> dd: array<f32>;
@group(0) @binding(6) var<storage, read_write> dk: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> dv: array<vec4<f32>>;
{{- end}}

{{- template "attn_params"}}
@group(0) @binding({{if eq .Pass 0}}5{{else}}8{{end}}) var<uniform> p: Params;

const D4: u32 = {{.D4}}u;

{{- $rows := printf "%du" .S}}
{{- if le .Pass 1}}
{{template "attn_query_main" (dict "WG" .S "Lanes" true "Rows" $rows "N" "nblk" "Blk" "qb" "Lane" "" "R0" "i0" "R" "i")}}
    let qrow = ((b * p.t + min(i, p.t - 1u)) * p.nh + h) * D4;
{{- range $m := seq .D4}}
    let q{{$m}} = q[qrow + {{$m}}u] * p.scale;
    var acc{{$m}} = vec4<f32>(0.0);
{{- end}}
{{- if eq .Pass 0}}
    var mx = 0.0;
    var l = 0.0;
{{- else}}
    // D_i = dout_i·out_i and lse_i of the lane's row.
    let li = (b * p.t + min(i, p.t - 1u)) * p.nh + h;
    let lsei = lse[li];
    var d4 = vec4<f32>(0.0);
{{- range $m := seq .D4}}
    let do{{$m}} = dout[qrow + {{$m}}u];
    d4 = fma(do{{$m}}, out[qrow + {{$m}}u], d4);
{{- end}}
    let di = (d4.x + d4.y) + (d4.z + d4.w);
{{- end}}
    let ilast = min(i0 + {{.S}}u, p.t) - 1u;
    for (var j0 = 0u; j0 <= ilast; j0 += {{.S}}u) {
        // Lane l's key row j0 + l (clamped; masked below).
        let krow = ((b * p.t + min(j0 + sl, p.t - 1u)) * p.nkv + kh) * D4;
{{- range $m := seq .D4}}
        let kl{{$m}} = k[krow + {{$m}}u];
        let vl{{$m}} = v[krow + {{$m}}u];
{{- end}}
{{- range $jj := seq .S}}
        var s{{$jj}} = 0.0;
        {
            var a = vec4<f32>(0.0);
{{- range $m := seq $.D4}}
            a = fma(q{{$m}}, subgroupBroadcast(kl{{$m}}, {{$jj}}u), a);
{{- end}}
            s{{$jj}} = (a.x + a.y) + (a.z + a.w);
        }
        let ok{{$jj}} = j0 + {{$jj}}u <= i;
{{- end}}
{{- if eq .Pass 0}}
        // Online softmax over the block's keys j ≤ i (the first block always has key 0).
        var bmax = select(mx, s0, j0 == 0u);
{{- range $jj := seq .S}}
        if (ok{{$jj}}) {
            bmax = max(bmax, s{{$jj}});
        }
{{- end}}
        let alpha = select(exp(mx - bmax), 0.0, j0 == 0u);
        var psum = 0.0;
{{- range $jj := seq .S}}
        let p{{$jj}} = select(0.0, exp(s{{$jj}} - bmax), ok{{$jj}});
        psum += p{{$jj}};
{{- end}}
        l = l * alpha + psum;
        mx = bmax;
{{- range $m := seq .D4}}
        {
            var a = acc{{$m}} * alpha;
{{- range $jj := seq $.S}}
            a = fma(vec4<f32>(p{{$jj}}), subgroupBroadcast(vl{{$m}}, {{$jj}}u), a);
{{- end}}
            acc{{$m}} = a;
        }
{{- end}}
{{- else}}
{{- range $jj := seq .S}}
        var ds{{$jj}} = 0.0;
        {
            var a = vec4<f32>(0.0);
{{- range $m := seq $.D4}}
            a = fma(do{{$m}}, subgroupBroadcast(vl{{$m}}, {{$jj}}u), a);
{{- end}}
            let pj = select(0.0, exp(s{{$jj}} - lsei), ok{{$jj}});
            ds{{$jj}} = pj * (((a.x + a.y) + (a.z + a.w)) - di);
        }
{{- end}}
{{- range $m := seq .D4}}
        {
            var a = acc{{$m}};
{{- range $jj := seq $.S}}
            a = fma(vec4<f32>(ds{{$jj}}), subgroupBroadcast(kl{{$m}}, {{$jj}}u), a);
{{- end}}
            acc{{$m}} = a;
        }
{{- end}}
{{- end}}
    }
    if (live) {
{{- if eq .Pass 0}}
        let inv = 1.0 / l;
{{- range $m := seq .D4}}
        out[qrow + {{$m}}u] = acc{{$m}} * inv;
{{- end}}
        lse[(b * p.t + i) * p.nh + h] = mx + log(l);
{{- else}}
{{- range $m := seq .D4}}
        dq[qrow + {{$m}}u] = acc{{$m}} * p.scale;
{{- end}}
        dd[li] = di;
{{- end}}
    }
{{- else}}
{{template "ew_blocks" (dict "WG" .S "Lanes" true "Count" (printf "(p.t + %s - 1u) / %s" $rows $rows) "N" "nblk" "Heads" "p.nkv" "I" "kb" "BH" "bk" "H" "kh" "Notes" true)}}
    // Pass 2: lane l owns key j = j0 + l of KV head kh.
    let j0 = kb * {{.S}}u;
    let j = j0 + sl;
    let live = j < p.t;
    let krow = ((b * p.t + min(j, p.t - 1u)) * p.nkv + kh) * D4;
{{- range $m := seq .D4}}
    let k{{$m}} = k[krow + {{$m}}u];
    let v{{$m}} = v[krow + {{$m}}u];
    var dka{{$m}} = vec4<f32>(0.0);
    var dva{{$m}} = vec4<f32>(0.0);
{{- end}}
    let group = p.nh / p.nkv;
    for (var hg = 0u; hg < group; hg++) {
        let h = kh * group + hg;
        for (var i0 = j0; i0 < p.t; i0 += {{.S}}u) {
            // Lane l's query row i0 + l (clamped; masked below).
            let ir = min(i0 + sl, p.t - 1u);
            let li = (b * p.t + ir) * p.nh + h;
            let qrow = li * D4;
            let lsel = lse[li];
            let ddl = dd[li];
{{- range $m := seq .D4}}
            let ql{{$m}} = q[qrow + {{$m}}u] * p.scale;
            let dol{{$m}} = dout[qrow + {{$m}}u];
{{- end}}
{{- range $ii := seq .S}}
            {
                var a = vec4<f32>(0.0);
                var b4 = vec4<f32>(0.0);
{{- range $m := seq $.D4}}
                a = fma(subgroupBroadcast(ql{{$m}}, {{$ii}}u), k{{$m}}, a);
                b4 = fma(subgroupBroadcast(dol{{$m}}, {{$ii}}u), v{{$m}}, b4);
{{- end}}
                let ok = j <= i0 + {{$ii}}u && i0 + {{$ii}}u < p.t;
                let pi = select(0.0, exp(((a.x + a.y) + (a.z + a.w)) - subgroupBroadcast(lsel, {{$ii}}u)), ok);
                let dsi = pi * (((b4.x + b4.y) + (b4.z + b4.w)) - subgroupBroadcast(ddl, {{$ii}}u));
{{- range $m := seq $.D4}}
                dva{{$m}} = fma(vec4<f32>(pi), subgroupBroadcast(dol{{$m}}, {{$ii}}u), dva{{$m}});
                dka{{$m}} = fma(vec4<f32>(dsi), subgroupBroadcast(ql{{$m}}, {{$ii}}u), dka{{$m}});
{{- end}}
            }
{{- end}}
        }
    }
    if (live) {
{{- range $m := seq .D4}}
        dk[krow + {{$m}}u] = dka{{$m}};
        dv[krow + {{$m}}u] = dva{{$m}};
{{- end}}
    }
{{- end}}
}
