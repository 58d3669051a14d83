// The lane-blocked form of blr_forward.wgsl for CPU adapters (the body is gemm_lanes.wgsl's,
// see there): C[M, N] (+)= (A ⊙ sa)·B (⊙ sc) with B a ±1 sign matrix of packed bits, [N, K]
// when TransB (t1, y, c), else [K, N] (dt2, dxg) — the operands of blr_forward.wgsl.
// Bit-identical to the tiled kernel and to blr_forward_naive.wgsl: A ⊙ sa is one f32
// product per element, each output one fma chain in K order, then ⊙ sc, then + C.
// Requires K % 4 == 0 (TransB: K % 8 == 0) and 16-byte aligned A and sa bindings; when not
// TransB, N % 8 == 0 (a lane's C columns of one k are C bits of one word; C = 16 or 32 needs
// N % C == 0: blrLanes).
// Raw (ScaleC only): each sum before ⊙ sc is also stored in raw [M, N]. Chunk = q (TransB,
// which requires K % 8 == 0; gpu.blrChunk: the largest q of 8, 4, 2 with K % 4q == 0, so every
// column's bits start on a 4q-bit boundary and q k steps' signs never straddle a word): a
// lane loads each column's u32 once per q k steps, 4q signs at a time, instead of a word per
// step (on lavapipe each load is a loop over the lanes). For the same reason sa reaches the
// lanes by subgroupShuffle (lane l loads sa[k4 + l] every S k steps) and each lane loads its
// columns' sc once. Template parameters: TransB, ScaleC, Accum, Raw, Pair (bools), Chunk
// (TransB: 2, 4 or 8; else 0), S, R, C, H.
//
// Pair (neither ScaleC, Accum nor Raw; gemm_lanes.wgsl): the two paths of a BLR layer at
// once, C_q = (A ⊙ sa_q)·B_q with bits1, sa1 and c1 the second path's, A loaded once for
// both (t1: A = x, dt2: A = dy). Each output's products and fma chain are the single GEMM's.

{{- if .Pair}}
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> bits: array<u32>;
@group(0) @binding(2) var<storage, read> bits1: array<u32>;
@group(0) @binding(3) var<storage, read> sa: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> sa1: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> c: array<f32>;
@group(0) @binding(6) var<storage, read_write> c1: array<f32>;
{{template "gemm_params" (dict "B" 7)}}
{{- else}}
{{template "gemm_blr_io" (dict "A" "vec4<f32>" "SA" "vec4<f32>" "F" "f32" "ScaleC" .ScaleC "Raw" .Raw)}}
{{- end}}

// signs maps bit 0 of each lane to ±1.0 (1 ↦ +1, 0 ↦ −1).
fn signs(v: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(0xBF800000u) ^ ((v & vec4<u32>(1u)) << vec4<u32>(31u)));
}

{{template "lanes_main" .}}
{{- define "lanes_setup"}}
{{- $H := .H}}
{{- if .TransB}}{{range $j := seq .C}} let bc{{$j}} = min(nl + {{mod $j $H}}u, p.n - 1u) * p.k;{{end}}
{{- else}} let nc = min(nl, p.n - {{$H}}u);
{{- end}}
{{- if .ScaleC}}{{range $j := seq .C}} let sc{{$j}} = sc[min(nl + {{$j}}u, p.n - 1u)];{{end}}
{{- end}} var sl4 = vec4<f32>(0.0);{{if .Pair}} var sl4b = vec4<f32>(0.0);{{end}}
{{- if .Chunk}}{{range $j := seq .C}} var w{{$j}} = 0u;{{end}}
{{- end}}
{{- end}}
{{- define "lanes_bload"}}
{{- $H := .H}}
{{- if .Chunk}} if (k4 % {{.Chunk}}u == 0u) { {{- range $j := seq .C}} let e{{$j}} = bc{{$j}} + 4u * k4; w{{$j}} = bits{{if ge $j $H}}1{{end}}[e{{$j}} >> 5u] >> (e{{$j}} & 31u);{{end}} }{{range $j := seq .C}} let b{{$j}} = signs(vec4<u32>(w{{$j}} >> (4u * (k4 % {{$.Chunk}}u))) >> vec4<u32>(0u, 1u, 2u, 3u));{{end}}
{{- else}}{{range $kk := seq 4}} let e{{$kk}} = (4u * k4 + {{$kk}}u) * p.n + nc; let w{{$kk}} = bits[e{{$kk}} >> 5u] >> (e{{$kk}} & 31u);{{if $.Pair}} let u{{$kk}} = bits1[e{{$kk}} >> 5u] >> (e{{$kk}} & 31u);{{end}}{{end}} let wv = vec4<u32>(w0, w1, w2, w3);{{if .Pair}} let uv = vec4<u32>(u0, u1, u2, u3);{{end}}{{range $j := seq .C}} let b{{$j}} = signs({{if ge $j $H}}uv >> vec4<u32>({{sub $j $H}}u){{else}}wv >> vec4<u32>({{$j}}u){{end}});{{end}}
{{- end}}
{{- end}}
{{- define "lanes_aprep"}} if (k4 % {{.S}}u == 0u) { sl4 = sa[min(k4 + sl, k4n - 1u)];{{if .Pair}} sl4b = sa1[min(k4 + sl, k4n - 1u)];{{end}} } let s4 = subgroupShuffle(sl4, k4 % {{.S}}u);{{if .Pair}} let s4b = subgroupShuffle(sl4b, k4 % {{.S}}u);{{end}}{{end}}
{{- define "lanes_aload"}}a[ar{{.a}} + k4]{{end}}
{{- define "lanes_ascale"}}{{.v}} * s4{{if .q}}b{{end}}{{end}}
{{- define "lanes_store"}}{{if .P.Raw}}raw[{{.gm}} * p.n + {{.n}}] = {{.v}}; {{end}}{{if .P.ScaleC}}let v = {{.v}} * sc{{.j}};{{else}}let v = {{.v}};{{end}}{{if .P.Accum}} c[{{.gm}} * p.n + {{.n}}] = c[{{.gm}} * p.n + {{.n}}] + v;{{else}} c{{if .q}}1{{end}}[{{.gm}} * p.n + {{.n}}] = v;{{end}}{{end}}
