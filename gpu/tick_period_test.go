package gpu_test

import (
	"testing"
	"time"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestTickPeriodWallClock checks TickPeriod (1 ns, which nothing in the binding can confirm:
// see its doc) against the host clock on this adapter: one profiled submit of GEMMs that
// takes at least 150 ms of wall time must measure, in ticks × TickPeriod, more than 4 % and
// at most 105 % of that wall time (lavapipe on 2 loaded cores measured 30–50 %: the rest is
// recording, submitting and waking up; the bound is loose because a loaded CI machine
// stretches the wall time). An adapter whose Vulkan timestampPeriod is 25 ns or more
// (Intel's 52 or 83 ns) would read at most a 25th, and one below 1 ns more than the wall
// time, and fail here.
func TestTickPeriodWallClock(t *testing.T) {
	d := gputest.Open(t)
	if !d.Info().Timestamps {
		t.Skip("adapter has no timestamp queries")
	}
	const m, k, n = 256, 512, 512
	x, w, y := gemmOperands(t, d, 3, m, k, n)
	run := func(reps int) (time.Duration, error) {
		start := time.Now()
		err := d.Run(func(r *gpu.Recorder) error {
			for range reps {
				if err := gpu.Linear(r, x, w, y, m, k, n); err != nil {
					return err
				}
			}
			return nil
		})
		return time.Since(start), err
	}
	if _, err := run(1); err != nil { // compile the pipeline outside the timed submit
		t.Fatal(err)
	}
	if err := d.SetProfiling(true); err != nil {
		t.Fatal(err)
	}
	defer d.SetProfiling(false)
	defer d.ResetProfile()
	for reps := 2; reps <= 1<<16; reps *= 4 {
		d.ResetProfile()
		wall, err := run(reps)
		if err != nil {
			t.Fatal(err)
		}
		if wall < 150*time.Millisecond && reps < 1<<16 {
			continue
		}
		gpuTime := d.Profile().Total()
		ratio := gpuTime.Seconds() / wall.Seconds()
		t.Logf("%d GEMMs: GPU %v by timestamps (TickPeriod %v), wall %v: ratio %.3f", reps, gpuTime, gpu.TickPeriod, wall, ratio)
		if !(ratio > 0.04 && ratio <= 1.05) {
			t.Errorf("GPU time %v by timestamps vs %v of wall time (ratio %.3f): the tick period of this adapter is not %v", gpuTime, wall, ratio, gpu.TickPeriod)
		}
		return
	}
}
