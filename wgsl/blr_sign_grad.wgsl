// BLRSignGrad, the straight-through gradient of one sign matrix of a BLR path (DESIGN.md
// "Sign learning"), a GEMM that reduces over rows:
//   out[i, j] = sa[i]·sb[j]·Σ_row a[row, i]·b[row, j]
// a f32 [rows, NA], b f32 [rows, NB], sa f32 [NA], sb f32 [NB], out f32 [NA, NB] (overwritten).
// For U: a = dy, b = t1, sa = h, sb = ℓ (G_U [m, r]); for V: a = dt2, b = x, sa = ℓ, sb = g
// (G_V [r, n]). With Mask, out is exactly 0 where the rank index (j when MaskCols, else i)
// is padded (mask == 0). Three forms (template Form):
//   simple  (the parity twin): one invocation per element of out, WG per workgroup, one fma
//           chain over rows in order;
//   blocked: a workgroup of 16×16 invocations owns a BM×BN block of out (BM = 16·TM rows i,
//           BN = 64·TN4 columns j); per chunk of 16 rows it stages a[rows, i-block] and
//           b[rows, j-block] in workgroup memory (coalesced loads; every slot written, zero
//           outside the matrix, before the barrier) and each invocation adds 16 fmas per
//           output to TM×TN4 vec4 accumulators (rows i = lid.y + 16·u, column groups
//           lid.x + 16·q: conflict-free reads). The rows are split into Grid.z ranges of rs
//           rows (a multiple of 16): with one range (not Split) it writes out itself, bit-
//           identical to simple (each output the same fma chain over rows in order); Split
//           writes each range's raw sums to part [z][NA][NB] for
//   reduce:  out[i, j] = sa[i]·sb[j]·Σ_z part[z, i, j], summed in z order (deterministic).
// Template parameters: Form, Mask, MaskCols (bools), WG (simple, reduce), TM, TN4, Split
// (blocked).

{{- if eq .Form "reduce"}}
@group(0) @binding(0) var<storage, read> part: array<f32>;
{{- else}}
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
{{- end}}
{{- if .Split}}
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
{{- else}}
{{- $o := 1}}{{if ne .Form "reduce"}}{{$o = 2}}{{end}}
@group(0) @binding({{$o}}) var<storage, read> sa: array<f32>;
@group(0) @binding({{add $o 1}}) var<storage, read> sb: array<f32>;
@group(0) @binding({{add $o 2}}) var<storage, read_write> out: array<f32>;
{{- if .Mask}}
@group(0) @binding({{add $o 3}}) var<storage, read> mask: array<u32>;
@group(0) @binding({{add $o 4}}) var<uniform> p: Params;
{{- else}}
@group(0) @binding({{add $o 3}}) var<uniform> p: Params;
{{- end}}
{{- end}}

// rows: the rows of a and b (reduce: the number of ranges); rs: rows per range (blocked).
struct Params {
    rows: u32,
    na: u32,
    nb: u32,
    rs: u32,
};

