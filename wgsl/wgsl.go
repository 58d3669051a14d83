// Package wgsl holds every compute shader of nvg, one file per op family, named after the
// op (residual_add.wgsl ↔ gpu.ResidualAdd ↔ host.ResidualAdd).
//
// The shaders are Go text/template files: sizes that must be compile-time constants
// (workgroup sizes, tile sizes, unrolled loop bounds, the f16 packing mode) are written into
// the text with literal values before compilation, because the WebGPU binding nvg uses has no
// pipeline-overridable constants. The gpu package renders a template with [Render] and caches
// the resulting pipeline by the template parameters.
//
// Conventions shared by all shaders:
//   - binding i of group 0 is the launcher's i-th buffer argument, in order; when a kernel
//     has runtime parameters, they follow as one uniform struct of u32 fields in the last
//     binding;
//   - f32 tensors are array<f32>, row-major; f16 tensors are packed two per u32 word
//     (element 2w in the low half of word w), read with unpack2x16float, so no shader needs
//     the shader-f16 feature;
//   - workgroup memory is never assumed zero-initialised (it is not on wgpu-native 27);
//   - a 1-D problem larger than 65535 workgroups is spread over a 2-D grid: the linear
//     workgroup index is wid.x + wid.y·nwg.x and every invocation bounds-checks it.
package wgsl

import (
	"bytes"
	"embed"
	"fmt"
	"sync"
	"text/template"
)

//go:embed *.wgsl
var FS embed.FS

// funcs are the helpers templates may call: seq n → 0, 1, …, n−1 (for unrolled loops with
// literal indices), halves n → n/2, n/4, …, 1 (the levels of a tree over n slots), add, sub,
// mul, div, mod (ints), and dict k1 v1 k2 v2 … → a map (to pass loop variables and the
// parameters to a {{template}} hook).
var funcs = template.FuncMap{
	"seq": func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	},
	"halves": func(n int) []int {
		var s []int
		for h := n / 2; h > 0; h /= 2 {
			s = append(s, h)
		}
		return s
	},
	"add": func(a, b int) int { return a + b },
	"sub": func(a, b int) int { return a - b },
	"mul": func(a, b int) int { return a * b },
	"div": func(a, b int) int { return a / b },
	"mod": func(a, b int) int { return a % b },
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("dict: %d arguments, want key-value pairs", len(kv))
		}
		m := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
}

// libraries are the files of shared templates (defines only) parsed with every shader:
// the tiled GEMM body that linear.wgsl and blr_forward.wgsl instantiate, the sub-steps
// that the chunked gated delta rule's forward and backward kernels share, the workgroup
// reductions (row entry, tree sum and max, sum of squares, streamed log-sum-exp step) of
// the norms, the logits kernels, Adam and the gradient norm, and the elementwise kernels'
// entry point, element count and overflow-free sigmoid, and the causal convolution's
// parameters and pre-activation (forward and backward), and the sign-learning kernels'
// score and padding helpers, and the lane-blocked GEMM body of CPU adapters that
// linear_lanes.wgsl and blr_forward_lanes.wgsl instantiate, and the attention kernels'
// sizes, entry point, row reader and tile loops, and the gated delta rule's forward
// bindings and entry point, shared by its token-by-token, lane-blocked and chunked forms,
// and QKNormRoPE's sizes and rotation partner (forward and backward). Their define names
// are global: each library prefixes its own (gemm_, gdrc_, red_, ew_, cc_, sign_, lanes_,
// attn_, gdr_, rope_).
var libraries = []string{"gemm_tile.wgsl", "gated_delta_rule_chunk_lib.wgsl", "reduce.wgsl", "elementwise.wgsl", "causal_conv1d_lib.wgsl", "sign_lib.wgsl", "gemm_lanes.wgsl", "attention_lib.wgsl", "gated_delta_rule_lib.wgsl", "rope_lib.wgsl"}

var (
	mu     sync.Mutex
	parsed = map[string]*template.Template{}
)

// Render returns the text of the shader file name (e.g. "residual_add.wgsl") with the
// template (which may call seq, add, mul, div, mod and dict, and instantiate the defines of
// the libraries) executed on params (a struct or map whose fields the template uses).
// Errors name the file: an unknown file, a template syntax error, or a missing parameter
// (templates run with missingkey=error).
func Render(name string, params any) (string, error) {
	mu.Lock()
	t, ok := parsed[name]
	if !ok {
		src, err := FS.ReadFile(name)
		if err != nil {
			mu.Unlock()
			return "", fmt.Errorf("wgsl: no shader file %q: %w", name, err)
		}
		t, err = template.New(name).Option("missingkey=error").Funcs(funcs).Parse(string(src))
		for _, lib := range libraries {
			if err != nil || lib == name {
				continue
			}
			var text []byte
			if text, err = FS.ReadFile(lib); err != nil {
				mu.Unlock()
				return "", fmt.Errorf("wgsl: no shader library %q: %w", lib, err)
			}
			_, err = t.New(lib).Parse(string(text))
		}
		if err != nil {
			mu.Unlock()
			return "", fmt.Errorf("wgsl: parse %s: %w", name, err)
		}
		parsed[name] = t
	}
	mu.Unlock()
	var b bytes.Buffer
	if err := t.Execute(&b, params); err != nil {
		return "", fmt.Errorf("wgsl: render %s: %w", name, err)
	}
	return b.String(), nil
}
