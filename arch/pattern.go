package arch

import (
	"fmt"
	"strings"
)

// LayerPattern summarises c.LayerTypes as runs of one kind, in order: for the tiny teacher's
// 8 layers "3×GatedDeltaNet, 1×attention, 3×GatedDeltaNet, 1×attention" (LinearAttention
// layers are "GatedDeltaNet", FullAttention ones "attention"); "" for no layers.
func (c Config) LayerPattern() string {
	var parts []string
	for i := 0; i < len(c.LayerTypes); {
		j := i
		for j < len(c.LayerTypes) && c.LayerTypes[j] == c.LayerTypes[i] {
			j++
		}
		kind := "GatedDeltaNet"
		if c.LayerTypes[i] == FullAttention {
			kind = "attention"
		}
		parts = append(parts, fmt.Sprintf("%d×%s", j-i, kind))
		i = j
	}
	return strings.Join(parts, ", ")
}
