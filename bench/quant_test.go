package bench_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
)

// TestSyntheticQuantTeacher builds the tiny geometry's 8-bit synthetic teachers (fp8, q8),
// resident and streamed (whose layers of one type share their weights, as NewNet's): finite
// log-sum-exps and a top-k mass like the f16 teacher's (random logits of σ ≈ 2), weights of
// the plan's bytes (TeacherMemory) — about half of the f16 teacher's projections — and a
// streamed pass that uploads every layer and the head once.
func TestSyntheticQuantTeacher(t *testing.T) {
	d := gputest.Open(t)
	cfg, err := bench.Config("tiny")
	if err != nil {
		t.Fatal(err)
	}
	const nb, T, k = 1, 16, 8
	ids := [][]int{make([]int, T)}
	for j := range T {
		ids[0][j] = j * 104729 % cfg.VocabSize
	}
	f16, err := bench.TeacherMemory(cfg, 0, nb, T, k, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []string{"fp8", "q8"} {
		format, err := bench.ParseTeacherDType(dt)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := bench.TeacherMemory(cfg, format, nb, T, k, false)
		if err != nil {
			t.Fatal(err)
		}
		var tops [2]*nvgkit.TopK
		for i, streamed := range []bool{false, true} {
			var opts []nvgkit.LoadOption
			if streamed {
				opts = append(opts, nvgkit.StreamLayers())
			}
			tn, err := bench.NewTeacher(d, cfg, format, 1, opts...)
			if err != nil {
				t.Fatal(err)
			}
			w, err := nvgkit.NewWork(d, tn, nb, T)
			if err != nil {
				t.Fatal(err)
			}
			tops[i], err = nvgkit.TeacherTopK(tn, w, ids, k)
			if err != nil {
				t.Fatal(err)
			}
			var layers uint64
			for l := range cfg.NumHiddenLayers {
				layers += tn.LayerBytes(l)
			}
			head := uint64(2*cfg.VocabSize*cfg.HiddenSize+3) &^ 3 // the f16 head (tied: the embedding)
			if streamed && tn.UploadedBytes() != layers+head {
				t.Errorf("%s streamed: uploaded %d bytes in a pass, layers hold %d and the head %d", dt, tn.UploadedBytes(), layers, head)
			}
			if !streamed && tn.WeightBytes() != plan.WeightBytes {
				t.Errorf("%s: weights %d bytes, plan %d", dt, tn.WeightBytes(), plan.WeightBytes)
			}
			w.Release()
			tn.Release()
		}
		var mass float64
		for i, top := range tops {
			mass = 0
			for _, lp := range top.LogProbs[:k] {
				mass += math.Exp(float64(lp))
			}
			for j, lse := range top.LSE {
				if math.IsNaN(float64(lse)) || math.IsInf(float64(lse), 0) {
					t.Fatalf("%s streamed=%v: lse[%d] = %g", dt, i == 1, j, lse)
				}
			}
			if !(mass > 1e-4 && mass < 0.9) {
				t.Errorf("%s streamed=%v: top-%d mass of token 0 = %g", dt, i == 1, k, mass)
			}
		}
		// The tiny geometry's projections are about 61 % of its weights (the tied embedding
		// the rest): halving them leaves about 70 %.
		if r := float64(plan.WeightBytes) / float64(f16.WeightBytes); !(r > 0.6 && r < 0.8) {
			t.Errorf("%s: plan's weights %d bytes, f16's %d: ratio %.3f", dt, plan.WeightBytes, f16.WeightBytes, r)
		}
		t.Logf("%s: weights %d bytes (f16 %d), top-%d mass of token 0 %.4f", dt, plan.WeightBytes, f16.WeightBytes, k, mass)
	}
	if _, err := bench.ParseTeacherDType("int4"); err == nil {
		t.Error("teacher dtype int4: no error")
	}
	if _, err := bench.NewTeacher(d, cfg, gpu.QuantFormat(9), 1); err == nil {
		t.Error("NewTeacher of an unknown format: no error")
	}
}

const quantBenchFixture = `{"device": "NVIDIA H200", "driver": "NVIDIA 580.1", "backend": "vulkan", "date": "2026-12-10T18:00:00Z",
 "command": "nvg bench --model 27B --teacher-dtype f16,q8", "peak_tflops": 67, "peak_gbps": 4800,
 "results": [
  {"geom": "27B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "streamed", "teacher_dtype": "f16",
   "teacher": {"seconds": [6.5], "median_s": 6.5, "tok_s": 630, "peak_bytes": 6442450944, "peak_GiB": 6, "upload_bytes_per_pass": 48700000000},
   "student": {"seconds": [27], "median_s": 27, "tok_s": 150, "peak_GiB": 24}},
  {"geom": "27B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "streamed", "teacher_dtype": "q8",
   "teacher": {"seconds": [5.2], "median_s": 5.2, "tok_s": 787.5, "peak_bytes": 4831838208, "peak_GiB": 4.5, "upload_bytes_per_pass": 24740000000},
   "teacher_gap": {"tokens": 4096, "k": 32, "topk_kl_nats": 0.000123, "top1_agreement": 0.9951}}
 ]}`

// TestBenchReportQuant renders a report with an 8-bit teacher's row beside the f16 one's: both
// rows stay (a result is keyed by geometry and teacher dtype), the throughput table names the
// dtype, and the 8-bit table gives the ratios to f16, by hand: 787.5/630 = 1.25, 4.5/6 = 0.75,
// 24.74/48.7 = 0.51, and the q8 teacher's gap; the models table gives the teacher-only q8
// result no loss (it took no step).
func TestBenchReportQuant(t *testing.T) {
	js := filepath.Join(t.TempDir(), "nvg.json")
	if err := os.WriteFile(js, []byte(quantBenchFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := bench.RenderReport(&md, js+","+js, "", "", "", "", "md"); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"| 27B | streamed | 630 | — | — | 150 | — | — | 6.00 | — | — | 24.00 |",
		"| 27B | streamed, q8 | 788 | — | — | — | — | — | 4.50 |",
		"### 8-bit teachers",
		"| 27B | streamed | 630 | 1.00 | 6.00 | 1.00 | 48.70 | 1.00 | — | — |",
		"| 27B | streamed, q8 | 788 | 1.25 | 4.50 | 0.75 | 24.74 | 0.51 | 0.000123 | 99.51 % |",
		"| 27B q8 | 8 × 512 | 0.000 B | 0.0 M | 0.000 | 0.00 M | — | — |  |", // no step: no loss
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "| 27B | streamed, q8 | 788 | — | — | — |"); n != 1 {
		t.Errorf("the q8 row appears %d times in the throughput table after merging a file with itself", n)
	}
}

// TestTeacherGaps measures what fp8 and q8 cost the tiny geometry's synthetic teacher on 2
// windows of 17 random tokens. A random net amplifies weight errors far more than a trained
// one (measured: fp8 0.15 nats of top-8 KL, q8 0.007; the trained tiny teacher's are 0.0013
// and 0.00008), so the bounds are loose: positive KLs below 0.5 nats, q8 (a weight's error
// about 8× smaller than fp8's, so its KL about 64× smaller) below a quarter of fp8's and
// agreeing on 90 % of the top-1 tokens, NLLs within 0.2 nats of the f16 teacher's.
func TestTeacherGaps(t *testing.T) {
	d := gputest.Open(t)
	cfg, err := bench.Config("tiny")
	if err != nil {
		t.Fatal(err)
	}
	gaps, err := bench.TeacherGaps(d, cfg, []string{"f16", "fp8", "q8"}, 2, 16, 8, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	fp8, q8 := gaps["fp8"], gaps["q8"]
	t.Logf("fp8 %+v, q8 %+v", fp8, q8)
	if len(gaps) != 2 || fp8.Tokens != 32 || fp8.K != 8 || !(q8.TopKKL > 0 && q8.TopKKL < fp8.TopKKL/4 && fp8.TopKKL < 0.5) ||
		math.Abs(fp8.NLL-fp8.RefNLL) > 0.2 || math.Abs(q8.NLL-q8.RefNLL) > 0.2 || !(q8.Top1 >= 0.9) {
		t.Errorf("gaps %+v", gaps)
	}
	if _, err := bench.TeacherGaps(d, cfg, []string{"int4"}, 2, 16, 8, 2, 1); err == nil {
		t.Error("an unknown dtype: no error")
	}
}
