package gpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]uint64{"0": 0, "4096": 4096, "3KiB": 3 << 10, "80GiB": 80 << 30, "2 MiB": 2 << 20, "1T": 1 << 40, "7G": 7 << 30} {
		if got, err := gpu.ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5GiB", "GiB", "12 apples", "99999999999TiB"} {
		if _, err := gpu.ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

// TestOutOfMemory: a buffer above maxBufferSize, or beyond the memory budget, is an error
// wrapping ErrOutOfMemory that names the buffer and the bytes wanted — checked in Go before
// the driver is asked, so nothing is allocated and the process goes on.
func TestOutOfMemory(t *testing.T) {
	d := gputest.Open(t)
	defer d.SetMemoryBudget(d.MemoryBudget())
	d.FreeScratch() // kept scratch would be freed to make room (TestScratchReuse)
	before := d.MemStats()
	max := d.Info().MaxBufferSize
	_, err := d.NewBuffer("huge activations", gpu.F32, int(max/4)+1)
	if !errors.Is(err, gpu.ErrOutOfMemory) || !strings.Contains(err.Error(), `"huge activations"`) || !strings.Contains(err.Error(), "maxBufferSize") {
		t.Errorf("above maxBufferSize: %v", err)
	}
	d.SetMemoryBudget(before.CurrentBytes + 1000)
	if d.MemoryBudget() != before.CurrentBytes+1000 {
		t.Fatalf("budget %d", d.MemoryBudget())
	}
	ok, err := d.NewBuffer("fits", gpu.F32, 250)
	if err != nil {
		t.Fatalf("a 1000-byte buffer within the budget: %v", err)
	}
	_, err = d.NewBuffer("one too many", gpu.F32, 1)
	if !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Fatalf("beyond the budget: %v", err)
	}
	for _, w := range []string{`"one too many"`, "needs 4 bytes", "NVG_GPU_MEMORY"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	ok.Release()
	if after := d.MemStats(); after.CurrentBytes != before.CurrentBytes || after.Buffers != before.Buffers {
		t.Errorf("memory %+v → %+v", before, after)
	}
}
