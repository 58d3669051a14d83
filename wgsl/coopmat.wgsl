// Placeholder of a cooperative-matrix kernel (gpu/coopmat.go coopProgram; DESIGN.md §7,
// "Tensor cores through a Vulkan layer"). wgpu compiles this text and builds the pipeline's
// layout from it; the Vulkan layer (gpu/vklayer) recognises the module by its entry point,
// Entry (nvg's unique "nvgcm_…" name), and creates it from the SPIR-V gpu registered under
// that name (a gpu/coopmat/*.comp kernel, specialised), which declares the same bindings
// with compatible types: every storage binding here is array<u32> (f32 and f16 pairs alike:
// wgpu's layout only needs the access and a 4-byte element), the parameters one uniform
// struct of u32 words (an f32 parameter travels as its bits). The body never runs unswapped
// (gpu checks the layer's swap count after the pipeline is made and drops the pipeline
// otherwise); it touches every binding so that wgpu's automatic layout keeps them all.
// Template parameters: Entry, WG (the replacement's workgroup size), RW (per storage binding
// in order: true for read_write, false for read), Uniforms (the number of u32 parameters, at
// binding len(RW)).
{{- $n := len .RW}}
{{range $i, $w := .RW}}
@group(0) @binding({{$i}}) var<storage, {{if $w}}read_write{{else}}read{{end}}> b{{$i}}: array<u32>;
{{- end}}

struct Params {
{{- range $i := seq .Uniforms}}
    u{{$i}}: u32,
{{- end}}
};
@group(0) @binding({{$n}}) var<uniform> p: Params;

@compute @workgroup_size({{.WG}})
fn {{.Entry}}(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0xffffffffu) {
        var x = 0u{{range $i := seq .Uniforms}} + p.u{{$i}}{{end}};
{{- range $i, $w := .RW}}
        x += b{{$i}}[0];
{{- end}}
{{- range $i, $w := .RW}}{{if $w}}
        b{{$i}}[0] = x;
{{- end}}{{end}}
    }
}
