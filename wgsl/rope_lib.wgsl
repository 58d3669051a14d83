{{- /*
rope_lib.wgsl: what QKNormRoPE's forward and backward (qk_norm_rope.wgsl,
qk_norm_rope_backward.wgsl) share (defines only, parsed with every shader; names prefixed
rope_): their runtime sizes and the rotation's partner dimension with its cosine and sine.
*/ -}}

{{- /* rope_params: struct Params (groups = rows·heads, heads, hd = HD, half = R/2, t the
window length, eps of the RMSNorm); the kernel declares its binding. */ -}}
{{define "rope_params"}}
struct Params {
    groups: u32, // rows·heads
    heads: u32,
    hd: u32,
    half: u32,   // R/2
    t: u32,
    eps: f32,
};
{{- end}}

{{- /* rope_pair: for a rotated dimension c < R at window position pos, declares first
(c < R/2), i (the frequency index), pc (the partner dimension: c + R/2 in the first half,
c − R/2 in the second) and cs, sn = cos, sin of pos·f_i from the table tab [2, t, R/2]. Keys:
I (the indentation of the lines). */ -}}
{{define "rope_pair"}}
{{.I}}let first = c < p.half;
{{.I}}let i = select(c - p.half, c, first);
{{.I}}let pc = select(c - p.half, c + p.half, first);
{{.I}}let cs = tab[pos * p.half + i];
{{.I}}let sn = tab[(p.t + pos) * p.half + i];
{{- end}}
