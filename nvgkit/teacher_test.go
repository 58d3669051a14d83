package nvgkit_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// newWork is nvgkit.NewWork(d, net, nb, T), failing t on an error; the caller releases it.
func newWork(t testing.TB, d *gpu.Device, net *nvgkit.Net, nb, T int) *nvgkit.Work {
	t.Helper()
	w, err := nvgkit.NewWork(d, net, nb, T)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// refused fails t unless err is an error mentioning want (the case is named name); it logs
// the error otherwise.
func refused(t testing.TB, name, want string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", name)
	} else if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %q does not mention %q", name, err, want)
	} else {
		t.Logf("%s: %v", name, err)
	}
}

func maxAbsDiff32(got []float32, want []float64) (d, ref float64) {
	for i := range want {
		e := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		d = math.Max(d, e)
		ref = math.Max(ref, math.Abs(want[i]))
	}
	return d, ref
}

// TestForwardFixtures runs the GPU forward of the tiny teacher (f16 weight planes, f32
// arithmetic) on the fixture's 2 windows × 64 tokens and compares it with the HF float64
// reference: every hidden.L within 2e-3 of the tensor's max |value|; the log-sum-exp within
// 1e-3 absolute; the top-32 ids equal wherever the fixture's neighbouring probabilities differ
// by more than 1e-3 (closer ones may swap under f16 weights). On both GEMM paths: on the
// cooperative-matrix one each tolerance grows by the f16 rounding of the GEMMs' activations
// (kittest.Path.Tol: the forward's GEMMs in series up to the value, at its magnitude).
func TestForwardFixtures(t *testing.T) {
	d, _, net := kittest.TinyTeacher(t)
	fx := tinytest.OpenFixtures(t)
	kittest.Paths(t, d, func(t *testing.T, path kittest.Path) {
		ids := fx.Windows(t)
		c := net.Config
		nb, T, K := len(ids), len(ids[0]), 32
		w := newWork(t, d, net, nb, T)
		defer w.Release()
		tr, err := nvgkit.Forward(net, w, ids, nvgkit.ForwardOptions{TopK: K, Logits0: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Hidden) != c.NumHiddenLayers+1 {
			t.Fatalf("%d hidden states, want %d", len(tr.Hidden), c.NumHiddenLayers+1)
		}
		for L := 0; L <= c.NumHiddenLayers; L++ {
			want := fx.Get(t, "hidden."+strconv.Itoa(L))
			if len(tr.Hidden[L]) != len(want) {
				t.Fatalf("hidden.%d: %d values, want %d", L, len(tr.Hidden[L]), len(want))
			}
			e, ref := maxAbsDiff32(tr.Hidden[L], want)
			tol := path.Tol(2e-3, kittest.ForwardStages(L, false), 1)
			t.Logf("hidden.%d: max abs err %.3g = %.3g of max |ref| %.3g", L, e, e/ref, ref)
			if !(e <= tol*ref) {
				t.Errorf("hidden.%d: max abs error %.3g > %.3g · %.3g", L, e, tol, ref)
			}
		}
		logits := fx.Get(t, "logits_row0")
		stages := kittest.ForwardStages(c.NumHiddenLayers, false)
		e, ref := maxAbsDiff32(tr.Logits0, logits)
		t.Logf("logits_row0: max abs err %.3g (max |ref| %.3g)", e, ref)
		if tol := path.Tol(2e-3, stages, 1); !(e <= tol*ref) {
			t.Errorf("logits_row0: max abs error %.3g > %.3g · %.3g", e, tol, ref)
		}
		top := tr.TopK
		if top == nil || top.NB != nb || top.T != T || top.K != K {
			t.Fatalf("top-k shape: %+v", top)
		}
		wantIDs := fx.Get(t, "teacher_topk_ids")
		idsInt := make([]int, len(wantIDs))
		for i, v := range wantIDs {
			idsInt[i] = int(v)
		}
		checkTopK(t, "fixture", path, stages, ref, top, idsInt, fx.Get(t, "teacher_topk_logprob"), fx.Get(t, "logsumexp"))

		// Fewer windows than the work holds: window 1 alone (padded with itself) must give
		// exactly window 1's rows of the full run, since windows share nothing.
		one, err := nvgkit.TeacherTopK(net, w, ids[1:], K)
		if err != nil {
			t.Fatal(err)
		}
		if one.NB != 1 || len(one.IDs) != T*K || len(one.LSE) != T {
			t.Fatalf("one window: NB %d, %d ids, %d lse", one.NB, len(one.IDs), len(one.LSE))
		}
		for i := range one.IDs {
			if one.IDs[i] != top.IDs[T*K+i] || math.Float32bits(one.Probs[i]) != math.Float32bits(top.Probs[T*K+i]) {
				t.Fatalf("one window: entry %d is (%d, %g), the two-window run had (%d, %g)", i, one.IDs[i], one.Probs[i], top.IDs[T*K+i], top.Probs[T*K+i])
			}
		}
		if i := sameBits(one.LSE, top.LSE[T:]); i >= 0 {
			t.Errorf("one window: lse[%d] = %g, the two-window run had %g", i, one.LSE[i], top.LSE[T+i])
		}
	})
}

// checkTopK compares a GPU top-k with a float64 reference (its top-K ids and log-probs per
// token, and log-sum-exp) on GEMM path path, with stages f16-rounded GEMMs in series before
// the logits (kittest.ForwardStages) and ref the logits' magnitude: the log-sum-exp within
// path.Tol(1e-3, stages, ref) absolute and the log-probs within path.Tol(2e-3, stages, ref)
// (on the f32 path 1e-3 and 2e-3: f16 weights, f32 arithmetic); the renormalised
// probabilities sum to 1 within 1e-5; the ids equal wherever the reference's neighbouring
// probabilities differ by more than path.Tol(1e-3, stages, 1) (closer ones may swap).
func checkTopK(t *testing.T, name string, path kittest.Path, stages int, ref float64, top *nvgkit.TopK, wantIDs []int, wantLP, wantLSE []float64) {
	t.Helper()
	K, rows := top.K, top.NB*top.T
	if len(top.IDs) != rows*K || len(top.Probs) != rows*K || len(top.LSE) != rows {
		t.Fatalf("%s: top-k shape: %+v", name, top)
	}
	if len(wantIDs) != rows*K || len(wantLP) != rows*K || len(wantLSE) != rows {
		t.Fatalf("%s: reference of %d ids, %d log-probs, %d lse for %d tokens of top-%d", name, len(wantIDs), len(wantLP), len(wantLSE), rows, K)
	}
	var lseErr float64
	for i := range wantLSE {
		lseErr = math.Max(lseErr, math.Abs(float64(top.LSE[i])-wantLSE[i]))
	}
	t.Logf("%s: logsumexp: max abs err %.3g", name, lseErr)
	if tol := path.Tol(1e-3, stages, ref); !(lseErr <= tol) {
		t.Errorf("%s: logsumexp: max abs error %.3g > %.3g", name, lseErr, tol)
	}
	sep := path.Tol(1e-3, stages, 1) // neighbouring probabilities closer than this may swap
	var lpErr, probErr float64
	differ, checked, wrong := 0, 0, 0
	for r := 0; r < rows; r++ {
		var sum, sumW float64
		for j := 0; j < K; j++ {
			sum += float64(top.Probs[r*K+j])
			sumW += math.Exp(wantLP[r*K+j])
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("%s: token %d: renormalised probabilities sum to %.7f", name, r, sum)
		}
		for j := 0; j < K; j++ {
			i := r*K + j
			p := math.Exp(wantLP[i])
			lpErr = math.Max(lpErr, math.Abs(float64(top.LogProbs[i])-wantLP[i]))
			probErr = math.Max(probErr, math.Abs(float64(top.Probs[i])-p/sumW))
			if int(top.IDs[i]) != wantIDs[i] {
				differ++
			}
			if (j > 0 && math.Abs(math.Exp(wantLP[i-1])-p) <= sep) || (j+1 < K && math.Abs(math.Exp(wantLP[i+1])-p) <= sep) {
				continue
			}
			checked++
			if int(top.IDs[i]) != wantIDs[i] {
				wrong++
				if wrong <= 5 {
					t.Errorf("%s: token %d rank %d: id %d, want %d (p %.5g, well separated from its neighbours)", name, r, j, top.IDs[i], wantIDs[i], p)
				}
			}
		}
	}
	t.Logf("%s: top-%d: %d of %d ids differ; %d well-separated ranks checked, %d wrong; max log-prob abs err %.3g, max renormalised prob abs err %.3g",
		name, K, differ, rows*K, checked, wrong, lpErr, probErr)
	if tol := path.Tol(2e-3, stages, ref); !(lpErr <= tol) {
		t.Errorf("%s: top-k log-probs: max abs error %.3g > %.3g", name, lpErr, tol)
	}
}

// passPeak loads m (streamed or resident) on top of what the device holds, runs TeacherTopK on
// ids and returns the top-k, the net's layer bytes and the peak GPU bytes of load + pass
// above the bytes held before.
func passPeak(t *testing.T, d *gpu.Device, m *cmf.Model, ids [][]int, k int, streamed bool) (*nvgkit.TopK, []uint64, uint64) {
	t.Helper()
	r := runTeacher(t, d, m, ids, k, streamed, 1)
	want := len(r.layerBytes)
	if streamed {
		want = min(2, len(r.layerBytes))
	}
	if r.maxLayers != want {
		t.Errorf("streamed=%v, %d layers: %d layers were on the GPU at once, want %d", streamed, len(r.layerBytes), r.maxLayers, want)
	}
	return r.top, r.layerBytes, r.peak
}

// teacherRun is what runTeacher measured of a freshly loaded teacher net.
type teacherRun struct {
	top           *nvgkit.TopK // of the last pass
	layerBytes    []uint64     // Net.LayerBytes of each layer
	peak          uint64       // the peak GPU bytes of load and passes above the bytes held before
	maxLayers     int          // Net.MaxLayersOnGPU
	uploadedBytes uint64       // Net.UploadedBytes after the passes
}

// runTeacher loads m as a Teacher (streamed or resident), runs TeacherTopK passes times on
// ids and releases the net.
func runTeacher(t *testing.T, d *gpu.Device, m *cmf.Model, ids [][]int, k int, streamed bool, passes int) teacherRun {
	t.Helper()
	base := liveMem(d).CurrentBytes // no kept scratch: every run starts from the same state
	d.ResetPeak()
	var opts []nvgkit.LoadOption
	if streamed {
		opts = append(opts, nvgkit.StreamLayers())
	}
	net, err := nvgkit.LoadNet(d, m, nvgkit.Teacher, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Release()
	w := newWork(t, d, net, len(ids), len(ids[0]))
	defer w.Release()
	var r teacherRun
	for range passes {
		if r.top, err = nvgkit.TeacherTopK(net, w, ids, k); err != nil {
			t.Fatal(err)
		}
	}
	for l := range net.Config.NumHiddenLayers {
		r.layerBytes = append(r.layerBytes, net.LayerBytes(l))
	}
	r.peak, r.maxLayers, r.uploadedBytes = d.MemStats().PeakBytes-base, net.MaxLayersOnGPU(), net.UploadedBytes()
	return r
}

func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestStreamedMatchesResident checks that the layer-streamed teacher gives bit-identical
// top-k, probabilities and log-sum-exp to the resident one, that its peak GPU bytes are the
// resident peak less all layers plus at most two consecutive layers, and that the streamed
// peak does not grow with depth (the model truncated to 4 layers vs all 8) while the
// resident one does.
func TestStreamedMatchesResident(t *testing.T) {
	d, m, _ := kittest.TinyTeacher(t)
	d.SetScratchLimit(0) // exact peaks: no scratch kept between submits
	defer d.SetScratchLimit(gpu.DefaultScratchLimit)
	ids := tinytest.OpenFixtures(t).Windows(t)[:1] // one window of 64 tokens: four passes stay quick on lavapipe
	const k = 32
	nl := m.Config.NumHiddenLayers
	type run struct {
		top    *nvgkit.TopK
		layers []uint64
		peak   uint64
	}
	runs := map[[2]int]run{}
	for _, layers := range []int{nl / 2, nl} {
		mm := m
		if layers != nl {
			mm = tinytest.FirstLayers(t, m, layers)
		}
		for s, streamed := range []bool{false, true} {
			top, lb, peak := passPeak(t, d, mm, ids, k, streamed)
			runs[[2]int{layers, s}] = run{top, lb, peak}
			t.Logf("%d layers, streamed=%v: peak %d bytes above baseline", layers, streamed, peak)
		}
	}
	// Staging slots of one parameter each: every layer goes up in several uploads.
	restore := nvgkit.SetMaxStagerSlot(1)
	top, _, _ := passPeak(t, d, m, ids, k, true)
	restore()
	if diff := diffTopK(top, runs[[2]int{nl, 0}].top); diff != "" {
		t.Errorf("streamed through one-parameter staging slots: top-k differs from the resident pass: %s", diff)
	}
	for _, layers := range []int{nl / 2, nl} {
		res, str := runs[[2]int{layers, 0}], runs[[2]int{layers, 1}]
		if diff := diffTopK(res.top, str.top); diff != "" {
			t.Errorf("%d layers: streamed and resident top-k: %s", layers, diff)
		}
		var all, pair uint64
		for l, b := range res.layers {
			all += b
			if l > 0 {
				pair = max(pair, b+res.layers[l-1])
			}
		}
		if want := res.peak - all + pair; str.peak > want {
			t.Errorf("%d layers: streamed peak %d > resident peak %d − all layers %d + largest consecutive pair %d = %d",
				layers, str.peak, res.peak, all, pair, want)
		}
		t.Logf("%d layers: resident peak %d B, streamed peak %d B (layers %d B in all, largest pair %d B)", layers, res.peak, str.peak, all, pair)
	}
	s4, s8 := runs[[2]int{nl / 2, 1}].peak, runs[[2]int{nl, 1}].peak
	r4, r8 := runs[[2]int{nl / 2, 0}].peak, runs[[2]int{nl, 0}].peak
	if s8 != s4 {
		t.Errorf("streamed peak grows with depth: %d B at %d layers, %d B at %d", s4, nl/2, s8, nl)
	}
	if !(r8 > r4) || !(s8 < r8) {
		t.Errorf("resident peaks %d → %d B, streamed %d B: want the resident one to grow and exceed the streamed one", r4, r8, s8)
	}
}

// TestNLLMatchesHost compares the GPU perplexity of the tiny teacher with the float64 host
// path on three windows of 64 tokens (63 predictions each) cut from the fixture's held-out
// ids; the work holds two windows, so the second group is padded. They must agree to 0.5 %.
func TestNLLMatchesHost(t *testing.T) {
	d, m, net := kittest.TinyTeacher(t)
	ids := tinytest.OpenFixtures(t).Windows(t)
	windows := [][]int{ids[0], ids[1], append(append([]int(nil), ids[1][32:]...), ids[0][:32]...)}
	T := len(windows[0]) - 1
	w := newWork(t, d, net, 2, T)
	defer w.Release()
	var calls []int
	sum, count, err := nvgkit.NLL(net, w, windows, func(done, total int) {
		if total != len(windows) {
			t.Errorf("progress total %d, want %d", total, len(windows))
		}
		calls = append(calls, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != len(windows)*T || len(calls) != 2 || calls[1] != len(windows) {
		t.Fatalf("count %d (want %d), progress calls %v", count, len(windows)*T, calls)
	}
	hn, err := host.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	hsum, hcount, err := hn.NLL(windows)
	if err != nil {
		t.Fatal(err)
	}
	gp, hp := math.Exp(sum/float64(count)), math.Exp(hsum/float64(hcount))
	rel := math.Abs(gp-hp) / hp
	t.Logf("perplexity: GPU %.5f, host f64 %.5f, relative difference %.3g (loss %.6f vs %.6f nats)", gp, hp, rel, sum/float64(count), hsum/float64(hcount))
	if !(rel <= 5e-3) {
		t.Errorf("GPU perplexity %.5f differs from the host's %.5f by %.3g > 0.5 %%", gp, hp, rel)
	}
	// Window-count independence: the first window alone gives its own share of the sum.
	s1, c1, err := nvgkit.NLL(net, w, windows[:1], nil)
	if err != nil {
		t.Fatal(err)
	}
	h1, _, _ := hn.NLL(windows[:1])
	if c1 != T || math.Abs(s1-h1) > 5e-3*math.Abs(h1) {
		t.Errorf("window 0 alone: GPU NLL %.6f over %d tokens, host %.6f", s1, c1, h1)
	}
}

// TestTeacherErrors checks that bad arguments are refused in Go, before anything is
// submitted, with errors that say what is wrong; and that NewWork refuses buffers over the
// device's binding limit, naming the buffer and its bytes.
func TestTeacherErrors(t *testing.T) {
	d, _, net := kittest.TinyTeacher(t)
	V := net.Config.VocabSize
	w := newWork(t, d, net, 2, 8)
	defer w.Release()
	win := func(n int) []int { return make([]int, n) }
	bad := func(name, want string, err error) { t.Helper(); refused(t, name, want, err) }
	before := liveMem(d)
	_, err := nvgkit.TeacherTopK(net, w, nil, 32)
	bad("no windows", "no windows", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{win(8), win(8), win(8)}, 32)
	bad("too many windows", "at most 2", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{win(8), win(7)}, 32)
	bad("short window", "window 1 has 7 tokens", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{{1, 2, 3, 4, 5, 6, 7, V}}, 32)
	bad("id = vocab", "token 7 of window 0", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{{1, 2, -1, 4, 5, 6, 7, 8}}, 32)
	bad("negative id", "outside the vocabulary", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{win(8)}, 0)
	bad("k = 0", "k = 0", err)
	_, err = nvgkit.TeacherTopK(net, w, [][]int{win(8)}, gpu.MaxTopK+1)
	bad("k > 64", "k = 65", err)
	_, _, err = nvgkit.NLL(net, w, [][]int{win(8)}, nil)
	bad("NLL window of t", "want t+1 = 9", err)
	_, _, err = nvgkit.NLL(net, w, [][]int{win(9), win(9), win(9), append(win(8), V)}, nil)
	bad("NLL bad id in a later group", "token 8 of window 3", err)
	_, err = nvgkit.Forward(net, w, [][]int{win(8)}, nvgkit.ForwardOptions{TopK: -1})
	bad("Forward TopK < 0", "TopK", err)
	if after := liveMem(d); after.Buffers != before.Buffers || after.CurrentBytes != before.CurrentBytes {
		t.Errorf("refused calls left buffers behind: %+v → %+v", before, after)
	}

	_, err = nvgkit.NewWork(d, net, 0, 8)
	bad("nb = 0", "nb = 0", err)
	maxBind := d.Info().MaxStorageBindingSize
	tooLong := int(maxBind/(4*uint64(net.Config.IntermediateSize))) + 1
	_, err = nvgkit.NewWork(d, net, 1, tooLong)
	if tooLong <= 131072 {
		// The buffer limit is reached before the head's token cap (lavapipe's 128 MiB).
		bad("work over the binding limit", "maxStorageBufferBindingSize", err)
		if err != nil && !strings.Contains(err.Error(), "work.gate") {
			t.Errorf("binding-limit error does not name the buffer: %v", err)
		}
	} else {
		// With a large binding limit (2 GiB on an H200) the token cap of the head's logits
		// scratch refuses the work first.
		bad("work over the token cap", "use at most 131072 tokens per pass", err)
	}
	_, err = nvgkit.NewWork(d, net, 2, 65537)
	bad("head scratch over 64 MiB", "logits scratch", err)
	if after := liveMem(d); after.Buffers != before.Buffers {
		t.Errorf("refused NewWork left %d buffers behind", after.Buffers-before.Buffers)
	}

	w2 := newWork(t, d, net, 1, 8)
	w2.Release()
	_, err = nvgkit.TeacherTopK(net, w2, [][]int{win(8)}, 4)
	bad("released work", "released", err)
	_, err = nvgkit.LoadNet(d, nil, nvgkit.Teacher)
	bad("nil model", "nil model", err)
}

// BenchmarkTeacherTopK measures the teacher pass of the tiny teacher on nb = 4 windows of
// t = 512 tokens (top-32), resident and layer-streamed, and reports tokens/s and the peak
// GPU bytes of load and passes (weights, work, head scratch) above what the device held
// before.
func BenchmarkTeacherTopK(b *testing.B) {
	d, m, _ := kittest.TinyTeacher(b)
	const nb, T, k = 4, 512, 32
	ids := make([][]int, nb)
	for i := range ids {
		for j := 0; j < T; j++ {
			ids[i] = append(ids[i], (i*7919+j*104729)%m.Config.VocabSize)
		}
	}
	for _, mode := range []struct {
		name string
		opts []nvgkit.LoadOption
	}{{"resident", nil}, {"streamed", []nvgkit.LoadOption{nvgkit.StreamLayers()}}} {
		b.Run(mode.name, func(b *testing.B) {
			base := d.MemStats().CurrentBytes
			d.ResetPeak()
			net, err := nvgkit.LoadNet(d, m, nvgkit.Teacher, mode.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer net.Release()
			w := newWork(b, d, net, nb, T)
			defer w.Release()
			if _, err := nvgkit.TeacherTopK(net, w, ids, k); err != nil { // warm-up: compile the pipelines
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := nvgkit.TeacherTopK(net, w, ids, k); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(nb*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(d.MemStats().PeakBytes-base), "peak-bytes")
		})
	}
}

// TestLoadNetErrors checks that LoadNet names the tensor it cannot use — a weight beyond
// f16's range, a missing tensor, a wrong shape — and leaves nothing allocated on the GPU.
func TestLoadNetErrors(t *testing.T) {
	d, m, _ := kittest.TinyTeacher(t)
	base := tinytest.FirstLayers(t, m, 1)
	d.FreeScratch() // a refused LoadNet frees kept scratch: count only the nets' buffers
	before := d.MemStats()
	clone := func() *cmf.Model { return cloneModel(t, base) }
	const victim = "model.layers.0.mlp.up_proj.weight"
	shape := base.Tensors[victim].Shape
	big := make([]float64, shape[0]*shape[1])
	big[12345] = 70000 // beyond f16's 65504
	bigT, err := cmf.NewFloatTensor(victim, cmf.F32, shape, big)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(m *cmf.Model)
	}{
		{"weight beyond f16", victim + " (F32): element 12345 = 70000 is not finite in f16", func(m *cmf.Model) { m.Tensors[victim] = bigT }},
		{"missing tensor", "model.layers.0.linear_attn.A_log is missing", func(m *cmf.Model) { m.Delete("model.layers.0.linear_attn.A_log") }},
		{"wrong shape", "model.norm.weight: shape [255]", func(m *cmf.Model) {
			tn, _ := cmf.NewFloatTensor("model.norm.weight", cmf.F32, []int{255}, make([]float64, 255))
			m.Tensors["model.norm.weight"] = tn
		}},
	} {
		mm := clone()
		tc.edit(mm)
		_, err := nvgkit.LoadNet(d, mm, nvgkit.Teacher)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		if after := d.MemStats(); after.Buffers != before.Buffers || after.CurrentBytes != before.CurrentBytes {
			t.Errorf("%s: failed LoadNet left GPU buffers behind: %+v → %+v", tc.name, before, after)
		}
	}
}
