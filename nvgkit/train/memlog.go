package train

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nvg-project/nvg/gpu"
)

// MemLogHeader is the first line of a memory log (the CSV columns MemLogger writes).
const MemLogHeader = "step,wall_s,tokens_per_s,gpu_current_bytes,gpu_peak_bytes,go_heap_alloc_bytes,go_heap_objects,goroutines"

// MemSample is one row of a memory log: at optimizer step Step, WallSeconds after the
// logger started, the training throughput over the interval since the previous sample
// (TokensPerSec; 0 for the first row), the device's nvg buffers (gpu.MemStats) and the Go
// runtime's live heap (runtime.MemStats HeapAlloc and HeapObjects) and goroutine count.
type MemSample struct {
	Step                int
	WallSeconds         float64
	TokensPerSec        float64
	GPUCurrent, GPUPeak uint64
	HeapAlloc, HeapObjs uint64
	Goroutines          int
}

// MemLogger appends MemSamples as CSV lines to a writer, one line per Sample call, each
// written with a single Write (to an *os.File: unbuffered, so the log survives a killed
// process up to its last line). For long runs, to show that GPU memory, the Go heap and the
// speed stay flat.
type MemLogger struct {
	w             io.Writer
	dev           *gpu.Device
	tokensPerStep int
	start, last   time.Time
	lastStep      int
	started       bool
}

// NewMemLogger returns a logger sampling dev (nil: GPU columns 0) for a run of
// tokensPerStep tokens per optimizer step, writing to w. When header is true the
// MemLogHeader line is written first (false: appending to an existing log).
func NewMemLogger(w io.Writer, dev *gpu.Device, tokensPerStep int, header bool) (*MemLogger, error) {
	if w == nil {
		return nil, errors.New("NewMemLogger: nil writer")
	}
	if header {
		if _, err := io.WriteString(w, MemLogHeader+"\n"); err != nil {
			return nil, fmt.Errorf("train: memory log: %w", err)
		}
	}
	return &MemLogger{w: w, dev: dev, tokensPerStep: tokensPerStep}, nil
}

// Sample takes one sample after optimizer step step and writes its line. It reads
// runtime.MemStats (a short stop of the world): call it every few hundred steps, not every
// step, on long runs.
func (l *MemLogger) Sample(step int) (MemSample, error) {
	now := time.Now()
	if !l.started {
		l.start, l.last, l.lastStep, l.started = now, now, step, true
	}
	s := MemSample{Step: step, WallSeconds: now.Sub(l.start).Seconds(), Goroutines: runtime.NumGoroutine()}
	if dt := now.Sub(l.last).Seconds(); dt > 0 && step > l.lastStep {
		s.TokensPerSec = float64((step-l.lastStep)*l.tokensPerStep) / dt
	}
	l.last, l.lastStep = now, step
	if l.dev != nil {
		m := l.dev.MemStats()
		s.GPUCurrent, s.GPUPeak = m.CurrentBytes, m.PeakBytes
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.HeapAlloc, s.HeapObjs = ms.HeapAlloc, ms.HeapObjects
	line := fmt.Sprintf("%d,%.3f,%.1f,%d,%d,%d,%d,%d\n", s.Step, s.WallSeconds, s.TokensPerSec, s.GPUCurrent, s.GPUPeak, s.HeapAlloc, s.HeapObjs, s.Goroutines)
	if _, err := io.WriteString(l.w, line); err != nil {
		return s, fmt.Errorf("train: memory log: %w", err)
	}
	return s, nil
}

// ReadMemLog reads a memory log written by MemLogger (header lines, which a resumed run
// repeats, are skipped). Errors name the file and line.
func ReadMemLog(path string) ([]MemSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []MemSample
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == MemLogHeader {
			continue
		}
		fs := strings.Split(line, ",")
		if len(fs) != 8 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 8 (%s)", path, n, len(fs), MemLogHeader)
		}
		var s MemSample
		var errs []error
		atoi := func(f string) int { v, err := strconv.Atoi(f); errs = append(errs, err); return v }
		atou := func(f string) uint64 { v, err := strconv.ParseUint(f, 10, 64); errs = append(errs, err); return v }
		atof := func(f string) float64 { v, err := strconv.ParseFloat(f, 64); errs = append(errs, err); return v }
		s.Step, s.WallSeconds, s.TokensPerSec = atoi(fs[0]), atof(fs[1]), atof(fs[2])
		s.GPUCurrent, s.GPUPeak, s.HeapAlloc, s.HeapObjs = atou(fs[3]), atou(fs[4]), atou(fs[5]), atou(fs[6])
		s.Goroutines = atoi(fs[7])
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return out, nil
}
