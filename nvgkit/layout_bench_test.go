package nvgkit_test

import (
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
)

// BenchmarkMixerLayout times the two ways of laying out a layer's fused input projections
// at the 0.8B synthetic geometry, nb·t = 8·512 rows (DESIGN.md §3, "one GPU layer layout"):
//
//   - attention/split: q_proj stored as its query and gate rows, two GEMMs [rows, nh·hd];
//   - attention/fused: the whole q_proj, one GEMM [rows, 2·nh·hd] and SplitQueryGate;
//   - delta/split: in_proj_qkv and conv1d stored as their q, k, v blocks, three GEMMs and
//     three convolutions;
//   - delta/fused: one GEMM [rows, C], one convolution over C channels and three ColumnCopy.
//
// Each iteration records 64 repetitions into one submit and waits for it; ns/layer is one
// repetition (wall clock), gpu-ns/layer its GPU time from the timestamp profile (where the
// device has timestamp queries; DESIGN.md §3 quotes these).
func BenchmarkMixerLayout(b *testing.B) {
	d, c := gpu08B(b)
	const nb, t, reps = 8, 512, 64
	rows, H := nb*t, c.HiddenSize
	nh, hd := c.NumAttentionHeads, c.HeadDim
	Q := nh * hd
	hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	QK, VV := hk*dk, hv*dv
	C := 2*QK + VV
	var bufs []*gpu.Buffer
	defer func() {
		for _, x := range bufs {
			x.Release()
		}
	}()
	seed := uint32(0)
	buf := func(dt gpu.DType, shape ...int) *gpu.Buffer {
		x, err := d.NewBuffer("bench", dt, shape...)
		if err != nil {
			b.Fatal(err)
		}
		bufs = append(bufs, x)
		seed++
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.FillRandomUniform(r, x, seed, 0, -0.05, 0.05) }); err != nil {
			b.Fatal(err)
		}
		return x
	}
	xn := buf(gpu.F32, rows, H)
	wq, wg, wqg := buf(gpu.F16, Q, H), buf(gpu.F16, Q, H), buf(gpu.F16, 2*Q, H)
	q, gate, qg := buf(gpu.F32, rows, Q), buf(gpu.F32, rows, Q), buf(gpu.F32, rows, 2*Q)
	wdq, wdk, wdv, wqkv := buf(gpu.F16, QK, H), buf(gpu.F16, QK, H), buf(gpu.F16, VV, H), buf(gpu.F16, C, H)
	cq, ck, cv, cw := buf(gpu.F32, QK, K), buf(gpu.F32, QK, K), buf(gpu.F32, VV, K), buf(gpu.F32, C, K)
	qa, ka, va, mixed := buf(gpu.F32, rows, QK), buf(gpu.F32, rows, QK), buf(gpu.F32, rows, VV), buf(gpu.F32, rows, C)
	qb, kb, vb, conv := buf(gpu.F32, rows, QK), buf(gpu.F32, rows, QK), buf(gpu.F32, rows, VV), buf(gpu.F32, rows, C)
	variants := []struct {
		name string
		rec  func(r *gpu.Recorder) error
	}{
		{"attention/split", func(r *gpu.Recorder) error {
			return firstErr(gpu.Linear(r, xn, wq, q, rows, H, Q), gpu.Linear(r, xn, wg, gate, rows, H, Q))
		}},
		{"attention/fused", func(r *gpu.Recorder) error {
			return firstErr(gpu.Linear(r, xn, wqg, qg, rows, H, 2*Q), gpu.SplitQueryGate(r, qg, q, gate, rows, nh, hd))
		}},
		{"delta/split", func(r *gpu.Recorder) error {
			return firstErr(gpu.Linear(r, xn, wdq, qa, rows, H, QK), gpu.Linear(r, xn, wdk, ka, rows, H, QK),
				gpu.Linear(r, xn, wdv, va, rows, H, VV),
				gpu.CausalConv1dSiLU(r, qa, cq, qb, nb, t, QK, K), gpu.CausalConv1dSiLU(r, ka, ck, kb, nb, t, QK, K),
				gpu.CausalConv1dSiLU(r, va, cv, vb, nb, t, VV, K))
		}},
		{"delta/fused", func(r *gpu.Recorder) error {
			return firstErr(gpu.Linear(r, xn, wqkv, mixed, rows, H, C), gpu.CausalConv1dSiLU(r, mixed, cw, conv, nb, t, C, K),
				gpu.ColumnCopy(r, conv, qb, rows, C, 0, QK, 0, QK), gpu.ColumnCopy(r, conv, kb, rows, C, QK, QK, 0, QK),
				gpu.ColumnCopy(r, conv, vb, rows, C, 2*QK, VV, 0, VV))
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			run := func() {
				if err := d.Run(func(r *gpu.Recorder) error {
					for range reps {
						if err := v.rec(r); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if err := d.Sync(); err != nil { // Run submits; Sync waits for the GPU
					b.Fatal(err)
				}
			}
			run() // warm-up: compile the pipelines
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*reps), "ns/layer")
			b.StopTimer()
			if d.SetProfiling(true) == nil {
				d.ResetProfile()
				run()
				p := d.Profile()
				_ = d.SetProfiling(false)
				b.ReportMetric(float64(p.Total().Nanoseconds())/reps, "gpu-ns/layer")
				b.Logf("%s profile (%d repetitions):\n%s", v.name, reps, p)
			}
		})
	}
}

// BenchmarkTeacherPass times TeacherTopK (k = 32) of the 0.8B synthetic teacher over
// nb·t = 8·512 tokens: the 24 layers and the head.
func BenchmarkTeacherPass(b *testing.B) {
	d, c := gpu08B(b)
	net, err := bench.NewNet(d, c, nvgkit.Teacher, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer net.Release()
	const nb, t = 8, 512
	w, err := nvgkit.NewWork(d, net, nb, t)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Release()
	ids := make([][]int, nb)
	for i := range ids {
		for j := range t {
			ids[i] = append(ids[i], (i*7919+j*104729)%c.VocabSize)
		}
	}
	if _, err := nvgkit.TeacherTopK(net, w, ids, 32); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := nvgkit.TeacherTopK(net, w, ids, 32); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(nb*t)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// gpu08B opens the test device and returns the 0.8B synthetic config; it skips on a CPU
// adapter (the geometry is for a GPU).
func gpu08B(b *testing.B) (*gpu.Device, arch.Config) {
	d := gputest.Open(b)
	if d.Info().CPU {
		b.Skip("the 0.8B geometry is for a GPU, not a CPU adapter")
	}
	c, err := bench.Config("0.8B")
	if err != nil {
		b.Fatal(err)
	}
	return d, c
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
