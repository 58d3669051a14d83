package nvgkit_test

import (
	"testing"

	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// BenchmarkStep times one student step (Step: checkpointed forward, KL head, per-layer
// recompute + backward) on the tiny teacher compressed at 1 bit per weight (all 8 layers,
// paths auto), nb = 2 windows of t = 256 tokens against the teacher's top-32. It reports
// tokens/s, the peak GPU bytes above the device's baseline while the student is loaded and
// stepping (peak-bytes: weights, gradients and Adam state, the work, and the recorder's
// per-layer temporaries), and the part the formulas give in advance (formula-bytes:
// Net.WeightBytes + Net.StateBytes + StudentWorkBytes + the top-k buffers).
func BenchmarkStep(b *testing.B) {
	const nb, T, k = 2, 256, 32
	d, net, w, ids, top, base := tinyStudentStep(b, nb, T, k)
	defer net.Release()
	defer w.Release()
	if _, err := nvgkit.Step(net, w, ids, top); err != nil { // warm-up: compile the pipelines
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := nvgkit.Step(net, w, ids, top); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(nb*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(d.MemStats().PeakBytes-base), "peak-bytes")
	formula := net.WeightBytes() + net.StateBytes() + nvgkit.StudentWorkBytes(net.Config, nb, T) + 8*nb*T*k
	b.ReportMetric(float64(formula), "formula-bytes")
	if w.Bytes() != nvgkit.StudentWorkBytes(net.Config, nb, T)+8*nb*T*k {
		b.Errorf("work holds %d bytes, the formula says %d", w.Bytes(), nvgkit.StudentWorkBytes(net.Config, nb, T)+8*nb*T*k)
	}
}

// BenchmarkOptimizerStep times a whole optimizer step as Trainer runs it — ZeroGrads, Step,
// ClipGrads, Adam — on the tiny student at nb = 2 windows of t = 64 tokens (the H200 soak's
// geometry in docs/RELIABILITY.md), where the GPU work is small and the step is bound by
// recording, submitting and synchronising: it reports ms/step and steps/s.
func BenchmarkOptimizerStep(b *testing.B) {
	const nb, T, k = 2, 64, 32
	_, net, w, ids, top, _ := tinyStudentStep(b, nb, T, k)
	defer net.Release()
	defer w.Release()
	step := 0
	opt := func() {
		step++
		if err := nvgkit.ZeroGrads(net); err != nil {
			b.Fatal(err)
		}
		if _, err := nvgkit.Step(net, w, ids, top); err != nil {
			b.Fatal(err)
		}
		if _, err := nvgkit.ClipGrads(net, 1); err != nil {
			b.Fatal(err)
		}
		// Small steps: the loss stays finite over any b.N.
		if err := nvgkit.Adam(net, optim.Default(), 1e-4, step); err != nil {
			b.Fatal(err)
		}
	}
	opt() // warm-up: compile the pipelines
	b.ResetTimer()
	for b.Loop() {
		opt()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// tinyStudentStep loads the tiny teacher compressed at 1 bit per weight as a Student with a
// work of nb windows of t tokens, and the teacher's top-k for fixed ids; base is the GPU
// bytes in use before the student was loaded (the peak is reset there).
func tinyStudentStep(b *testing.B, nb, T, k int) (d *gpu.Device, net *nvgkit.Net, w *nvgkit.Work, ids [][]int, top *nvgkit.TopK, base uint64) {
	d, m, tnet := kittest.TinyTeacher(b)
	ids = make([][]int, nb)
	for i := range ids {
		for j := 0; j < T; j++ {
			ids[i] = append(ids[i], (i*7919+j*104729)%m.Config.VocabSize)
		}
	}
	tw := newWork(b, d, tnet, nb, T)
	top, err := nvgkit.TeacherTopK(tnet, tw, ids, k)
	tw.Release()
	if err != nil {
		b.Fatal(err)
	}
	sm, _, err := compress.Model(m, compress.Options{BitsPerWeight: 1, Seed: 1, SVD: compress.SVDOptions{PowerIters: -1}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	base = d.MemStats().CurrentBytes
	d.ResetPeak()
	if net, err = nvgkit.LoadNet(d, sm, nvgkit.Student); err != nil {
		b.Fatal(err)
	}
	if w, err = nvgkit.NewWork(d, net, nb, T); err != nil {
		net.Release()
		b.Fatal(err)
	}
	return d, net, w, ids, top, base
}
