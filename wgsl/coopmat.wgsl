// Placeholder of a cooperative-matrix kernel (gpu/coopmat.go; DESIGN.md §7, "Tensor cores
// through a Vulkan layer"). wgpu compiles this text and builds the pipeline's layout from it;
// the Vulkan layer (gpu/vklayer) recognises the module by its entry point, Entry (nvg's
// unique "nvgcm_…" name), and creates it from the SPIR-V gpu registered under that name
// (gpu/coopmat/coopmat_gemm.comp, specialised), which declares the same bindings with
// compatible types: f16 data travels as array<u32>. The body never runs unswapped (gpu
// checks the layer's swap count after the pipeline is made and drops the pipeline
// otherwise); it touches every binding so that wgpu's automatic layout keeps them all.
// Template parameters: Entry, WG (the replacement's workgroup size), Scale, Raw (bindings
// sc and raw present), PB (the uniform's binding).

@group(0) @binding(0) var<storage, read> a16: array<u32>;
@group(0) @binding(1) var<storage, read> rs: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
{{- if .Scale}}
@group(0) @binding(3) var<storage, read> sc: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;
{{- if .Raw}}
@group(0) @binding(5) var<storage, read_write> raw: array<f32>;
{{- end}}
{{- else}}
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
{{- end}}

struct Params {
    m: u32,
    n: u32,
    k: u32,
    kp: u32,
};
@group(0) @binding({{.PB}}) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn {{.Entry}}(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0xffffffffu) {
        c[0] = rs[0] + f32(a16[0] + b[0] + p.m + p.n + p.k + p.kp){{if .Scale}} + sc[0]{{end}};
{{- if .Raw}}
        raw[0] = c[0];
{{- end}}
    }
}
