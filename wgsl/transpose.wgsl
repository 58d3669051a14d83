// Transpose: y[j, t] = x[t, j] for a row-major f32 matrix x [rows, cols] and y [cols, rows].
// One invocation per element, indexed along y so that its writes are contiguous. A pure copy
// (exact). Template parameters: WG.

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

struct Params {
    total: u32, // rows·cols
    rows: u32,
    cols: u32,
};
@group(0) @binding(2) var<uniform> p: Params;

{{template "ew_main_rc" (dict "WG" .WG "N" "p.total" "Cols" "p.rows" "R" "j" "C" "t")}}
    y[i] = x[t * p.cols + j];
}
