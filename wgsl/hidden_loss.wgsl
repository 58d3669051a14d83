// HiddenLoss: the hidden-state loss of one layer's output per token row of n values (s the
// student's hidden state, t the teacher's; host.HiddenLoss), with the four row sums
// d2 = Σ(s−t)², t2 = Σt², s2 = Σs², st = Σs·t and eps = p.eps:
//   normalised MSE:  e = d2 / (t2 + eps),                   ∂e/∂s_c = 2·(s_c − t_c) / (t2 + eps)
//   cosine:          e = 1 − st / (ns·nt), ns = √(s2+eps), nt = √(t2+eps),
//                    ∂e/∂s_c = cos·s_c / ns² − t_c / (ns·nt),  cos = st / (ns·nt)
// loss[p.off + r] = e (written), and with Grad dh[r, c] += p.scale·∂e/∂s_c (accumulated, so
// dh may be the residual gradient of the backward).
// hs, dh: f32 [rows, n] row-major; ht: f32, or f16 packed two per u32 (F16), [rows, n];
// loss: f32 with at least p.off + rows elements. One workgroup of WG threads per row, the
// four sums reduced as one vec4 tree, or its lanes form (reduce.wgsl: one subgroup per row,
// the same bits). Template parameters: WG (power of two), Cosine, F16, Grad (bool), Lanes,
// S, Q.

@group(0) @binding(0) var<storage, read> hs: array<f32>;
@group(0) @binding(1) var<storage, read> ht: array<{{if .F16}}u32{{else}}f32{{end}}>;
{{- if .Grad}}
@group(0) @binding(2) var<storage, read_write> dh: array<f32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
{{- else}}
@group(0) @binding(2) var<storage, read_write> loss: array<f32>;
{{- end}}

struct Params {
    rows: u32,
    n: u32,
    off: u32,
    eps: f32,
    scale: f32,
};
@group(0) @binding({{if .Grad}}4{{else}}3{{end}}) var<uniform> p: Params;


// tv is the teacher's value at element i of ht.
fn tv(i: u32) -> f32 {
{{- if .F16}}
    let pair = unpack2x16float(ht[i >> 1u]);
    return select(pair.x, pair.y, (i & 1u) == 1u);
{{- else}}
    return ht[i];
{{- end}}
}

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "r" "Count" "p.rows" "Tree" "vec4<f32>")}}
    let base = r * p.n;
{{- range $q := seq .Q}}
    var s{{$q}} = vec4<f32>(0.0);
    for (var c = {{template "red_l" (dict "P" $ "Q" $q)}}; c < p.n; c += {{$.WG}}u) {
        let sv = hs[base + c];
        let t = tv(base + c);
        let d = sv - t;
        s{{$q}} += vec4<f32>(d * d, t * t, sv * sv, sv * t);
    }
{{- end}}
{{- template "red_row_sum" (dict "P" . "Buf" "partial" "U" "s" "Out" "tot")}}
{{- if .Cosine}}
    let ns = sqrt(tot.z + p.eps);
    let nt = sqrt(tot.y + p.eps);
    let cs = tot.w / (ns * nt);
    if (lane_first) {
        loss[p.off + r] = 1.0 - cs;
    }
{{- if .Grad}}
    let ks = p.scale * cs / (ns * ns);
    let kt = p.scale / (ns * nt);
    for (var c = lane0; c < p.n; c += RSTEP) {
        dh[base + c] += ks * hs[base + c] - kt * tv(base + c);
    }
{{- end}}
{{- else}}
    let den = tot.y + p.eps;
    if (lane_first) {
        loss[p.off + r] = tot.x / den;
    }
{{- if .Grad}}
    let k = 2.0 * p.scale / den;
    for (var c = lane0; c < p.n; c += RSTEP) {
        dh[base + c] += k * (hs[base + c] - tv(base + c));
    }
{{- end}}
{{- end}}
}
