package wgsl

import (
	"strings"
	"testing"
	"text/template"
)

// TestRenderLibrary: a GEMM kernel renders through the shared library gemm_tile.wgsl with
// its hooks filled, the chunked gated delta rule's kernels through
// gated_delta_rule_chunk_lib.wgsl (with the backward's hook), the libraries define disjoint
// names, and the library's helpers reject bad use with errors, not panics.
func TestRenderLibrary(t *testing.T) {
	type lin struct {
		TransB, BF16, Fast bool
		BM, BN, BK, N, K   int
	}
	src, err := Render("linear.wgsl", lin{TransB: true, BF16: true, Fast: true, BM: 128, BN: 128, BK: 32, N: 512, K: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fn main(", "var rb0_0: vec2<u32>;", "let k4 = (kl >> 2u) + s / 32u;",
		"rb0_3 = b[(row + 3u) * K4 + k4];", "c[gm * N4 + (n0 >> 2u) + lid.x + 16u] = acc_7_1;", "const K = 1024u;"} {
		if !strings.Contains(src, want) {
			t.Errorf("linear.wgsl (TransB, f16, fast) lacks %q", want)
		}
	}
	if strings.Contains(src, "{{") || strings.Contains(src, "gemm_b") || strings.Contains(src, "gemm_main") {
		t.Error("rendered text still holds template syntax or hook names")
	}
	type blr struct {
		TransB, ScaleC, Accum, Raw, Fast bool
		BM, BN, BK, N, K                 int
	}
	src, err = Render("blr_forward.wgsl", blr{ScaleC: true, Accum: true, Raw: true, Fast: true, BM: 64, BN: 64, BK: 16, N: 256, K: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"var rb0: u32;", "signs(vec4<u32>(rb0) >> vec4<u32>(0u, 1u, 2u, 3u))",
		"raw[gm * N4 + n4] = acc_0_0;", "let v = acc_0_0 * sc[n4];", "c[gm * N4 + n4] = c[gm * N4 + n4] + v;",
		"@binding(5) var<storage, read_write> raw", "@binding(6) var<uniform> p"} {
		if !strings.Contains(src, want) {
			t.Errorf("blr_forward.wgsl (ScaleC, Accum, Raw, fast) lacks %q", want)
		}
	}
	type gdrc struct {
		DK, DV, CS         int
		Intra, Tiled       bool
		Unroll             bool
		BK, IT, ND         int
		WantState, SaveH   bool
		HBinding, UBinding int
	}
	type gdrcb struct {
		DK, DV, CS int
		Stage      string
		BC, LPR    int
	}
	for _, c := range []struct {
		file   string
		params any
		want   []string
	}{
		{"gated_delta_rule_chunked.wgsl", gdrc{DK: 128, DV: 128, Intra: true}, []string{
			"    nck: u32, // ⌈t / 64⌉\n};\n@group(0) @binding(9) var<uniform> p: Params;\n\nconst C: u32 = 64u;",
			"const DK: u32 = 128u;", "@compute @workgroup_size(256)", "    let bj = wg / p.nck;\n    let j = bj % p.hv;\n",
			"    let sr0 = bj * p.t + t0; // scratch row of the chunk's first token\n    if (lid < C) {",
			"        var x: array<f32, 64>;"}},
		{"gated_delta_rule_chunked.wgsl", gdrc{DK: 128, DV: 128, Intra: true, Unroll: true}, []string{
			"        var x0 = 0.0;\n        if (0u < L) {", "            a0 = fma(aw[4094], x62, a0);\n            x63 = rhs - (a0 + a1);",
			"            a1 = fma(aw[4093], x61, a1);", "            storeWU(col, sr0 + 63u, x63);"}},
		{"gated_delta_rule_chunked.wgsl", gdrc{DK: 128, DV: 128, CS: 32, WantState: true, SaveH: true, HBinding: 8, UBinding: 10},
			[]string{"@group(0) @binding(10) var<uniform> p: Params;", "    let slice = wg % NS;\n    let bj = wg / NS;\n",
				"                h[((bj * p.nck + ci) * DK + d) * DV + c] = sw[d * C4 + (e % CS) / 4u][e % 4u];",
				"            state[(bj * DK + d) * DV + c] = sw[", "fn col4(base: u32, c: u32)", "                let s3 = sw[(4u * d + 3u) * C4 + c4];",
				"            gk[lid] = ek;\n        }\n        for (var e = lid; e < DK * CS; e += WG) {"}},
		{"gated_delta_rule_chunked.wgsl", gdrc{DK: 64, DV: 64, CS: 16, Tiled: true, BK: 32, IT: 64, ND: 1, UBinding: 7},
			[]string{"@compute @workgroup_size(128)", "    for (var e = lid; e < DK * C4; e += WG) {\n        sw[e] = vec4<f32>(0.0);\n    }\n    let rg = lid / C4;"}},
		{"gated_delta_rule_chunked_backward.wgsl", gdrcb{DK: 128, DV: 128, CS: 32, Stage: "state", BC: 8, LPR: 8},
			[]string{"    nck: u32,\n};\n\nconst C: u32 = 64u;", "    let bj = wg / p.nck;\n    let j = bj % p.hv;",
				"    let sr0 = bj * p.t + t0;\n    let gl = gc[sr0 + L - 1u];", "                    dwt[(sr0 + i) * D4 + dg] = -xc7;\n                }"}},
		{"gated_delta_rule_chunked_backward.wgsl", gdrcb{DK: 128, DV: 128, CS: 32, Stage: "f", BC: 8, LPR: 8},
			[]string{"    row0 = b * p.t + t0;\n    sr0 = bj * p.t + t0;\n", "                    wyb[(sr0 + i) * W4 + 2u * D4 + V4 + dg] = xq7;"}},
		{"gated_delta_rule_chunked_backward.wgsl", gdrcb{DK: 128, DV: 128, CS: 32, Stage: "final", BC: 8, LPR: 4},
			[]string{"@compute @workgroup_size(256)", "    let kh = j / (p.hv / p.hk);\n    let t0 = ci * C;\n    let L = min(C, p.t - t0);\n    let i = lid / LPR;"}},
	} {
		src, err := Render(c.file, c.params)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(src, want) {
				t.Errorf("%s %+v lacks %q", c.file, c.params, want)
			}
		}
		if strings.Contains(src, "{{") || strings.Contains(src, "gdrc_") {
			t.Errorf("%s %+v still holds template syntax or define names", c.file, c.params)
		}
	}
	defined := map[string]string{}
	for _, lib := range libraries {
		text, err := FS.ReadFile(lib)
		if err != nil {
			t.Fatal(err)
		}
		lt, err := template.New(lib).Funcs(funcs).Parse(string(text))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range lt.Templates() {
			if d.Name() == lib {
				continue
			}
			if other, ok := defined[d.Name()]; ok {
				t.Errorf("%q defined in both %s and %s", d.Name(), other, lib)
			}
			defined[d.Name()] = lib
		}
	}
	if len(defined) == 0 {
		t.Error("the libraries define nothing")
	}
	if _, err := Render("linear.wgsl", struct{ BM int }{64}); err == nil || !strings.Contains(err.Error(), "linear.wgsl") {
		t.Errorf("missing parameters: %v, want an error naming the file", err)
	}
	if _, err := Render("no_such.wgsl", nil); err == nil {
		t.Error("unknown file rendered")
	}
	dict := funcs["dict"].(func(...any) (map[string]any, error))
	if _, err := dict("a", 1, "b"); err == nil {
		t.Error("dict with an odd number of arguments accepted")
	}
	if _, err := dict(1, 2); err == nil {
		t.Error("dict with a non-string key accepted")
	}
	if m, err := dict("t", 3, "P", "x"); err != nil || m["t"] != 3 || m["P"] != "x" {
		t.Errorf("dict(t 3 P x) = %v, %v", m, err)
	}
}
