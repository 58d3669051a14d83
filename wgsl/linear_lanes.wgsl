// The lane-blocked form of linear.wgsl for CPU adapters (the body is gemm_lanes.wgsl's,
// see there): C[M, N] = A[M, K]·B with the Linear family's operands — A f32 [M, K]; B [N, K]
// when TransB (Linear, LinearRows, MatMul with transB), else [K, N] (LinearT, MatMul); B
// f32, or f16 packed two per u32 word (BF16); C f32 [M, N], overwritten. Bit-identical to
// the tiled kernel and to linear_naive.wgsl (each output one fma chain in K order).
// Requires K % 4 == 0 and 16-byte aligned bindings; with BF16 and not TransB, N even.
// Template parameters: TransB, BF16 (bools), S, R, C (C even).

@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
{{- if and .BF16 .TransB}}
@group(0) @binding(1) var<storage, read> b: array<vec2<u32>>;
{{- else if .TransB}}
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
{{- else if .BF16}}
@group(0) @binding(1) var<storage, read> b: array<u32>;
{{- else}}
@group(0) @binding(1) var<storage, read> b: array<f32>;
{{- end}}
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

{{template "gemm_params" (dict "B" 3)}}

{{template "lanes_main" .}}
{{- define "lanes_setup"}}
{{- if .TransB}}{{range $j := seq .C}} let bc{{$j}} = min(nl + {{$j}}u, p.n - 1u) * k4n;{{end}}
{{- else if .BF16}} let nh = p.n >> 1u;{{range $q := seq (div .C 2)}} let bw{{$q}} = min(nl + {{mul 2 $q}}u, p.n - 2u) >> 1u;{{end}}
{{- else}}{{range $j := seq .C}} let bc{{$j}} = min(nl + {{$j}}u, p.n - 1u);{{end}}
{{- end}}
{{- end}}
{{- define "lanes_bload"}}
{{- if and .BF16 .TransB}}{{range $j := seq .C}} let bv{{$j}} = b[bc{{$j}} + k4]; let b{{$j}} = vec4<f32>(unpack2x16float(bv{{$j}}.x), unpack2x16float(bv{{$j}}.y));{{end}}
{{- else if .TransB}}{{range $j := seq .C}} let b{{$j}} = b[bc{{$j}} + k4];{{end}}
{{- else if .BF16}} let r0 = 4u * k4 * nh;{{range $q := seq (div .C 2)}}{{$j := mul 2 $q}} let h0_{{$q}} = unpack2x16float(b[r0 + bw{{$q}}]); let h1_{{$q}} = unpack2x16float(b[r0 + nh + bw{{$q}}]); let h2_{{$q}} = unpack2x16float(b[r0 + 2u * nh + bw{{$q}}]); let h3_{{$q}} = unpack2x16float(b[r0 + 3u * nh + bw{{$q}}]); let b{{$j}} = vec4<f32>(h0_{{$q}}.x, h1_{{$q}}.x, h2_{{$q}}.x, h3_{{$q}}.x); let b{{add $j 1}} = vec4<f32>(h0_{{$q}}.y, h1_{{$q}}.y, h2_{{$q}}.y, h3_{{$q}}.y);{{end}}
{{- else}} let r0 = 4u * k4 * p.n;{{range $j := seq .C}} let b{{$j}} = vec4<f32>(b[r0 + bc{{$j}}], b[r0 + p.n + bc{{$j}}], b[r0 + 2u * p.n + bc{{$j}}], b[r0 + 3u * p.n + bc{{$j}}]);{{end}}
{{- end}}
{{- end}}
{{- define "lanes_aprep"}}{{end}}
{{- define "lanes_aload"}}a[ar{{.a}} + k4]{{end}}
{{- define "lanes_ascale"}}{{.v}}{{end}}
{{- define "lanes_store"}}c[{{.gm}} * p.n + {{.n}}] = {{.v}};{{end}}
