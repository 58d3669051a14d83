package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/nvg-project/nvg/arch"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
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
	studentPath := fs.String("student", "", "student model (.cmf, BLR or dense): also write its loss and gradients against the teacher's top-k")
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
	if *studentPath != "" {
		sm, err := openModel(*studentPath)
		if err != nil {
			return err
		}
		defer sm.Close()
		if err := sameGeometry(cfg, sm.Config); err != nil {
			return fmt.Errorf("--student %s: %w", *studentPath, err)
		}
		var sg *host.StudentGrads
		if *onHost {
			sn, err := host.Load(sm)
			if err != nil {
				return err
			}
			if sg, err = sn.StudentLossGrad(ids, tr.TopKIDs, renormalised(tr.TopKLogProbs, *k), *k); err != nil {
				return err
			}
		} else if sg, err = gpuStudentTrace(sm, ids, tr.TopKIDs, renormalised(tr.TopKLogProbs, *k), *k); err != nil {
			return err
		}
		if err := add(cmf.NewFloatTensor("student_kl_per_token", cmf.F64, []int{nb, t}, sg.KLPerToken)); err != nil {
			return err
		}
		if err := add(cmf.NewFloatTensor("student_loss", cmf.F64, []int{1}, []float64{sg.Loss})); err != nil {
			return err
		}
		if err := add(cmf.NewFloatTensor("grad.embeds", cmf.F32, []int{nb, t, H}, sg.Embeds)); err != nil {
			return err
		}
		for _, name := range sg.Names() {
			shape := []int{len(sg.Grads[name])}
			if st, ok := sm.Tensors[name]; ok {
				shape = st.Shape // a gain keeps its tensor's shape
			}
			if err := add(cmf.NewFloatTensor("grad."+name, cmf.F64, shape, sg.Grads[name])); err != nil {
				return err
			}
		}
		meta["student"] = *studentPath
		fmt.Printf("student %s: loss %.8g over %d tokens, %d gradients\n", *studentPath, sg.Loss, nb*t, len(sg.Grads))
	}
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
	net, work, err := loadGPU(dev, m, len(ids), len(ids[0]), stream, false)
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

// sameGeometry reports whether a student's architecture can be distilled from the
// teacher's: same vocabulary, hidden size, layers and layer kinds, heads and head sizes.
func sameGeometry(t, s arch.Config) error {
	if !bytes.Equal(t.JSON(), s.JSON()) {
		return fmt.Errorf("the student's architecture differs from the teacher's (teacher vocab %d, hidden %d, %d layers; student vocab %d, hidden %d, %d layers)",
			t.VocabSize, t.HiddenSize, t.NumHiddenLayers, s.VocabSize, s.HiddenSize, s.NumHiddenLayers)
	}
	return nil
}

// renormalised returns exp(lp) renormalised over each token's k entries (float64).
func renormalised(lp []float64, k int) []float64 {
	out := make([]float64, len(lp))
	for r := 0; r+k <= len(lp); r += k {
		m := math.Inf(-1)
		for _, v := range lp[r : r+k] {
			m = math.Max(m, v)
		}
		var s float64
		for j, v := range lp[r : r+k] {
			out[r+j] = math.Exp(v - m)
			s += out[r+j]
		}
		for j := range k {
			out[r+j] /= s
		}
	}
	return out
}

// gpuStudentTrace runs one nvgkit.Step of the student sm over ids against the teacher's
// top-k (tid, prob [nb·t·k]) on the GPU and returns its loss and gradients in
// host.StudentGrads' layout (float64 copies of the f32 values).
func gpuStudentTrace(sm *cmf.Model, ids [][]int, tid []int, prob []float64, k int) (*host.StudentGrads, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	net, err := nvgkit.LoadNet(dev, sm, nvgkit.Student)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	work, err := nvgkit.NewWork(dev, net, len(ids), len(ids[0]))
	if err != nil {
		return nil, err
	}
	defer work.Release()
	top := &nvgkit.TopK{NB: len(ids), T: len(ids[0]), K: k, IDs: make([]int32, len(tid)), Probs: make([]float32, len(prob))}
	for i := range tid {
		top.IDs[i], top.Probs[i] = int32(tid[i]), float32(prob[i])
	}
	if err := nvgkit.ZeroGrads(net); err != nil {
		return nil, err
	}
	st, err := nvgkit.Step(net, work, ids, top)
	if err != nil {
		return nil, err
	}
	emb, err := nvgkit.EmbedGrads(work)
	if err != nil {
		return nil, err
	}
	grads, err := nvgkit.Grads(net)
	if err != nil {
		return nil, err
	}
	sg := &host.StudentGrads{Loss: st.Loss, KLPerToken: f64s(st.KLPerToken), Embeds: f64s(emb), Grads: map[string][]float64{}}
	for name, g := range grads {
		sg.Grads[name] = f64s(g)
	}
	return sg, nil
}
