// CoopmatPackHeads: an operand of the cooperative-matrix attention and delta-rule kernels
// (gpu/coopmat_attention.go, gpu/coopmat_delta.go), f32 → f16 with a power-of-two scale per
// block of R = 64 rows of one head. x holds, per window b < nb and head h < heads, t rows
// of hd values, each row the stride values from col0 on (stride = hd, col0 = 0 for a plain
// tensor): element (b, h, τ, c) at x[((b·t + τ)·heads + h)·stride + col0 + c] (token-major:
// q, k, v, dout [nb·t, heads, hd]) or, with HeadMajor, at x[((b·heads + h)·t + τ)·stride +
// col0 + c] (the delta rule's scratch rows (b·hv + j)·t + τ, or its per-chunk states as
// windows of dk rows). For the block of rows τ ∈ [64·blk, 64·blk + 64)
// with amax = max |x| over its rows τ < t and columns c < hd, e = clamp(15 − frexp(amax).exp,
// −126, 126) puts amax·2^e in [2¹⁴, 2¹⁵) (0 for an all-zero or non-finite block) and
//   x16[b, h, τ, c] = f16(x[b, h, τ, c]·2^e) for τ < t, c < hd, 0 for t ≤ τ < tp or hd ≤ c < hp;
//   scale[b, h, blk] = 2^−e,
// so that a product over these rows or columns is undone exactly by the block's scale; the
// only error is f16's rounding of each value, ≤ 2⁻¹¹ relative above amax·2⁻²⁹ (below it the
// f16 subnormal step, ≤ amax·2⁻³⁹). x16: u32 words of f16 pairs, [nb, heads, tp, hp/2]
// (element 2w in the low half of word w; tp = 64·nblk ≥ t, hp even); scale: f32
// [nb, heads, nblk]. One workgroup of WG threads per block (a 2-D grid past 65535).
// Template parameters: WG (a power of two), HeadMajor, and HP4: 0 for the general form (4-byte
// loads, integer division per element, the block read twice — the simple twin), else
// hp/4 (hd, hp, stride and col0 multiples of 4): each invocation loads its NV = 64·HP4/WG
// 16-byte vectors of the block into registers at once (all in flight together, one read,
// divisions by the constant HP4), takes their maximum and converts them from there, writing
// 8 bytes per vector. The two forms give the same bits (the maximum is exact, the conversion
// per element the same; TestCoopmatPackHeadsForms).

{{- if .HP4}}
@group(0) @binding(0) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> x16v: array<vec2<u32>>;
{{- else}}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> x16: array<u32>;
{{- end}}
@group(0) @binding(2) var<storage, read_write> scale: array<f32>;

struct Params {
    t: u32,
    heads: u32,
    hd: u32,
    hp: u32,
    nblk: u32,
    count: u32, // nb·heads·nblk
    stride: u32,
    col0: u32,
};
@group(0) @binding(3) var<uniform> p: Params;

const R: u32 = 64u;

var<workgroup> partial: array<f32, {{.WG}}>;

{{- if .HP4}}

// val4 is x at block row r and columns 4·c4 … 4·c4 + 3 of head bh, 0 outside x (hd is a
// multiple of 4, so a vector is all inside or all outside).
fn val4(bh: u32, blk: u32, r: u32, c4: u32) -> vec4<f32> {
    let tau = blk * R + r;
    if (tau >= p.t || 4u * c4 >= p.hd) {
        return vec4<f32>(0.0);
    }
{{- if .HeadMajor}}
    let e = (bh * p.t + tau) * p.stride + p.col0 + 4u * c4;
{{- else}}
    let b = bh / p.heads;
    let h = bh % p.heads;
    let e = ((b * p.t + tau) * p.heads + h) * p.stride + p.col0 + 4u * c4;
{{- end}}
    return x4[e / 4u];
}

{{template "red_main" (dict "WG" .WG "R" "i" "Count" "p.count")}}
    let blk = i % p.nblk;
    let bh = i / p.nblk;
{{- range $j := seq .NV}}
    let v{{$j}} = val4(bh, blk, (lid + {{mul $j $.WG}}u) / {{$.HP4}}u, (lid + {{mul $j $.WG}}u) % {{$.HP4}}u);
{{- end}}
    var mx = 0.0;
{{- range $j := seq .NV}}
    let a{{$j}} = abs(v{{$j}});
    mx = max(mx, max(max(a{{$j}}.x, a{{$j}}.y), max(a{{$j}}.z, a{{$j}}.w)));
{{- end}}
{{- template "red_pow2_scale" (dict "WG" .WG "Buf" "partial" "Val" "mx" "Inv" "scale[i]")}}
    let base = (bh * p.nblk + blk) * R * {{.HP4}}u;
{{- range $j := seq .NV}}
    let w{{$j}} = v{{$j}} * s;
    x16v[base + lid + {{mul $j $.WG}}u] = vec2<u32>(pack2x16float(w{{$j}}.xy), pack2x16float(w{{$j}}.zw));
{{- end}}
}
{{- else}}

// val is x at block row r (τ = 64·blk + r) and column c of head bh = b·heads + h, 0 outside x.
fn val(bh: u32, blk: u32, r: u32, c: u32) -> f32 {
    let tau = blk * R + r;
    if (tau >= p.t || c >= p.hd) {
        return 0.0;
    }
{{- if .HeadMajor}}
    return x[(bh * p.t + tau) * p.stride + p.col0 + c];
{{- else}}
    let b = bh / p.heads;
    let h = bh % p.heads;
    return x[((b * p.t + tau) * p.heads + h) * p.stride + p.col0 + c];
{{- end}}
}

{{template "red_main" (dict "WG" .WG "R" "i" "Count" "p.count")}}
    let blk = i % p.nblk;
    let bh = i / p.nblk;
    var mx = 0.0;
    for (var e = lid; e < R * p.hd; e += {{.WG}}u) {
        mx = max(mx, abs(val(bh, blk, e / p.hd, e % p.hd)));
    }
{{- template "red_pow2_scale" (dict "WG" .WG "Buf" "partial" "Val" "mx" "Inv" "scale[i]")}}
    let words = p.hp / 2u;
    let base = (bh * p.nblk + blk) * R * words;
    for (var w = lid; w < R * words; w += {{.WG}}u) {
        let r = w / words;
        let c = 2u * (w % words);
        x16[base + w] = pack2x16float(vec2<f32>(val(bh, blk, r, c) * s, val(bh, blk, r, c + 1u) * s));
    }
}
{{- end}}
