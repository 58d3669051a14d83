package train

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// CheckMemory refuses a run whose windows and their teacher top-k exceed the machine's
// memory, naming the largest step count (or window pool) that fits: that one fits, the next
// does not. The machine's memory is replaced by 1 GiB here; an unknown memory (0) checks
// nothing.
func TestCheckMemory(t *testing.T) {
	if runtime.GOOS == "linux" && hostMemory() < 1<<28 {
		t.Errorf("hostMemory() = %d bytes on Linux, want the machine's memory", hostMemory())
	}
	defer func(f func() uint64) { physicalMemory = f }(physicalMemory)
	const mem = 1 << 30
	physicalMemory = func() uint64 { return mem }
	c := DefaultTrainConfig()
	c.Steps = 100000 // 400,000 windows × (65 ids + 64 × 97 top-k floats) ≈ 9.9 GB
	// One window: 8·65 + 24 bytes of ids, 4·64·(3·32+1) of top-k, 1 flag = 25,377 bytes.
	if got := c.windowBytes(); got != 8*65+24+4*64*97+1 {
		t.Fatalf("windowBytes = %d, want %d", got, 8*65+24+4*64*97+1)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	err := c.CheckMemory()
	var ce *TrainConfigError
	if !errors.As(err, &ce) || ce.Field != "Steps" {
		t.Fatalf("CheckMemory: %v, want a TrainConfigError on Steps", err)
	}
	var n int
	if _, err := fmt.Sscanf(ce.Want, "≤ %d", &n); err != nil {
		t.Fatalf("%q names no limit", ce.Want)
	}
	c.Steps = n
	if c.HostBytes() > mem || c.CheckMemory() != nil {
		t.Errorf("Steps = %d (the limit): %d bytes, %v", n, c.HostBytes(), c.CheckMemory())
	}
	c.Steps = n + 1
	if c.HostBytes() <= mem || c.CheckMemory() == nil {
		t.Errorf("Steps = %d (the limit + 1): %d bytes of %d accepted", n+1, c.HostBytes(), mem)
	}
	c.Steps, c.Windows = 1e9, 50000 // a pool cycled: the pool (1.27 GB) is what is held
	if err := c.CheckMemory(); !errors.As(err, &ce) || ce.Field != "Windows" {
		t.Errorf("a pool of 50,000 windows in 1 GiB: %v, want an error on Windows", err)
	}
	physicalMemory = func() uint64 { return 0 }
	if err := c.CheckMemory(); err != nil {
		t.Errorf("unknown memory: %v", err)
	}
}

// A hidden-state cache in host memory is counted with the windows: one that fits 1 GiB
// passes, one that does not is refused naming the way out; unknown memory checks nothing.
func TestCheckHiddenMemory(t *testing.T) {
	defer func(f func() uint64) { physicalMemory = f }(physicalMemory)
	physicalMemory = func() uint64 { return 1 << 30 }
	c := DefaultTrainConfig() // 96 windows of 64 tokens
	if err := c.checkHiddenMemory(96, 256, []int{3, 7}); err != nil {
		t.Errorf("the default run's 6 MiB of hidden states: %v", err)
	}
	// 96 windows × 64 tokens × hidden 65,536 × 2 layers × 2 bytes = 1.5 GiB.
	err := c.checkHiddenMemory(96, 65536, []int{3, 7})
	if err == nil || !strings.Contains(err.Error(), "TopKFile") || !strings.Contains(err.Error(), "HiddenLoss") {
		t.Errorf("1.5 GiB of hidden states in 1 GiB: %v, want a refusal naming TopKFile and HiddenLoss", err)
	}
	physicalMemory = func() uint64 { return 0 }
	if err := c.checkHiddenMemory(96, 65536, []int{3, 7}); err != nil {
		t.Errorf("unknown memory: %v", err)
	}
}
