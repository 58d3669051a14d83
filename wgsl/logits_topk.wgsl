// LogitsTopK, merge step: folds one vocabulary slice of logits into each row's running
// log-sum-exp state and running top-K list. The slice's logits come from the Linear GEMM
// (h·E_sliceᵀ); this kernel never sees more than one slice, so the full rows × vocab logits
// never exist.
//
// logits: f32 [rows, cols] (this slice, vocabulary ids v0 .. v0+cols−1);
// state:  f32 [rows, 2] running (max m, Σ exp(x − m)); ignored and overwritten when first;
// ids:    u32 [rows, K] running top-K ids, descending by logit, ties by lower id;
// vals:   f32 [rows, K] their logits; when last, converted in place to log-probabilities;
// lse:    f32 [rows] written when last: m + log(Σ).
// One workgroup of WG threads per row (linear workgroup index wid.x + wid.y·nwg.x). The
// order is larger logit first, then lower id. The slice's elements that can still enter the
// list are compacted into a workgroup pool; then, the rank form: when the old list and the
// pool together fit Per candidates per thread, each thread counts, for its candidates, the
// candidates that rank before them (rank = that count) and writes those of rank < K to slot
// rank of the list: no further barrier. Otherwise, and always in the rounds form (Per 0, the
// simple twin), K rounds each select, by a workgroup reduction, the best element strictly worse
// than the previous pick among the pool (or the whole slice when the pool overflowed) and
// the old list, so no element needs marking. Both select the same elements in the same order
// and copy their logits unchanged: the same bits. On the first slice the rank form also
// bounds the pool from below by the K-th largest of the threads' maxima over their columns
// (K distinct slice elements reach it, so the slice's top-K do), which keeps even that pool
// small. The slice is read twice: its maximum, then Σ exp and the prefilter in one loop.
// Template parameters: WG (power of two ≥ K), K (1..64), Pool (pool capacity), Per
// (rank candidates per thread, WG·Per ≥ K; 0: the rounds form); Lanes selects the lane-blocked form below.

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> state: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> vals: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;

struct Params {
    rows: u32,
    cols: u32,
    v0: u32,
    first: u32,
    last: u32,
};
@group(0) @binding(5) var<uniform> p: Params;

const NONE = 0xffffffffu;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// better: (v, i) ranks before (bv, bi). An id of NONE ranks after everything.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) {
        return false;
    }
    if (bi == NONE) {
        return true;
    }
    return v > bv || (v == bv && i < bi);
}

// The lane-blocked form of CPU adapters (gemm_lanes.wgsl says why; Lanes, S): one subgroup of
// S lanes per row, no workgroup memory, no barrier. The slice's max and Σ exp are lane-local
// over the strided columns c = lane + S·i, then added over the lanes (subgroupMax,
// subgroupAdd). Each lane keeps its own top-K of its columns (and of old-list entries
// lane, lane + S, …, so that the union of the lane lists holds the row's top-K) sorted in
// named registers, inserting an element that ranks before its K-th by one pass of
// compare-and-swap; then K rounds take the best head over the lanes (subgroupMax of the
// logit, subgroupMin of the id among the lanes at that logit) and the winning lane drops its
// head. The same order as the workgroup form: larger logit first, ties by lower id.
// Template parameters: S, K.
{{- if .Lanes}}

{{template "ew_entry_form" (dict "WG" .S "Lanes" true)}}
{{- template "red_row" (dict "R" "row" "Count" "p.rows")}}
    let base = row * p.cols;
    // 1. The slice's maximum, the new running maximum, and Σ exp(x − mnew).
{{- template "red_slice_lse" (dict "Lanes" true "WG" .WG "S" .S "Buf" "")}}

    // 2. The lane's top-K: the old list's entries lane, lane + S, …, then its columns.
{{- range $j := seq .K}}
    var lv{{$j}} = neg_inf();
    var li{{$j}} = NONE;
{{- end}}
    var tau = neg_inf();
    if (p.first == 0u) {
        // Old ids are all below v0 (slices run in order), so a slice element equal to the old
        // k-th logit ranks after it: only logits strictly above it can enter.
        tau = vals[row * {{.K}}u + {{.K}}u - 1u];
        for (var j = sl; j < {{.K}}u; j += {{.S}}u) {
            var cv = vals[row * {{.K}}u + j];
            var ci = ids[row * {{.K}}u + j];
            {{- template "lk_insert" .}}
        }
    }
    for (var c = sl; c < p.cols; c += {{.S}}u) {
        var cv = logits[base + c];
        var ci = p.v0 + c;
        if (cv > tau && better(cv, ci, lv{{add .K -1}}, li{{add .K -1}})) {
            {{- template "lk_insert" .}}
        }
    }

    // 3. K rounds: the best head over the lanes; its lane drops it.
    var shift = 0.0;
    if (p.last == 1u) {
        shift = mnew + log(snew);
    }
    for (var r = 0u; r < {{.K}}u; r++) {
        let bv = subgroupMax(select(lv0, neg_inf(), li0 == NONE));
        let bi = subgroupMin(select(NONE, li0, li0 != NONE && lv0 == bv));
        if (li0 == bi && bi != NONE) {
{{- range $j := seq (add .K -1)}}
            lv{{$j}} = lv{{add $j 1}};
            li{{$j}} = li{{add $j 1}};
{{- end}}
            lv{{add .K -1}} = neg_inf();
            li{{add .K -1}} = NONE;
        }
        if (sl == 0u) {
            ids[row * {{.K}}u + r] = bi;
            vals[row * {{.K}}u + r] = bv - shift;
        }
    }
    if (sl == 0u) {
        state[2u * row] = mnew;
        state[2u * row + 1u] = snew;
        if (p.last == 1u) {
            lse[row] = shift;
        }
    }
}
{{- else}}
var<workgroup> red_v: array<f32, {{.WG}}>;
var<workgroup> red_i: array<u32, {{.WG}}>;
var<workgroup> cand_v: array<f32, {{.K}}>;
var<workgroup> cand_i: array<u32, {{.K}}>;
// The slice's elements that can still enter the list (logit above the old k-th), compacted
// so that the K rounds scan only them; used when they fit (else the rounds scan the slice).
var<workgroup> pool_v: array<f32, {{.Pool}}>;
var<workgroup> pool_i: array<u32, {{.Pool}}>;
var<workgroup> pool_n: atomic<u32>;
{{- if .Per}}
// Each thread's maximum over its columns, and the K-th largest of them (ties by thread).
var<workgroup> lane_max: array<f32, {{.WG}}>;
var<workgroup> lane_tau: f32;
{{- end}}

