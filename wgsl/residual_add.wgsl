// ResidualAdd: x += y, elementwise over n f32 values (x, y row-major f32 [n]).
// Template parameters: WG (workgroup size).

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;

{{template "ew_params_n" (dict "B" 2)}}

{{template "ew_index" (dict "WG" .WG)}}
    if (i < p.n) {
        x[i] = x[i] + y[i];
    }
}
