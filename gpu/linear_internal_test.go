package gpu

import "testing"

// TestGEMMVariantSelection checks the tile choice (gemmTileFor) and the exact fast-path
// condition (gemmFast) without a device.
func TestGEMMVariantSelection(t *testing.T) {
	gpuDev := &Device{info: Info{MaxWorkgroupStorage: 32 << 10}}
	cpuDev := &Device{info: Info{CPU: true, MaxWorkgroupStorage: 32 << 10}}
	for _, c := range []struct {
		d          *Device
		m, n, k    int
		bm, bn, bk int
	}{
		{gpuDev, 4096, 4096, 4096, 128, 128, 32},
		{gpuDev, 4096, 1024, 3584, 128, 128, 32}, // 256 workgroups
		{gpuDev, 4096, 384, 1024, 64, 128, 32},   // 96 at 128×128, 192 at 64×128
		{gpuDev, 4096, 896, 2560, 64, 128, 32},   // 224 at 128×128
		{gpuDev, 1024, 384, 1024, 64, 64, 32},    // 96 at 64×64, the last resort
		{gpuDev, 4096, 1088, 48, 128, 64, 16},    // 1088 % 128 ≠ 0: 128×64 keeps the fast path
		{gpuDev, 4096, 1090, 40, 128, 128, 32},   // nothing divides 1090: the general path
		{gpuDev, 100, 4096, 4096, 64, 64, 16},    // small output
		{cpuDev, 4096, 4096, 4096, 64, 64, 16},
	} {
		bm, bn, bk := c.d.gemmTileFor(c.m, c.n, c.k)
		if bm != c.bm || bn != c.bn || bk != c.bk {
			t.Errorf("gemmTileFor(%d, %d, %d) on CPU=%v = %d×%d×%d, want %d×%d×%d",
				c.m, c.n, c.k, c.d.info.CPU, bm, bn, bk, c.bm, c.bn, c.bk)
		}
	}
	for _, c := range []struct {
		n, k, bn, bk int
		off          uint64
		general      bool
		want         bool
	}{
		{128, 64, 128, 32, 0, false, true},
		{128, 64, 64, 16, 256, false, true},
		{130, 64, 64, 16, 0, false, false},
		{128, 48, 128, 32, 0, false, false},
		{128, 48, 128, 16, 0, false, true},
		{128, 64, 128, 32, 8, false, false},
		{128, 64, 128, 32, 0, true, false},
	} {
		restore := func() {}
		if c.general {
			restore = SetGEMMVariant(0, 0, 0, true)
		}
		if got := gemmFast(c.n, c.k, c.bn, c.bk, Binding{}, Binding{Offset: c.off}); got != c.want {
			t.Errorf("gemmFast(%+v) = %v, want %v", c, got, c.want)
		}
		restore()
	}
}