{{template "red_main" (dict "WG" .WG "R" "row" "Count" "p.rows")}}
    let base = row * p.cols;
{{- if .Per}}
    if (lid == 0u) {
        lane_tau = neg_inf(); // when no thread's maximum ranks K-th (NaN logits)
    }
{{- end}}
    // 1. The slice maximum and the new running maximum.
{{- template "red_slice_max" (dict "Lanes" false "WG" .WG "S" 0 "Buf" "red_v")}}
{{- if .Per}}
    lane_max[lid] = mx; // this thread's maximum over its columns (red_slice_max)
{{- end}}

    // 2. The old list into workgroup memory (every slot written).
    if (lid < {{.K}}u) {
        if (p.first == 0u) {
            cand_v[lid] = vals[row * {{.K}}u + lid];
            cand_i[lid] = ids[row * {{.K}}u + lid];
        } else {
            cand_v[lid] = neg_inf();
            cand_i[lid] = NONE;
        }
    }
    if (lid == 0u) {
        atomicStore(&pool_n, 0u); // workgroup memory is not zero-initialised
    }
    workgroupBarrier();
{{- if .Per}}
    // 2b. On the first slice (no old list to filter by), lane_tau: the K-th largest thread
    // maximum. K threads hold distinct slice elements at or above it, so the slice's K-th
    // largest logit is too, and every slice element that can enter the list (it must be in
    // the slice's top K) is ≥ lane_tau. Threads without columns have −∞. Later slices skip
    // it (WG² comparisons): the old K-th logit filters them.
    if (p.first != 0u) {
        var rk = 0u;
        for (var j = 0u; j < {{.WG}}u; j++) {
            let m = lane_max[j];
            if (m > mx || (m == mx && j < lid)) {
                rk += 1u;
            }
        }
        if (rk == {{.K}}u - 1u) {
            lane_tau = mx;
        }
    }
    workgroupBarrier();
{{- end}}

    // 3. One more read of the slice: Σ exp(x − mnew) (red_slice_lse's loop, the same order
    // and bits) and the prefilter into the pool. Old ids are all below v0 (slices run in
    // order), so an element equal to the old k-th logit ranks after it: only logits strictly
    // above it can enter.
    var tau = neg_inf();
    if (p.first == 0u) {
        tau = cand_v[{{.K}}u - 1u];
    }
{{- if .Per}}
    let tau_lanes = lane_tau;
{{- end}}
    var s = 0.0;
    for (var c = lid; c < p.cols; c += {{.WG}}u) {
        let v = logits[base + c];
        s += exp(v - mnew);
        if (v > tau{{if .Per}} && v >= tau_lanes{{end}}) {
            let slot = atomicAdd(&pool_n, 1u);
            if (slot < {{.Pool}}u) {
                pool_v[slot] = v;
                pool_i[slot] = p.v0 + c;
            }
        }
    }
{{- template "red_slice_snew" (dict "Lanes" false "WG" .WG "S" 0 "Buf" "red_v")}}
{{- if not .Per}}
    workgroupBarrier(); // everyone has read red_v[0] (snew) before the rounds reuse red_v
    // Every thread reads the same count; no barrier depends on it.
    let npool = atomicLoad(&pool_n);
{{- else}}
    // A uniform value (barrier, load): the choice between the forms has barriers under it;
    // the barrier also keeps the rounds' red_v writes after every read of snew.
    let npool = workgroupUniformLoad(&pool_n);
{{- end}}
    let pooled = npool <= {{.Pool}}u;
    var shift = 0.0;
    if (p.last == 1u) {
        shift = mnew + log(snew);
    }
{{- if .Per}}

    // 4. The rank form: candidates c < K are the old list's, the others the pool's.
    // A candidate's rank is the number of candidates that are better (NONE never is).
    if (npool <= {{sub (mul .WG .Per) .K}}u) {
        let n = {{.K}}u + npool;
{{- range $q := seq .Per}}
        {
            let c = lid + {{mul $q $.WG}}u;
            if (c < n) {
                var cv = 0.0;
                var ci = NONE;
                if (c < {{$.K}}u) {
                    cv = cand_v[c];
                    ci = cand_i[c];
                } else {
                    cv = pool_v[c - {{$.K}}u];
                    ci = pool_i[c - {{$.K}}u];
                }
                if (ci != NONE) {
                    var rk = 0u;
                    for (var j = 0u; j < {{$.K}}u; j++) {
                        if (better(cand_v[j], cand_i[j], cv, ci)) {
                            rk += 1u;
                        }
                    }
                    for (var j = 0u; j < npool; j++) {
                        if (better(pool_v[j], pool_i[j], cv, ci)) {
                            rk += 1u;
                        }
                    }
                    // Old slots are read only from cand_v/cand_i, loaded before the barriers.
                    if (rk < {{$.K}}u) {
                        ids[row * {{$.K}}u + rk] = ci;
                        vals[row * {{$.K}}u + rk] = cv - shift;
                    }
                }
            }
        }
{{- end}}
        // The slots beyond the valid candidates (only with fewer than K logits above −∞):
        // what a round without a pick writes.
        if (lid < {{.K}}u) {
            var nvalid = npool;
            for (var j = 0u; j < {{.K}}u; j++) {
                if (cand_i[j] != NONE) {
                    nvalid += 1u;
                }
            }
            if (lid >= nvalid) {
                ids[row * {{.K}}u + lid] = NONE;
                vals[row * {{.K}}u + lid] = neg_inf() - shift;
            }
        }
    } else {
{{- end}}

    // 4. (The rank form's overflow, or the rounds form.) K selection rounds.
    var lastv = 0.0;
    var lasti = NONE; // NONE: nothing picked yet, everything is eligible
    var myv = 0.0;    // thread r keeps round r's pick
    var myi = NONE;
    for (var r = 0u; r < {{.K}}u; r++) {
        var bv = neg_inf();
        var bi = NONE;
        if (pooled) {
            for (var c = lid; c < npool; c += {{.WG}}u) {
                let v = pool_v[c];
                let i = pool_i[c];
                if ((lasti == NONE || better(lastv, lasti, v, i)) && better(v, i, bv, bi)) {
                    bv = v;
                    bi = i;
                }
            }
        } else {
            for (var c = lid; c < p.cols; c += {{.WG}}u) {
                let v = logits[base + c];
                let i = p.v0 + c;
                if ((lasti == NONE || better(lastv, lasti, v, i)) && better(v, i, bv, bi)) {
                    bv = v;
                    bi = i;
                }
            }
        }
        if (lid < {{.K}}u) {
            let v = cand_v[lid];
            let i = cand_i[lid];
            if ((lasti == NONE || better(lastv, lasti, v, i)) && better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        red_v[lid] = bv;
        red_i[lid] = bi;
        workgroupBarrier();
        for (var h = {{.WG}}u / 2u; h > 0u; h >>= 1u) {
            if (lid < h && better(red_v[lid + h], red_i[lid + h], red_v[lid], red_i[lid])) {
                red_v[lid] = red_v[lid + h];
                red_i[lid] = red_i[lid + h];
            }
            workgroupBarrier();
        }
        lastv = red_v[0];
        lasti = red_i[0];
        if (lid == r) {
            myv = lastv;
            myi = lasti;
        }
        workgroupBarrier();
    }
    // Thread lid < K read slot lid of the old list in step 3 and is the only writer here.
    if (lid < {{.K}}u) {
        ids[row * {{.K}}u + lid] = myi;
        vals[row * {{.K}}u + lid] = myv - shift;
    }
{{- if .Per}}
    }
{{- end}}

    // 5. The new state; on the last slice, lse (the list holds log-probabilities).
    if (lid == 0u) {
        state[2u * row] = mnew;
        state[2u * row + 1u] = snew;
        if (p.last == 1u) {
            lse[row] = shift;
        }
    }
}
{{- end}}
{{- /* lk_insert: the lane-blocked form's insertion of (cv, ci) into the lane's sorted list
lv0..lv{K−1}, li0..li{K−1} (one compare-and-swap pass; the last entry drops out). */}}
{{define "lk_insert"}}
{{- range $j := seq .K}}
            {
                let sw = better(cv, ci, lv{{$j}}, li{{$j}});
                let tv = lv{{$j}};
                let ti = li{{$j}};
                lv{{$j}} = select(lv{{$j}}, cv, sw);
                li{{$j}} = select(li{{$j}}, ci, sw);
                cv = select(cv, tv, sw);
                ci = select(ci, ti, sw);
            }
{{- end}}
{{- end}}
