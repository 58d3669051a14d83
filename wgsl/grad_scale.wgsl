// GradScale: g ← s·g elementwise over g f32 [n] (gradient-norm clipping), s an f32 uniform.
// Template parameters: WG.

@group(0) @binding(0) var<storage, read_write> g: array<f32>;

struct Params {
    n: u32,
    s: f32,
};
@group(0) @binding(1) var<uniform> p: Params;

{{template "ew_index" (dict "WG" .WG)}}
    if (i < p.n) {
        g[i] = p.s * g[i];
    }
}
