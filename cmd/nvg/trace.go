package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
)

func init() {
	register(&command{
		name:    "trace",
		summary: "run the forward on given token windows and write it in the reference-fixture schema (safetensors)",
		usage: "[--teacher MODEL] --ids IDS.json -o OUT.safetensors [--k 32] [--host] [--stream]\n\n" +
			"IDS.json is a JSON array of windows of token ids, all of one length, e.g. [[1,2,3],[4,5,6]].\n" +
			"OUT holds ids [nb,t] i64, hidden.0..hidden.L [nb,t,H] f32 (hidden.0 the embeddings, hidden.L for\n" +
			"L < layers the output of layer L-1, the last one after the final norm), logsumexp [nb,t] f64,\n" +
			"teacher_topk_ids [nb,t,k] i64, teacher_topk_logprob [nb,t,k] f64 and logits_row0 [t,vocab] f32.\n" +
			"It runs on the GPU (f16 weights, f32 arithmetic; k ≤ 64) unless --host asks for the float64 host path.",
		run: runTrace,
	})
}

// readIDs reads IDS.json: a non-empty JSON array of equally long, non-empty windows of ids.
func readIDs(path string) ([][]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--ids: %v", err)
	}
	var ids [][]int
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of windows of token ids: %w", path, err)
	}
	if len(ids) == 0 || len(ids[0]) == 0 {
		return nil, fmt.Errorf("%s: no windows, or an empty first window", path)
	}
	for i, w := range ids {
		if len(w) != len(ids[0]) {
			return nil, fmt.Errorf("%s: window %d has %d ids but window 0 has %d (windows must be of one length)", path, i, len(w), len(ids[0]))
		}
	}
	return ids, nil
}

func runTrace(args []string) error {
	c := commands["trace"]
	fs := newFlags(c)
	teacher := fs.String("teacher", "", "teacher model (default: the embedded tiny teacher)")
	idsPath := fs.String("ids", "", "IDS.json: a JSON array of windows of token ids (required)")
	out := fs.String("o", "", "output .safetensors file (required)")
	k := fs.Int("k", 32, "top-k ids and log-probs kept per token")
	onHost := fs.Bool("host", false, "compute on the host in float64 (reference path) instead of the GPU")
	stream := fs.Bool("stream", false, "GPU: stream the layers' weights (at most two layers on the GPU at once)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *idsPath == "" || *out == "" {
		return usagef("--ids and -o are required")
	}
	ids, err := readIDs(*idsPath)
	if err != nil {
		return err
	}
	m, err := openModel(*teacher)
	if err != nil {
		return err
	}
	defer m.Close()
	cfg := m.Config
	if *k < 1 || *k > cfg.VocabSize {
		return usagef("--k must be in [1, vocab_size = %d], got %d", cfg.VocabSize, *k)
	}
	for b, w := range ids {
		for i, id := range w {
			if id < 0 || id >= cfg.VocabSize {
				return fmt.Errorf("%s: window %d, position %d: id %d is outside the vocabulary [0, %d)", *idsPath, b, i, id, cfg.VocabSize)
			}
		}
	}
	if !*onHost && *k > gpu.MaxTopK {
		return usagef("--k must be ≤ %d on the GPU, got %d (or pass --host)", gpu.MaxTopK, *k)
	}
	start := time.Now()
	var tr *host.Trace
	pathName := "host-f64"
	if *onHost {
		net, err := host.Load(m)
		if err != nil {
			return err
		}
		if tr, err = net.Forward(ids, host.ForwardOptions{TopK: *k, Logits0: true}); err != nil {
			return err
		}
	} else {
		if tr, err = gpuTrace(m, ids, *k, *stream); err != nil {
			return err
		}
		pathName = "gpu-f16"
	}
	nb, t, H, V := tr.NB, tr.T, cfg.HiddenSize, cfg.VocabSize
	var ts []*cmf.Tensor
	add := func(tn *cmf.Tensor, err error) error {
		if err != nil {
			return err
		}
		ts = append(ts, tn)
		return nil
	}
	flat := make([]int, 0, nb*t)
	for _, w := range ids {
		flat = append(flat, w...)
	}
	if err := add(cmf.NewInt64Tensor("ids", []int{nb, t}, flat)); err != nil {
		return err
	}
	for l, h := range tr.Hidden {
		if err := add(cmf.NewFloatTensor(fmt.Sprintf("hidden.%d", l), cmf.F32, []int{nb, t, H}, h)); err != nil {
			return err
		}
	}
	if err := add(cmf.NewFloatTensor("logits_row0", cmf.F32, []int{t, V}, tr.Logits0)); err != nil {
		return err
	}
	if err := add(cmf.NewFloatTensor("logsumexp", cmf.F64, []int{nb, t}, tr.LogSumExp)); err != nil {
		return err
	}
	if err := add(cmf.NewInt64Tensor("teacher_topk_ids", []int{nb, t, *k}, tr.TopKIDs)); err != nil {
		return err
	}
	if err := add(cmf.NewFloatTensor("teacher_topk_logprob", cmf.F64, []int{nb, t, *k}, tr.TopKLogProbs)); err != nil {
		return err
	}
	meta := map[string]string{"producer": "nvg trace", "path": pathName, "model": modelName(*teacher), "k": fmt.Sprint(*k)}
	if err := cmf.WriteSafetensors(*out, ts, meta); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d windows × %d tokens, %d hidden states, top-%d (%s, %.1fs)\n", *out, nb, t, len(tr.Hidden), *k, pathName, time.Since(start).Seconds())
	return nil
}

// gpuTrace runs nvgkit.Forward on the GPU and returns its result in host.Trace's layout
// (float64 slices of the f32 values) so both paths write the same schema.
func gpuTrace(m *cmf.Model, ids [][]int, k int, stream bool) (*host.Trace, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	net, work, err := loadGPU(dev, m, len(ids), len(ids[0]), stream)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	defer work.Release()
	g, err := nvgkit.Forward(net, work, ids, nvgkit.ForwardOptions{TopK: k, Logits0: true})
	if err != nil {
		return nil, err
	}
	tr := &host.Trace{NB: g.NB, T: g.T, LogSumExp: f64s(g.LSE), TopKLogProbs: f64s(g.TopK.LogProbs), Logits0: f64s(g.Logits0)}
	for _, h := range g.Hidden {
		tr.Hidden = append(tr.Hidden, f64s(h))
	}
	tr.TopKIDs = make([]int, len(g.TopK.IDs))
	for i, id := range g.TopK.IDs {
		tr.TopKIDs[i] = int(id)
	}
	return tr, nil
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
