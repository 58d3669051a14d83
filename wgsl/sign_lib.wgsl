{{- /*
sign_lib.wgsl: shared pieces of the sign-learning kernels (sign_score_update.wgsl,
sign_flip.wgsl; defines only, names prefixed sign_). Signs: element e of a matrix of
p.count signs with p.cols columns; scores: int8, element e is byte e & 3 of u32 word e >> 2.
*/ -}}

{{- /* sign_fns: the bindings mask (u32 [rank], with Mask) and p (the kernel's Params) from
binding B on, fn sign_score(w, lane) -> i32 (the int8 score in byte lane of w) and
fn sign_live(e) -> bool (sign e not padded: with Mask, mask[rank index] != 0, the rank
index e % p.cols when MaskCols, else e / p.cols). Keys: Mask, MaskCols, B. */ -}}
{{define "sign_fns"}}
{{- if .Mask}}
@group(0) @binding({{.B}}) var<storage, read> mask: array<u32>;
@group(0) @binding({{add .B 1}}) var<uniform> p: Params;
{{- else}}
@group(0) @binding({{.B}}) var<uniform> p: Params;
{{- end}}

fn sign_score(w: u32, lane: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * lane)) >> 24u;
}

fn sign_live(e: u32) -> bool {
{{- if .Mask}}
{{- if .MaskCols}}
    return mask[e % p.cols] != 0u;
{{- else}}
    return mask[e / p.cols] != 0u;
{{- end}}
{{- else}}
    return true;
{{- end}}
}
{{- end}}


{{- /* sign_lanes: opens the loop over the live signs e = 4·W + lane, lane < 4, of score word
W (stopping at p.count, skipping padded signs); the kernel writes the body and closes the
loop. Keys: W (an expression), I (the indentation of the lines). */ -}}
{{define "sign_lanes"}}
{{.I}}for (var lane = 0u; lane < 4u; lane++) {
{{.I}}    let e = 4u * {{.W}} + lane;
{{.I}}    if (e >= p.count) {
{{.I}}        break;
{{.I}}    }
{{.I}}    if (!sign_live(e)) {
{{.I}}        continue;
{{.I}}    }
{{- end}}
