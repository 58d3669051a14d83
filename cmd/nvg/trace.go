package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit/eval"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "trace",
		summary: "run the forward on given token windows and write it in the reference-fixture schema (safetensors)",
		usage: "[--teacher MODEL] [--student STUDENT] --ids IDS.json -o OUT.safetensors [--k 32] [--host] [--stream]\n\n" +
			"IDS.json is a JSON array of windows of token ids, all of one length, e.g. [[1,2,3],[4,5,6]].\n" +
			"OUT holds ids [nb,t] i64, hidden.0..hidden.L [nb,t,H] f32 (hidden.0 the embeddings, hidden.L for\n" +
			"L < layers the output of layer L-1, the last one after the final norm), logsumexp [nb,t] f64,\n" +
			"teacher_topk_ids [nb,t,k] i64, teacher_topk_logprob [nb,t,k] f64 and logits_row0 [t,vocab] f32.\n" +
			"With --student, OUT also holds, for STUDENT against the teacher's top-k (renormalised over the k),\n" +
			"student_kl_per_token [nb,t] f64, student_loss [1] f64, grad.embeds [nb,t,H] f32 (d loss/d input\n" +
			"embeddings), grad.<gain> f64 for every RMSNorm gain and grad.<tensor>.p<i>.h|l|g f64 for every BLR\n" +
			"path (one student step's gradients: nvgkit.Step, or host.Net.StudentLossGrad with --host).\n" +
			"It runs on the GPU (f16 weights, f32 arithmetic; k ≤ 64) unless --host asks for the float64 host path.",
		run: runTrace,
	})
}

// readIDs reads IDS.json (eval.ParseIDs).
func readIDs(path string) ([][]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--ids: %v", err)
	}
	ids, err := eval.ParseIDs(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}

// traceFlags are nvg trace's flags.
type traceFlags struct {
	teacher, ids, out, student string
	k                          int
	onHost, stream             bool
}

func (f *traceFlags) bind(c *command) *flag.FlagSet {
	fs := newFlags(c)
	fs.StringVar(&f.teacher, "teacher", "", "teacher model (default: the embedded tiny teacher)")
	fs.StringVar(&f.ids, "ids", "", "IDS.json: a JSON array of windows of token ids (required)")
	fs.StringVar(&f.out, "o", "", "output .safetensors file (required)")
	fs.IntVar(&f.k, "k", 32, "top-k ids and log-probs kept per token")
	fs.BoolVar(&f.onHost, "host", false, "compute on the host in float64 (reference path) instead of the GPU")
	fs.BoolVar(&f.stream, "stream", false, "GPU: stream the layers' and the head's weights (at most two layers or two head blocks on the GPU at once)")
	fs.StringVar(&f.student, "student", "", "student model (.cmf, BLR or dense): also write its loss and gradients against the teacher's top-k")
	return fs
}

// check validates k and the ids against the teacher's configuration.
func (f *traceFlags) check(ids [][]int, cfg arch.Config) error {
	if f.k < 1 || f.k > cfg.VocabSize {
		return usagef("--k must be in [1, vocab_size = %d], got %d", cfg.VocabSize, f.k)
	}
	if err := eval.CheckIDs(ids, cfg.VocabSize); err != nil {
		return fmt.Errorf("%s: %w", f.ids, err)
	}
	if !f.onHost && f.k > gpu.MaxTopK {
		return usagef("--k must be ≤ %d on the GPU, got %d (or pass --host)", gpu.MaxTopK, f.k)
	}
	return nil
}

func runTrace(args []string) error {
	c := commands["trace"]
	var f traceFlags
	fs := f.bind(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if f.ids == "" || f.out == "" {
		return usagef("--ids and -o are required")
	}
	ids, err := readIDs(f.ids)
	if err != nil {
		return err
	}
	m, err := train.OpenModel(f.teacher)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := f.check(ids, m.Config); err != nil {
		return err
	}
	start := time.Now()
	dev, err := deviceUnless(f.onHost)
	if err != nil {
		return err
	}
	tr, err := eval.Trace(dev, m, ids, f.k, f.stream)
	dev.Close()
	if err != nil {
		return err
	}
	pathName := map[bool]string{false: eval.PathGPU, true: eval.PathHost}[f.onHost]
	ts, err := eval.TraceTensors(ids, tr, m.Config, f.k)
	if err != nil {
		return err
	}
	meta := map[string]string{"producer": "nvg trace", "path": pathName, "model": train.ModelName(f.teacher), "k": fmt.Sprint(f.k)}
	if f.student != "" {
		st, err := f.traceStudent(m.Config, ids, tr.TopKIDs, tr.TopKLogProbs)
		if err != nil {
			return err
		}
		ts = append(ts, st...)
		meta["student"] = f.student
	}
	if err := cmf.WriteSafetensors(f.out, ts, meta); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d windows × %d tokens, %d hidden states, top-%d (%s, %.1fs)\n", f.out, tr.NB, tr.T, len(tr.Hidden), f.k, pathName, time.Since(start).Seconds())
	return nil
}

// traceStudent returns the tensors of the student's loss and gradients against the teacher's
// top-k (eval.StudentTrace).
func (f *traceFlags) traceStudent(cfg arch.Config, ids [][]int, topIDs []int, topLogProbs []float64) ([]*cmf.Tensor, error) {
	sm, err := train.OpenModel(f.student)
	if err != nil {
		return nil, err
	}
	defer sm.Close()
	if err := eval.CheckStudent(cfg, sm.Config); err != nil {
		return nil, fmt.Errorf("--student %s: %w", f.student, err)
	}
	dev, err := deviceUnless(f.onHost)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	sg, err := eval.StudentTrace(dev, cfg, sm, ids, topIDs, topLogProbs, f.k)
	if err != nil {
		return nil, err
	}
	fmt.Printf("student %s: loss %.8g over %d tokens, %d gradients\n", f.student, sg.Loss, len(ids)*len(ids[0]), len(sg.Grads))
	return eval.StudentTensors(sg, sm, len(ids), len(ids[0]))
}
