// SignScoreUpdate, the flip-pressure scores of one sign matrix (DESIGN.md "Sign learning").
// Signs: bits u32 [ceil(count/32)] (element e is bit e & 31 of word e >> 5; 1 ↦ +1);
// scores: int8 per sign, 4 per u32 (element e is byte e & 3 of word e >> 2, two's
// complement); g f32 [count] the sign gradient; ss f32 [1] = Σ g² (GradSumSquares). Per
// element, with b = ±1 its sign, σ = sqrt(ss / count) and v = β·s + α·(g·b)/σ (0 for the
// second term when σ = 0), the new score is clamp(floor(v + u), −127, 127) with
// u = hash(seed, step, matrix, e) in [0, 1) (stochastic rounding, reproducible). Padded
// signs (mask[rank index] == 0, rank index e % cols when MaskCols, else e / cols) get score
// 0. One invocation per score word (4 signs): no races. Template parameters: Mask, MaskCols,
// WG.

@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> ss: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<u32>;

struct Params {
    count: u32,
    cols: u32,
    seed: u32,
    step: u32,
    matrix: u32,
    alpha: u32, // f32 bits
    beta: u32,  // f32 bits
};

{{template "sign_fns" (dict "Mask" .Mask "MaskCols" .MaskCols "B" 4)}}

// sign_hash is lowbias32 (host.SignHash computes the same).
fn sign_hash(x: u32) -> u32 {
    var h = x;
    h = h ^ (h >> 16u);
    h = h * 0x7feb352du;
    h = h ^ (h >> 15u);
    h = h * 0x846ca68bu;
    h = h ^ (h >> 16u);
    return h;
}

// sign_uniform is the rounding offset of sign e in [0, 1), 24 bits.
fn sign_uniform(seed: u32, step: u32, matrix: u32, e: u32) -> f32 {
    let h = sign_hash(sign_hash(sign_hash(sign_hash(seed) ^ step) ^ matrix) ^ e);
    return f32(h >> 8u) * (1.0 / 16777216.0);
}

{{template "ew_main" (dict "WG" .WG "N" "(p.count + 3u) / 4u")}}
    let alpha = bitcast<f32>(p.alpha);
    let beta = bitcast<f32>(p.beta);
    let sigma = sqrt(ss[0] / f32(p.count));
    var scale = 0.0;
    if (sigma > 0.0 && sigma <= 3.0e38) {
        scale = alpha / sigma;
    }
    let w = scores[i];
    var o = 0u;
{{- template "sign_lanes" (dict "W" "i" "I" "    ")}}
        let s = f32(sign_score(w, lane));
        let b = select(-1.0, 1.0, ((bits[e >> 5u] >> (e & 31u)) & 1u) == 1u);
        var push = (g[e] * b) * scale;
        if (!(abs(push) <= 1e30)) {
            push = 0.0; // a non-finite gradient (a step the Trainer skips) adds no pressure
        }
        let v = beta * s + push;
        let u = sign_uniform(p.seed, p.step, p.matrix, e);
        let q = clamp(floor(v + u), -127.0, 127.0);
        o = o | ((u32(i32(q)) & 255u) << (8u * lane));
    }
    scores[i] = o;
}
