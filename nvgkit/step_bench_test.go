package nvgkit_test

import (
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
)

// BenchmarkStep times one student step (Step: checkpointed forward, KL head, per-layer
// recompute + backward) on the tiny teacher compressed at 1 bit per weight (all 8 layers,
// paths auto), nb = 2 windows of t = 256 tokens against the teacher's top-32. It reports
// tokens/s, the peak GPU bytes above the device's baseline while the student is loaded and
// stepping (peak-bytes: weights, gradients and Adam state, the work, and the recorder's
// per-layer temporaries), and the part the formulas give in advance (formula-bytes:
// Net.WeightBytes + Net.StateBytes + StudentWorkBytes + the top-k buffers).
func BenchmarkStep(b *testing.B) {
	d, m, tnet := tinyTeacher(b)
	const nb, T, k = 2, 256, 32
	ids := make([][]int, nb)
	for i := range ids {
		for j := 0; j < T; j++ {
			ids[i] = append(ids[i], (i*7919+j*104729)%m.Config.VocabSize)
		}
	}
	tw, err := nvgkit.NewWork(d, tnet, nb, T)
	if err != nil {
		b.Fatal(err)
	}
	top, err := nvgkit.TeacherTopK(tnet, tw, ids, k)
	tw.Release()
	if err != nil {
		b.Fatal(err)
	}
	sm, _, err := nvgkit.Compress(m, cmf.CompressOptions{BitsPerWeight: 1, Seed: 1, SVD: cmf.SVDOptions{PowerIters: -1}})
	if err != nil {
		b.Fatal(err)
	}
	base := d.MemStats().CurrentBytes
	d.ResetPeak()
	net, err := nvgkit.LoadNet(d, sm, nvgkit.Student)
	if err != nil {
		b.Fatal(err)
	}
	defer net.Release()
	w, err := nvgkit.NewWork(d, net, nb, T)
	if err != nil {
		b.Fatal(err)
	}
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
