package wgsl

import (
	"strings"
	"testing"
)

// TestRenderLibrary: a GEMM kernel renders through the shared library (gemm_tile.wgsl) with
// its hooks filled, and the library's helpers reject bad use with errors, not panics.
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
		TransB, ScaleC, Accum, Fast bool
		BM, BN, BK, N, K            int
	}
	src, err = Render("blr_forward.wgsl", blr{ScaleC: true, Accum: true, Fast: true, BM: 64, BN: 64, BK: 16, N: 256, K: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"var rb0: u32;", "signs(vec4<u32>(rb0) >> vec4<u32>(0u, 1u, 2u, 3u))",
		"let v = acc_0_0 * sc[n4];", "c[gm * N4 + n4] = c[gm * N4 + n4] + v;"} {
		if !strings.Contains(src, want) {
			t.Errorf("blr_forward.wgsl (ScaleC, Accum, fast) lacks %q", want)
		}
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