{{- /* sign_grad_final: the store of the finished sum s of out[ii, jj] (element index e): 0 where
the rank is padded, else s·(sa·sb). Keys: Mask, MaskCols, S (the sum), E (the index). */ -}}
{{define "sign_grad_final"}}
{{- if .Mask}}
{{- if .MaskCols}}
            if (mask[jj] == 0u) {
{{- else}}
            if (mask[ii] == 0u) {
{{- end}}
                out[{{.E}}] = 0.0;
            } else {
                out[{{.E}}] = {{.S}} * (sa[ii] * sb[jj]);
            }
{{- else}}
            out[{{.E}}] = {{.S}} * (sa[ii] * sb[jj]);
{{- end}}
{{- end}}

{{- if eq .Form "blocked"}}
{{- $BM := mul 16 .TM}}{{$BN4 := mul 16 .TN4}}

const BM = {{$BM}}u;
const BN4 = {{$BN4}}u; // BN / 4
var<workgroup> ta: array<f32, {{mul 16 $BM}}>;        // [row in chunk][i in block]
var<workgroup> tb: array<vec4<f32>, {{mul 16 $BN4}}>; // [row in chunk][j group in block]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.y * 16u + lid.x;
    let i0 = wid.y * BM;
    let j0 = wid.x * BN4 * 4u;
    let rbeg = wid.z * p.rs;
    let rend = min(rbeg + p.rs, p.rows);
{{- range $u := seq .TM}}{{range $q := seq $.TN4}}
    var acc_{{$u}}_{{$q}} = vec4<f32>(0.0);
{{- end}}{{end}}
    for (var r0 = rbeg; r0 < rend; r0 += 16u) {
{{- range $u := seq .TM}}
        {
            let s = t + {{mul 256 $u}}u;
            let row = r0 + s / BM;
            let col = i0 + s % BM;
            var v = 0.0;
            if (row < rend && col < p.na) {
                v = a[row * p.na + col];
            }
            ta[s] = v;
        }
{{- end}}
{{- range $q := seq .TN4}}
        {
            let s = t + {{mul 256 $q}}u;
            let row = r0 + s / BN4;
            let col = j0 + 4u * (s % BN4);
            var v = vec4<f32>(0.0);
            if (row < rend) {
                let e = row * p.nb + col;
                if (col + 3u < p.nb) {
                    v = vec4<f32>(b[e], b[e + 1u], b[e + 2u], b[e + 3u]);
                } else {
                    if (col < p.nb) {
                        v.x = b[e];
                    }
                    if (col + 1u < p.nb) {
                        v.y = b[e + 1u];
                    }
                    if (col + 2u < p.nb) {
                        v.z = b[e + 2u];
                    }
                }
            }
            tb[s] = v;
        }
{{- end}}
        workgroupBarrier();
        let n = min(16u, rend - r0);
        for (var k = 0u; k < n; k++) {
{{- range $u := seq .TM}}
            let a{{$u}} = vec4<f32>(ta[k * BM + lid.y + {{mul 16 $u}}u]);
{{- end}}
{{- range $q := seq .TN4}}
            let b{{$q}} = tb[k * BN4 + lid.x + {{mul 16 $q}}u];
{{- end}}
{{- range $u := seq .TM}}{{range $q := seq $.TN4}}
            acc_{{$u}}_{{$q}} = fma(a{{$u}}, b{{$q}}, acc_{{$u}}_{{$q}});
{{- end}}{{end}}
        }
        workgroupBarrier();
    }
{{- range $u := seq .TM}}
    {
        let ii = i0 + lid.y + {{mul 16 $u}}u;
        if (ii < p.na) {
{{- range $q := seq $.TN4}}
{{- range $c := seq 4}}
            {
                let jj = j0 + 4u * (lid.x + {{mul 16 $q}}u) + {{$c}}u;
                if (jj < p.nb) {
{{- $s := printf "acc_%d_%d.%c" $u $q (index "xyzw" $c)}}
{{- if $.Split}}
                    out[(wid.z * p.na + ii) * p.nb + jj] = {{$s}};
{{- else}}
{{- template "sign_grad_final" (dict "Mask" $.Mask "MaskCols" $.MaskCols "S" $s "E" "ii * p.nb + jj")}}
{{- end}}
                }
            }
{{- end}}
{{- end}}
        }
    }
{{- end}}
}
{{- else if eq .Form "reduce"}}

{{template "ew_main_rc" (dict "WG" .WG "N" "p.na * p.nb" "Cols" "p.nb" "R" "ii" "C" "jj")}}
    let plane = p.na * p.nb;
    var s = 0.0;
    for (var z = 0u; z < p.rows; z++) {
        s += part[z * plane + i];
    }
{{- template "sign_grad_final" (dict "Mask" .Mask "MaskCols" .MaskCols "S" "s" "E" "i")}}
}
{{- else}}

{{template "ew_main_rc" (dict "WG" .WG "N" "p.na * p.nb" "Cols" "p.nb" "R" "ii" "C" "jj")}}
    var s = 0.0;
    for (var row = 0u; row < p.rows; row++) {
        s = fma(a[row * p.na + ii], b[row * p.nb + jj], s);
    }
{{- template "sign_grad_final" (dict "Mask" .Mask "MaskCols" .MaskCols "S" "s" "E" "i")}}
}
{{- end}}
