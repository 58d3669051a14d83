// CausalConv1dSiLUBackward (host.CausalConv1dSiLUBackward), with respect to x only (the conv
// weight is frozen). Two passes over x, ds, dx: f32 [nb·t, C] row-major (token-major) and
// w: f32 [C, 1, K] flattened to [C·K]; one invocation per element (linear index
// (wid.x + wid.y·nwg.x)·WG + lid), τ = row mod t its position in the window.
{{- if .Transposed}}
// Pass 2, the transposed depthwise conv within each window (nothing crosses a window
// boundary: a tap past the window's last token is skipped):
//   dx[(b,τ′), c] = Σ_{i<K, τ′ + K−1−i < t} w[c·K + i] · ds[(b, τ′ + K−1−i), c].
// Template parameters: WG, K, Transposed (true), RB (run form when > 0).

@group(0) @binding(0) var<storage, read> ds: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;

{{template "cc_params" (dict "B" 3)}}

{{- if gt .RB 0}}
{{template "cc_run_open" .}}
    // g{j}: ds at tau + j, 0 past the window (never used: skipped taps).
{{- range $j := seq (sub .K 1)}}
    var g{{$j}} = select(0.0, ds[(base + min(tau0 + {{$j}}u, p.t - 1u)) * p.c + ch], tau0 + {{$j}}u < p.t);
{{- end}}
    for (var tau = tau0; tau < tau1; tau++) {
        let ei = (base + tau) * p.c + ch;
        let g{{sub .K 1}} = select(0.0, ds[(base + min(tau + {{sub .K 1}}u, p.t - 1u)) * p.c + ch], tau + {{sub .K 1}}u < p.t);
        var s = 0.0;
{{- range $k := seq .K}}{{$ahead := sub (sub $.K 1) $k}}
        if (tau + {{$ahead}}u < p.t) {
            s = fma(w{{$k}}, g{{$ahead}}, s);
        }
{{- end}}
        dx[ei] = s;
{{- range $j := seq (sub .K 1)}}
        g{{$j}} = g{{add $j 1}};
{{- end}}
    }
}
{{- else}}
{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
{{- template "cc_pos"}}
    var s = 0.0;
    for (var k = 0u; k < {{.K}}u; k++) {
        // tap k of output τ′ + ahead read this input, ahead = K−1−k.
        let ahead = {{.K}}u - 1u - k;
        if (tau + ahead < p.t) {
            s = fma(w[ch * {{.K}}u + k], ds[i + ahead * p.c], s);
        }
    }
    dx[i] = s;
}
{{- end}}
{{- else}}
// Pass 1, the SiLU backward at the recomputed pre-activation (the forward's arithmetic):
//   s = Σ_{i<K} w[c·K + i] · x[(b, τ−K+1+i), c]  (zero before the window),
//   ds = dy · silu′(s),  silu′(s) = σ(s)·(1 + s·(1 − σ(s))).
// dy is f32 [nb·t, C] in Blocks column blocks (cc_blocks: dy0, dy1, dy2).
// Template parameters: WG, K, Transposed (false), RB (run form when > 0), Blocks.

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
{{- template "cc_blocks" (dict "Name" "dy" "B" 2 "Blocks" .Blocks "Store" false)}}
@group(0) @binding({{add 2 .Blocks}}) var<storage, read_write> ds: array<f32>;

{{template "cc_params" (dict "B" (add 3 .Blocks))}}

{{- if gt .RB 0}}
{{template "cc_run_preact" .}}
{{- template "ew_sigmoid" (dict "X" "s" "S" "sg")}}
        let sc = select(1.0 / (1.0 + e), e / (1.0 + e), s >= 0.0);
        ds[ei] = load_dy(base + tau, ch) * (sg * (1.0 + s * sc));
{{- template "cc_run_shift" .}}
}
{{- else}}
{{template "ew_main" (dict "WG" .WG "N" "p.n")}}
{{- template "cc_preact" (dict "K" .K)}}
    // σ and 1 − σ without overflow: exp of a non-positive argument only.
{{- template "ew_sigmoid" (dict "X" "s" "S" "sg")}}
    let sc = select(1.0 / (1.0 + e), e / (1.0 + e), s >= 0.0);
    ds[i] = load_dy(row, ch) * (sg * (1.0 + s * sc));
}
{{- end}}
{{- end}}
