// FillRandom: fills a buffer with counter-based random values (host.RandomWord):
//   word(c) = lowbias32(lowbias32(c ^ lowbias32(seed)) + 0x9E3779B9), 32-bit wrapping.
// Mode 0 (bits):  out[w] = word(offset + w) for every u32 word w.
// Mode 1 (f32):   out[e] = base + f32(word(offset + e) >> 16) · step (step a power of two, so
//                 the product is exact and the sum rounds once).
// Mode 2 (f16):   element e = f16 bits of (f32(word(offset + e) >> 21) − 1024) · step, an exact
//                 value converted by integer ops; elements packed two per u32 word (element
//                 2w in the low half), elements ≥ nelem (the odd tail) written as 0.
// The dispatch covers words word0 .. word0 + n − 1 of the buffer (a binding slice starting
// at word0). Template parameters: WG, Mode.

@group(0) @binding(0) var<storage, read_write> out: array<u32>;

struct Params {
    n: u32,
    word0: u32,
    seed: u32,
    offset: u32,
    base: u32,
    step: u32,
    nelem: u32,
};
@group(0) @binding(1) var<uniform> p: Params;

fn lowbias32(v: u32) -> u32 {
    var x = v;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

fn word(c: u32) -> u32 {
    return lowbias32(lowbias32(c ^ lowbias32(p.seed)) + 0x9e3779b9u);
}

// f16bits converts an f32 that is exactly representable in f16 (|v| ≥ 2⁻²⁴ or 0).
fn f16bits(v: f32) -> u32 {
    let f = bitcast<u32>(v);
    let s = (f >> 16u) & 0x8000u;
    let e = (f >> 23u) & 0xffu;
    let m = f & 0x7fffffu;
    if (e == 0u) {
        return s;
    }
    if (e >= 113u) {
        return s | ((e - 112u) << 10u) | (m >> 13u);
    }
    return s | ((m | 0x800000u) >> (126u - e));
}

fn half(e: u32) -> u32 {
    if (e >= p.nelem) {
        return 0u;
    }
    let k = f32(word(p.offset + e) >> 21u);
    return f16bits((k - 1024.0) * bitcast<f32>(p.step));
}

{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
    let w = p.word0 + i;
{{- if eq .Mode 0}}
    out[i] = word(p.offset + w);
{{- else if eq .Mode 1}}
    let k = f32(word(p.offset + w) >> 16u);
    out[i] = bitcast<u32>(bitcast<f32>(p.base) + k * bitcast<f32>(p.step));
{{- else}}
    out[i] = half(2u * w) | (half(2u * w + 1u) << 16u);
{{- end}}
}
