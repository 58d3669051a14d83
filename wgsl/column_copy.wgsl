// ColumnCopy: copies a block of n columns between two row-major f32 matrices with the same
// number of rows: dst[row, dstOff + j] = src[row, srcOff + j] for j < n. Other columns of dst
// are left as they are (so several calls assemble a matrix, or split one). One invocation per
// copied element. Template parameters: WG.

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;

struct Params {
    total: u32,   // rows·n
    n: u32,       // columns copied per row
    src_cols: u32,
    src_off: u32,
    dst_cols: u32,
    dst_off: u32,
};
@group(0) @binding(2) var<uniform> p: Params;

{{template "ew_main_rc" (dict "WG" .WG "N" "p.total" "Cols" "p.n" "R" "row" "C" "j")}}
    dst[row * p.dst_cols + p.dst_off + j] = src[row * p.src_cols + p.src_off + j];
}
