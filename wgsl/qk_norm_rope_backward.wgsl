// QKNormRoPEBackward, the row part: the backward of QKNormRoPE (host.QKNormRoPEBackward).
// The rotation is orthogonal, so the gradient of the normed vector n is dy rotated back:
//   dn_i       =  dy_i·cos(p·f_i) + dy_{i+R/2}·sin(p·f_i)     i < R/2
//   dn_{i+R/2} = −dy_i·sin(p·f_i) + dy_{i+R/2}·cos(p·f_i)
//   dn_i       =  dy_i                                      i ≥ R
// then the zero-centred RMSNorm backward over HD per (row, head), inv = rsqrt(mean(x²)+eps):
//   dx_i = inv·(1+w_i)·dn_i − inv³·x_i·(1/HD)·Σ_j (1+w_j)·dn_j·x_j
// It writes dx, dn and inv for the gain gradient dw_i += Σ_(row,head) dn_i·x_i·inv
// (grad_col_dot.wgsl).
// x, dy, dx, dn: f32 [rows, heads, HD] row-major; w: f32 [HD]; tab: f32 [2, t, R/2] (the
// forward's cos/sin table); inv: f32 [rows·heads]. p = row mod t.
// One workgroup of WG threads per (row, head) (linear index wid.x + wid.y·nwg.x); both sums
// reduced in workgroup memory (every slot written before the barrier), or its lanes form
// (reduce.wgsl: one subgroup per group, the same bits). Template parameters: WG (power of
// two), Lanes, S, Q, RW.
// RW: the workgroup form's rows a workgroup (reduce.wgsl's red_row_open; 1 for long rows).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> tab: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> dn: array<f32>;
@group(0) @binding(6) var<storage, read_write> inv_out: array<f32>;
{{template "rope_params"}}
@group(0) @binding(7) var<uniform> p: Params;

// backRot returns dn at dim c of the (row, head) starting at base, at window position pos.
fn backRot(base: u32, c: u32, pos: u32) -> f32 {
    let g = dy[base + c];
    if (c >= 2u * p.half) {
        return g;
    }
{{- template "rope_pair" (dict "I" "    ")}}
    let gp = dy[base + pc];
    return select(g * cs - gp * sn, g * cs + gp * sn, first);
}

{{template "red_row_open" (dict "Lanes" .Lanes "WG" .WG "S" .S "RW" .RW "R" "gi" "Count" "p.groups" "Tree" "vec2<f32>")}}
    let base = gi * p.hd;
    let pos = (gi / p.heads) % p.t;
{{- range $q := seq .Q}}
    var s{{$q}} = vec2<f32>(0.0);
    for (var c = {{template "red_l" (dict "P" $ "Q" $q)}}; c < p.hd; c += {{$.WG}}u) {
        let v = x[base + c];
        let g = backRot(base, c, pos);
        dn[base + c] = g;
        s{{$q}} += vec2<f32>(v * v, (1.0 + w[c]) * g * v);
    }
{{- end}}
{{- template "red_row_sum" (dict "P" . "Buf" "partial" "U" "s" "Out" "tot")}}
    let inv = inverseSqrt(tot.x / f32(p.hd) + p.eps);
    let k = inv * inv * inv * tot.y / f32(p.hd);
    // Each invocation reads back only the dn values it wrote itself (in the lanes form too:
    // element c was written by thread c mod WG, one of lane c mod S's).
    for (var c = lane0; c < p.hd; c += RSTEP) {
        dx[base + c] = inv * (1.0 + w[c]) * dn[base + c] - k * x[base + c];
    }
    if (lane_first) {
        inv_out[gi] = inv;
    }
}
