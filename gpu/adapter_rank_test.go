package gpu

import (
	"testing"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// NVG_LOCAL_RANK spreads the ranks of a host over its adapters of the best type (mod their
// number), skipping other types; unset or invalid keeps Open's choice.
func TestRankAdapter(t *testing.T) {
	infos := []wgpu.AdapterInfo{
		{AdapterType: wgpu.AdapterTypeCPU}, {AdapterType: wgpu.AdapterTypeDiscreteGPU},
		{AdapterType: wgpu.AdapterTypeIntegratedGPU}, {AdapterType: wgpu.AdapterTypeDiscreteGPU},
	}
	for _, c := range []struct {
		env        string
		best, want int
	}{{"", 1, 1}, {"x", 1, 1}, {"-1", 1, 1}, {"0", 1, 1}, {"1", 1, 3}, {"2", 1, 1}, {"3", 1, 3}, {"5", 0, 0}} {
		t.Setenv("NVG_LOCAL_RANK", c.env)
		if got := rankAdapter(infos, c.best); got != c.want {
			t.Errorf("NVG_LOCAL_RANK=%q, best %d: adapter %d, want %d", c.env, c.best, got, c.want)
		}
	}
}
