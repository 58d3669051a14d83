// Zero: writes n zero words into b (u32 [n]: any dtype, zero bits are 0 in f32, f16, u32).
// Template parameters: WG.

@group(0) @binding(0) var<storage, read_write> b: array<u32>;

{{template "ew_params_n" (dict "B" 1)}}

{{template "ew_index" (dict "WG" .WG)}}
    if (i < p.n) {
        b[i] = 0u;
    }
}
