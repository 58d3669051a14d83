{{- /*
sign_lib.wgsl: shared pieces of the sign-learning kernels (sign_score_update.wgsl,
sign_flip.wgsl; defines only, names prefixed sign_). Signs: element e of a matrix of
p.count signs with p.cols columns; scores: int8, element e is byte e & 3 of u32 word e >> 2.
*/ -}}

{{- /* sign_fns: fn sign_score(w, lane) -> i32 (the int8 score in byte lane of w) and
fn sign_live(e) -> bool (sign e not padded: with Mask, mask[rank index] != 0, the rank
index e % p.cols when MaskCols, else e / p.cols; the kernel declares mask and p). Keys:
Mask, MaskCols. */ -}}
{{define "sign_fns"}}
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
