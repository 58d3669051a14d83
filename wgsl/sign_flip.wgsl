// SignFlip, the budgeted flip of one sign matrix (DESIGN.md "Sign learning"), three stages
// (template Stage); bits and scores as in sign_score_update.wgsl:
//   "hist"  (one invocation per score word): hist[s] += 1 for every live score s ≥ tau (u32
//           [128], atomics: the counts, hence everything after, are deterministic);
//   "cut"   (one invocation): walking the bins from 127 down to tau, takes whole bins while
//           the running total stays ≤ budget; res[0] = the lowest bin taken (128 when none),
//           res[1] = the next bin ≥ tau that did not fit whole (the boundary; 0 when none),
//           res[3] = the budget left for it, res[4] = the whole bins' total;
//   "bhist" (one invocation per score word): for the boundary bin's signs, bucket[e / BS]
//           += 1 (BS = p.bsize signs per index bucket, 4096 buckets at most; atomics);
//   "bcut"  (one invocation): takes whole buckets in index order while they fit the budget
//           left; res[2] = the first bucket not taken; counts[index] = all the flips;
//   "apply" (one invocation per bits word, 32 signs): every live sign whose score ≥ res[0],
//           or = res[1] with e / BS < res[2], flips (its bit XORed) and its score resets to 0.
//           Padded signs (mask == 0, as in sign_score_update.wgsl) never flip.
// So the flips never exceed the budget, and a bin too large for it still flips part of it.
// Template parameters: Stage, Mask, MaskCols, WG.

struct Params {
    count: u32,
    cols: u32,
    tau: u32,
    budget: u32,
    index: u32,
    bsize: u32,
};

{{- if or (eq .Stage "hist") (eq .Stage "bhist")}}

@group(0) @binding(0) var<storage, read> scores: array<u32>;
@group(0) @binding(1) var<storage, read_write> hist: array<atomic<u32>>;
{{- $b := 2}}
{{- if eq .Stage "bhist"}}
@group(0) @binding(2) var<storage, read> res: array<u32>;
{{- $b = 3}}
{{- end}}
{{template "sign_fns" (dict "Mask" .Mask "MaskCols" .MaskCols "B" $b)}}

{{template "ew_main" (dict "WG" .WG "N" "(p.count + 3u) / 4u")}}
    let w = scores[i];
{{- template "sign_lanes" (dict "W" "i" "I" "    ")}}
        let s = sign_score(w, lane);
{{- if eq .Stage "hist"}}
        if (s >= i32(p.tau)) {
            atomicAdd(&hist[u32(s)], 1u);
        }
{{- else}}
        if (res[1] != 0u && s == i32(res[1])) {
            atomicAdd(&hist[e / p.bsize], 1u);
        }
{{- end}}
    }
}
{{- else if or (eq .Stage "cut") (eq .Stage "bcut")}}

@group(0) @binding(0) var<storage, read> hist: array<u32>;
@group(0) @binding(1) var<storage, read_write> res: array<u32>;
@group(0) @binding(2) var<storage, read_write> counts: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(1)
fn main() {
{{- if eq .Stage "cut"}}
    var cut = 128u;
    var total = 0u;
    var boundary = 0u;
    for (var b = 127i; b >= i32(p.tau); b--) {
        let c = hist[u32(b)];
        if (c == 0u) {
            continue;
        }
        if (total + c > p.budget) {
            boundary = u32(b);
            break;
        }
        total += c;
        cut = u32(b);
    }
    res[0] = cut;
    res[1] = boundary;
    res[2] = 0u;
    res[3] = p.budget - total;
    res[4] = total;
    counts[p.index] = total;
{{- else}}
    if (res[1] == 0u) {
        return;
    }
    let buckets = (p.count + p.bsize - 1u) / p.bsize;
    var taken = 0u;
    var k = 0u;
    for (; k < buckets; k++) {
        let c = hist[k];
        if (taken + c > res[3]) {
            break;
        }
        taken += c;
    }
    res[2] = k;
    counts[p.index] = res[4] + taken;
{{- end}}
}
{{- else}}

@group(0) @binding(0) var<storage, read> res: array<u32>;
@group(0) @binding(1) var<storage, read_write> bits: array<u32>;
@group(0) @binding(2) var<storage, read_write> scores: array<u32>;
{{template "sign_fns" (dict "Mask" .Mask "MaskCols" .MaskCols "B" 3)}}

{{template "ew_main" (dict "WG" .WG "N" "(p.count + 31u) / 32u")}}
    let cut = i32(res[0]);
    let boundary = i32(res[1]);
    let bcut = res[2];
    if (cut > 127 && bcut == 0u) {
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
{{- template "sign_lanes" (dict "W" "wi" "I" "        ")}}
            let s = sign_score(w, lane);
            if (s >= cut || (s == boundary && e / p.bsize < bcut)) {
                flip = flip | (1u << (e & 31u));
                o = o & ~(255u << (8u * lane));
            }
        }
        scores[wi] = o;
    }
    bits[i] = bits[i] ^ flip;
}
{{- end}}
