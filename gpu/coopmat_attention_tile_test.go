package gpu

import "testing"

// TestCoopAttnTileFor: the attention kernels' tiles on an NVIDIA-like device (16×16×16,
// subgroups of 32, 48 KiB of workgroup memory) are the ones coopAttnTileFor documents, at
// the workgroup memory computed by hand from coopmat_attention.comp's arrays (the forward at
// head_dim 256: S 64×68 f32, P 64×72 f16, the staged slices (64 + 64)×72 f16, Ms and Ls 2×256
// f32 = 47,104 bytes); with 32 KiB they shrink and still pass check; CPU adapters take 2L×2L
// with 4 subgroups; and coopSplits accepts only equal runs within one row.
func TestCoopAttnTileFor(t *testing.T) {
	s16 := CoopType{M: 16, N: 16, K: 16}
	gpu := &Device{tc: TensorCores{Shape: s16, SubgroupSize: 32}, info: Info{MaxInvocations: 1024, MaxWorkgroupStorage: 48 << 10}}
	for _, c := range []struct {
		st     coopAttnStage
		hd     int
		want   coopAttnTile
		shared int
	}{
		{coopAttnFwd, 256, coopAttnTile{256, 64, 64, 8}, 64*68*4 + 64*72*2 + 128*72*2 + 2*256*4},
		{coopAttnDQ, 256, coopAttnTile{256, 64, 32, 8}, 64*36*4 + 64*40*2 + 96*72*2 + 64*36*4 + 256*4},
		{coopAttnDKV, 256, coopAttnTile{256, 32, 64, 8}, 32*68*4 + 32*72*2 + 96*72*2 + 32*68*4 + 256*4 + 32*72*2 + 2*64*4},
		{coopAttnFwd, 100, coopAttnTile{128, 64, 64, 8}, 64*68*4 + 64*72*2 + 128*72*2 + 2*256*4},
	} {
		got, err := gpu.coopAttnTileFor(c.st, c.hd)
		if err != nil || got != c.want {
			t.Errorf("GPU stage %d, head_dim %d: %+v, %v; want %+v", c.st, c.hd, got, err, c.want)
			continue
		}
		if sh := got.shared(c.st, 32, 16); sh != c.shared {
			t.Errorf("GPU stage %d: %d bytes of workgroup memory, want %d", c.st, sh, c.shared)
		}
	}
	small := &Device{tc: gpu.tc, info: Info{MaxInvocations: 1024, MaxWorkgroupStorage: 32 << 10}}
	for st := range coopAttnFiles {
		got, err := small.coopAttnTileFor(coopAttnStage(st), 256)
		if err != nil || got.check(coopAttnStage(st), 32, 16, small.info) != nil || got.shared(coopAttnStage(st), 32, 16) > 32<<10 {
			t.Errorf("32 KiB, stage %d: %+v, %v", st, got, err)
		}
	}
	cpu := &Device{tc: TensorCores{Shape: CoopType{M: 8, N: 8, K: 8}, SubgroupSize: 8}, info: Info{CPU: true, MaxInvocations: 1024, MaxWorkgroupStorage: 32 << 10}}
	for st := range coopAttnFiles {
		if got, err := cpu.coopAttnTileFor(coopAttnStage(st), 20); err != nil || got != (coopAttnTile{32, 16, 16, 4}) {
			t.Errorf("CPU stage %d: %+v, %v; want {32 16 16 4}", st, got, err)
		}
	}
	for _, c := range []struct {
		rows, cols, nsg int
		want            bool
	}{{4, 4, 8, true}, {4, 2, 8, true}, {2, 4, 8, true}, {8, 8, 8, true}, {4, 4, 4, true},
		{1, 4, 8, false}, {4, 1, 8, false}, {3, 4, 8, false}, {4, 3, 8, false}} {
		if got := coopSplits(c.rows, c.cols, c.nsg); got != c.want {
			t.Errorf("coopSplits(%d, %d, %d) = %v, want %v", c.rows, c.cols, c.nsg, got, c.want)
		}
	}
}
