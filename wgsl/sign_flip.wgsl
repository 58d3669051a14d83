// SignFlip, the budgeted flip of one sign matrix (DESIGN.md "Sign learning"), three stages
// (template Stage); bits and scores as in sign_score_update.wgsl:
//   "hist"  (one invocation per score word): hist[s] += 1 for every live score s ≥ tau (u32
//           [128], atomics: the counts, hence everything after, are deterministic);
//   "cut"   (one invocation): walking the bins from 127 down to tau, takes whole bins while
//           the running total stays ≤ budget; res[0] = the lowest bin taken (128 when none),
//           counts[index] = the number of signs that flip;
//   "apply" (one invocation per bits word, 32 signs): every live sign whose score ≥ res[0]
//           flips (its bit XORed) and its score resets to 0. Padded signs (mask == 0, as in
//           sign_score_update.wgsl) never flip; their scores are 0 < tau anyway.
// Template parameters: Stage, Mask, MaskCols, WG.

struct Params {
    count: u32,
    cols: u32,
    tau: u32,
    budget: u32,
    index: u32,
};

{{- if eq .Stage "hist"}}

@group(0) @binding(0) var<storage, read> scores: array<u32>;
@group(0) @binding(1) var<storage, read_write> hist: array<atomic<u32>>;
{{- if .Mask}}
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
{{- else}}
@group(0) @binding(2) var<uniform> p: Params;
{{- end}}

{{template "sign_fns" (dict "Mask" .Mask "MaskCols" .MaskCols)}}

{{template "ew_main" (dict "WG" .WG "N" "(p.count + 3u) / 4u")}}
    let w = scores[i];
    for (var lane = 0u; lane < 4u; lane++) {
        let e = 4u * i + lane;
        if (e >= p.count) {
            break;
        }
        if (!sign_live(e)) {
            continue;
        }
        let s = sign_score(w, lane);
        if (s >= i32(p.tau)) {
            atomicAdd(&hist[u32(s)], 1u);
        }
    }
}
{{- else if eq .Stage "cut"}}

@group(0) @binding(0) var<storage, read> hist: array<u32>;
@group(0) @binding(1) var<storage, read_write> res: array<u32>;
@group(0) @binding(2) var<storage, read_write> counts: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(1)
fn main() {
    var cut = 128u;
    var total = 0u;
    for (var b = 127i; b >= i32(p.tau); b--) {
        let c = hist[u32(b)];
        if (total + c > p.budget) {
            break;
        }
        total += c;
        cut = u32(b);
    }
    res[0] = cut;
    counts[p.index] = total;
}
{{- else}}

@group(0) @binding(0) var<storage, read> res: array<u32>;
@group(0) @binding(1) var<storage, read_write> bits: array<u32>;
@group(0) @binding(2) var<storage, read_write> scores: array<u32>;
{{- if .Mask}}
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;
{{- else}}
@group(0) @binding(3) var<uniform> p: Params;
{{- end}}

{{template "sign_fns" (dict "Mask" .Mask "MaskCols" .MaskCols)}}

{{template "ew_main" (dict "WG" .WG "N" "(p.count + 31u) / 32u")}}
    let cut = i32(res[0]);
    if (cut > 127) {
        return;
    }
    var flip = 0u;
    for (var q = 0u; q < 8u; q++) {
        let wi = 8u * i + q;
        if (4u * wi >= p.count) {
            break;
        }
        let w = scores[wi];
        var o = w;
        for (var lane = 0u; lane < 4u; lane++) {
            let e = 4u * wi + lane;
            if (e >= p.count) {
                break;
            }
            if (!sign_live(e)) {
                continue;
            }
            let s = sign_score(w, lane);
            if (s >= cut) {
                flip = flip | (1u << (e & 31u));
                o = o & ~(255u << (8u * lane));
            }
        }
        scores[wi] = o;
    }
    bits[i] = bits[i] ^ flip;
}
{{- end}}
