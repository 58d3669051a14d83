// KLLossBackward's stages (DESIGN.md §6; host.KLLoss), selected by the template parameter
// Stage, over one vocabulary slice of logits at a time (logits = h·E_sliceᵀ from the Linear
// GEMM, f32 [rows, cols], ids v0 .. v0+cols−1), so the rows × vocab logits never exist:
//
//   "stats"  (one workgroup of WG threads per row, per slice): folds the slice into the
//            running (max m, Σ exp(x − m)) state f32 [rows, 2] (overwritten when first) and
//            gathers the student logits at the teacher's ids: tl f32 [rows, K] gets
//            logits[id − v0] when id is in the slice; the first slice sets the others to NaN,
//            so an id outside the vocabulary leaves NaN (a non-finite loss) behind.
//   "finish" (one thread per row): lse = m + log Σ; z = Σ_k pT; with q_k = pT_k/z (the
//            teacher's renormalised top-k), KL_row = Σ_k q_k·(log q_k − (tl_k − lse)) (0·log 0
//            = 0) into kl f32 [rows]; rowstat f32 [rows, 2] = (lse, 1/z).
//   "mean"   (one workgroup): loss[0] = (Σ_rows kl)/rows, a fixed-order tree sum.
//   "grad"   (one workgroup per row, per slice): logits ← scale·(exp(x − lse) − q at the
//            teacher's ids) in place (storageBarrier between the two writes), ready for
//            dh += dlogits·E_slice.
// ids: u32 [rows, K]; pT: f32 [rows, K]. Workgroup memory is written before it is read.
// Template parameters: Stage, WG (power of two).

struct Params {
    rows: u32,
    cols: u32,
    v0: u32,
    k: u32,
    first: u32,
    scale: f32,
};

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

{{- if eq .Stage "stats"}}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> tl: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red: array<f32, {{.WG}}>;

{{template "red_main" (dict "WG" .WG "R" "row" "Count" "p.rows")}}
    let base = row * p.cols;
    // 1. The slice maximum; 2. Σ exp(x − mnew) over the slice into red[0].
{{- template "red_slice_lse" (dict "Lanes" false "WG" .WG "S" 0 "Buf" "red")}}
    if (lid == 0u) {
        state[2u * row] = mnew;
        state[2u * row + 1u] = snew;
    }
    for (var i = lid; i < p.k; i += {{.WG}}u) {
        let id = ids[row * p.k + i];
        if (id >= p.v0 && id - p.v0 < p.cols) {
            tl[row * p.k + i] = logits[base + id - p.v0];
        } else if (p.first != 0u) {
            tl[row * p.k + i] = bitcast<f32>(0x7fc00000u); // NaN until the id's slice comes
        }
    }
}
{{- else if eq .Stage "finish"}}

@group(0) @binding(0) var<storage, read> state: array<f32>;
@group(0) @binding(1) var<storage, read> tl: array<f32>;
@group(0) @binding(2) var<storage, read> pt: array<f32>;
@group(0) @binding(3) var<storage, read_write> kl: array<f32>;
@group(0) @binding(4) var<storage, read_write> rowstat: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = (wid.x + wid.y * nwg.x) * {{.WG}}u + lid;
    if (row >= p.rows) {
        return;
    }
    let lse = state[2u * row] + log(state[2u * row + 1u]);
    var z = 0.0;
    for (var i = 0u; i < p.k; i++) {
        z += pt[row * p.k + i];
    }
    let iz = 1.0 / z;
    var s = 0.0;
    for (var i = 0u; i < p.k; i++) {
        let q = pt[row * p.k + i] * iz;
        if (q > 0.0) {
            s += q * (log(q) - (tl[row * p.k + i] - lse));
        } else if (tl[row * p.k + i] != tl[row * p.k + i]) {
            s += tl[row * p.k + i]; // keep a missing id's NaN visible
        }
    }
    kl[row] = s;
    rowstat[2u * row] = lse;
    rowstat[2u * row + 1u] = iz;
}
{{- else if eq .Stage "mean"}}

@group(0) @binding(0) var<storage, read> kl: array<f32>;
@group(0) @binding(1) var<storage, read_write> loss: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> red: array<f32, {{.WG}}>;

@compute @workgroup_size({{.WG}})
fn main(@builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var r = lid; r < p.rows; r += {{.WG}}u) {
        s += kl[r];
    }
{{- template "red_sum" (dict "WG" .WG "Buf" "red" "Val" "s")}}
    if (lid == 0u) {
        loss[0] = red[0] / f32(p.rows);
    }
}
{{- else if eq .Stage "grad"}}

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> pt: array<f32>;
@group(0) @binding(3) var<storage, read> rowstat: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

{{template "red_main" (dict "WG" .WG "R" "row" "Count" "p.rows")}}
    let base = row * p.cols;
    let lse = rowstat[2u * row];
    let iz = rowstat[2u * row + 1u];
    for (var c = lid; c < p.cols; c += {{.WG}}u) {
        logits[base + c] = p.scale * exp(logits[base + c] - lse);
    }
    storageBarrier();
    for (var i = lid; i < p.k; i += {{.WG}}u) {
        let id = ids[row * p.k + i];
        if (id >= p.v0 && id - p.v0 < p.cols) {
            logits[base + id - p.v0] -= p.scale * (pt[row * p.k + i] * iz);
        }
    }
}
{{- end}}
