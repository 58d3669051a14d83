package arch

import "testing"

// TestLayerPattern: runs of one layer kind, in order, each counted.
func TestLayerPattern(t *testing.T) {
	L, F := LinearAttention, FullAttention
	for _, tc := range []struct {
		types []string
		want  string
	}{
		{nil, ""},
		{[]string{F}, "1×attention"},
		{[]string{L, L, L, F, L, L, L, F}, "3×GatedDeltaNet, 1×attention, 3×GatedDeltaNet, 1×attention"},
		{[]string{F, F, L}, "2×attention, 1×GatedDeltaNet"},
	} {
		if got := (Config{LayerTypes: tc.types}).LayerPattern(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.types, got, tc.want)
		}
	}
}
