package nvgkit_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// calibWindows are three windows of 48 tokens cut from the fixture's held-out ids (any text
// serves the parity check; a run calibrates on training windows).
func calibWindows(t *testing.T) [][]int {
	ids := tinytest.OpenFixtures(t).Windows(t)
	return [][]int{ids[0][:48], ids[1][:48], ids[1][16:64]}
}

// TestCalibrate checks the teacher pass's calibration statistics against the float64 host
// reference: host.Net.LinearInputs on the same windows reduced by compress.Calibration.Add.
// Every projection gets statistics, the token counts are exact (the
// padding of the last pass is not counted: the work holds two windows, three are given), and
// E[x_j²] and E[x·xᵀ] agree with the host's within the f32 forward's rounding (f16 weights on
// the GPU): per entry within 10⁻⁴ of √(E[x_i²]·E[x_j²]) (more on the cooperative-matrix path:
// kittest.Path.Tol). A streamed teacher gives the same
// bits, and a lower Gram limit drops the Grams above it and nothing else.
func TestCalibrate(t *testing.T) {
	d, m, net := kittest.TinyTeacher(t)
	windows := calibWindows(t)
	T := len(windows[0])
	w := newWork(t, d, net, 2, T)
	defer w.Release()
	gpuCal := compress.NewCalibration(1024)
	var calls [][2]int
	if err := nvgkit.Calibrate(context.Background(), net, w, windows, gpuCal, func(done, total int) { calls = append(calls, [2]int{done, total}) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, [][2]int{{2, 3}, {3, 3}}) {
		t.Errorf("progress calls %v, want [[2 3] [3 3]]", calls)
	}
	hn, err := host.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	hostCal := compress.NewCalibration(1024)
	for _, win := range windows {
		err := hn.LinearInputs([][]int{win}, func(names []string, x []float64, rows, cols int) error {
			return hostCal.Add(x, rows, cols, names...)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(gpuCal.Names(), hostCal.Names()) {
		t.Fatalf("GPU statistics for %v, host for %v", gpuCal.Names(), hostCal.Names())
	}
	// The tolerance on the cooperative-matrix path (tensor cores on) grows by the f16 rounding
	// of the teacher's GEMMs in series up to the last layer's inputs (kittest.Path.Tol).
	tol := kittest.DevicePath(d).Tol(1e-4, kittest.ForwardStages(net.Config.NumHiddenLayers, false), 1)
	worst := 0.0
	for _, name := range hostCal.Names() {
		if got, want := gpuCal.Tokens(name), len(windows)*T; got != want || hostCal.Tokens(name) != want {
			t.Fatalf("%s: %d tokens on the GPU, %d on the host, want %d", name, got, hostCal.Tokens(name), want)
		}
	}
	for _, name := range hostCal.Names() {
		cols := featureCount(t, hostCal, name)
		hs, _ := hostCal.SecondMoment(name, cols)
		gs, err := gpuCal.SecondMoment(name, cols)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hg, _ := hostCal.Gram(name, cols)
		gg, _ := gpuCal.Gram(name, cols)
		if (hg == nil) != (gg == nil) || hg == nil {
			t.Fatalf("%s: Gram on the GPU %v, on the host %v (want both, n = %d ≤ 1024)", name, gg != nil, hg != nil, cols)
		}
		for i := 0; i < cols; i++ {
			if e := math.Abs(gs[i]-hs[i]) / hs[i]; !(e <= tol) {
				t.Fatalf("%s: E[x_%d²] = %g on the GPU, %g on the host (relative %.3g)", name, i, gs[i], hs[i], e)
			}
			for j := 0; j < cols; j++ {
				e := math.Abs(gg[i*cols+j]-hg[i*cols+j]) / math.Sqrt(hs[i]*hs[j])
				worst = math.Max(worst, e)
				if !(e <= tol) {
					t.Fatalf("%s: E[x_%d·x_%d] = %g on the GPU, %g on the host (%.3g of √(E[x_i²]E[x_j²]))", name, i, j, gg[i*cols+j], hg[i*cols+j], e)
				}
			}
		}
	}
	t.Logf("%d weights; worst Gram difference %.3g of √(E[x_i²]E[x_j²])", len(hostCal.Names()), worst)

	// A streamed teacher: the same bits. A Gram limit of 256: no Gram for down_proj (768
	// features), the same second moments.
	sn, err := nvgkit.LoadNet(d, m, nvgkit.Teacher, nvgkit.StreamLayers())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	small := compress.NewCalibration(256)
	if err := nvgkit.Calibrate(context.Background(), sn, w, windows, small, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range hostCal.Names() {
		cols := featureCount(t, hostCal, name)
		a, _ := gpuCal.SecondMoment(name, cols)
		b, _ := small.SecondMoment(name, cols)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: the streamed teacher's second moments differ from the resident one's", name)
		}
		ga, _ := gpuCal.Gram(name, cols)
		gb, _ := small.Gram(name, cols)
		switch {
		case cols > 256 && gb != nil:
			t.Fatalf("%s: a Gram of %d features beyond the limit of 256", name, cols)
		case cols <= 256 && !slices.Equal(ga, gb):
			t.Fatalf("%s: the streamed teacher's Gram differs from the resident one's", name)
		}
	}
}

// featureCount returns the number of input features of the weight name's statistics in c.
func featureCount(t *testing.T, c *compress.Calibration, name string) int {
	t.Helper()
	for _, n := range []int{256, 768} {
		if _, err := c.SecondMoment(name, n); err == nil {
			return n
		}
	}
	t.Fatalf("%s: statistics of neither 256 nor 768 features", name)
	return 0
}

// TestCalibrateErrors checks that bad arguments are refused before anything is submitted and
// that a cancelled context stops the pass.
func TestCalibrateErrors(t *testing.T) {
	d, _, net := kittest.TinyTeacher(t)
	w := newWork(t, d, net, 2, 8)
	defer w.Release()
	cal := compress.NewCalibration(0)
	win := func(n int) []int { return make([]int, n) }
	bad := func(name, want string, err error) { t.Helper(); refused(t, name, want, err) }
	ctx := context.Background()
	bad("no windows", "no windows", nvgkit.Calibrate(ctx, net, w, nil, cal, nil))
	bad("nil calibration", "nil Calibration", nvgkit.Calibrate(ctx, net, w, [][]int{win(8)}, nil, nil))
	bad("short window", "window 2 has 7 tokens", nvgkit.Calibrate(ctx, net, w, [][]int{win(8), win(8), win(7)}, cal, nil))
	bad("bad id", "outside the vocabulary", nvgkit.Calibrate(ctx, net, w, [][]int{{1, 2, 3, 4, 5, 6, 7, net.Config.VocabSize}}, cal, nil))
	bad("zero calibration", "use NewCalibration", nvgkit.Calibrate(ctx, net, w, [][]int{win(8)}, &compress.Calibration{}, nil))
	if len(cal.Names()) != 0 {
		t.Errorf("refused calls added statistics for %v", cal.Names())
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := errors.New("stop")
	cancel(stop)
	if err := nvgkit.Calibrate(cctx, net, w, [][]int{win(8)}, cal, nil); !errors.Is(err, stop) {
		t.Errorf("cancelled: %v, want the cause", err)
	}
}
